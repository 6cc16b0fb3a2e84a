"""Real DeepSpeed's device memory per phase for one GPU fidelity case (cases.py).

    python3 conformance/gpu/ds_memory.py --case gpt2-bf16-z2 --steps 3 --out ds.json

One process, one rank (RANK=0, WORLD_SIZE=1, NCCL on the one GPU). Hugging Face's model
class from the case's config.json, deepspeed.initialize with the case's config, then
per optimizer step: engine(batch) (forward, loss included), engine.backward(loss),
engine.step(). Before each phase the caching allocator's peak is reset; after it,
torch.cuda.max_memory_allocated / max_memory_reserved are that phase's peak, counting
what was already held when it began (zrepro's definition: [Note: phase peaks] in
device/device_memory.h). A phase's figure is its maximum over the steps; `init` is
the peak from the first allocation to the end of deepspeed.initialize.
The JSON is written (atomically) whether the run fits or fails.

On a machine without a GPU (`--device cpu`, DS_ACCELERATOR=cpu, gloo) it runs the same
code with no figures: the dry run that checks the script before a GPU is lent.
"""
import argparse
import json
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cases import by_name, deepspeed_config  # noqa: E402


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class PhasePeaks:
    """Each phase's peak allocated / reserved bytes on the GPU (none on the CPU)."""

    def __init__(self, torch, cuda):
        self.torch, self.cuda, self.peaks = torch, cuda, {}

    def begin(self):
        if self.cuda:
            self.torch.cuda.synchronize()
            self.torch.cuda.reset_peak_memory_stats()

    def end(self, phase):
        if not self.cuda:
            self.peaks.setdefault(phase, {"peak_bytes": None, "peak_reserved_bytes": None})
            return
        self.torch.cuda.synchronize()
        a, r = self.torch.cuda.max_memory_allocated(), self.torch.cuda.max_memory_reserved()
        p = self.peaks.setdefault(phase, {"peak_bytes": 0, "peak_reserved_bytes": 0})
        p["peak_bytes"] = max(p["peak_bytes"], a)
        p["peak_reserved_bytes"] = max(p["peak_reserved_bytes"], r)


def build_model(case, transformers, torch, deepspeed, ds_config, device):
    cfg = transformers.AutoConfig.from_pretrained(case["model"])
    for k in ("resid_pdrop", "embd_pdrop", "attn_pdrop", "attention_dropout", "hidden_dropout"):
        if hasattr(cfg, k):
            setattr(cfg, k, 0.0)
    for k in ("n_positions", "max_position_embeddings"):
        if hasattr(cfg, k):
            setattr(cfg, k, max(getattr(cfg, k), case["seq"]))
    dtype = torch.bfloat16 if case["precision"] == "bf16" else torch.float32
    kwargs = {"attn_implementation": case["attn"], "dtype": dtype}
    if case["stage"] == 3:
        # Hugging Face's own ZeRO-3 path (what Trainer does): with an HfDeepSpeedConfig
        # alive, from_config builds under deepspeed.zero.Init (parameters partitioned as
        # they are made) and initialises each weight gathered. Kept alive on the model.
        from transformers.integrations import HfDeepSpeedConfig
        hf_ds = HfDeepSpeedConfig(ds_config)
        model = transformers.AutoModelForCausalLM.from_config(cfg, **kwargs)
        model._zrepro_hf_ds = hf_ds
    else:
        with torch.device(device):
            model = transformers.AutoModelForCausalLM.from_config(cfg, **kwargs)
    if case["activation_checkpointing"]:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.config.use_cache = False
    model.train()
    return model, cfg


def run(case, steps, device, out):
    rec = {"case": case["name"], "side": "deepspeed", "steps": steps, "device": device, "status": "running"}
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    t0 = time.time()
    import torch
    import transformers
    import deepspeed

    cuda = device == "cuda"
    rec["versions"] = {"torch": torch.__version__, "deepspeed": deepspeed.__version__,
                       "transformers": transformers.__version__, "cuda": torch.version.cuda,
                       "gpu": torch.cuda.get_device_name(0) if cuda else None}
    peaks = PhasePeaks(torch, cuda)
    ds_config = deepspeed_config(case)
    rec["ds_config"] = ds_config
    try:
        deepspeed.init_distributed(dist_backend="nccl" if cuda else "gloo")
        if cuda:
            torch.cuda.set_device(0)
        peaks.begin()
        model, cfg = build_model(case, transformers, torch, deepspeed, ds_config, device)
        rec["params"] = sum(p.ds_numel if hasattr(p, "ds_numel") else p.numel() for p in model.parameters())
        engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_config)
        peaks.end("init")
        rec["after_init_bytes"] = torch.cuda.memory_allocated() if cuda else None
        g = torch.Generator(device="cpu").manual_seed(1234)
        micro, seq, gas = case["micro"], case["seq"], case["gas"]
        losses = []
        for step in range(steps):
            for _ in range(gas):
                ids = torch.randint(0, cfg.vocab_size, (micro, seq), generator=g).to(engine.device)
                peaks.begin()
                loss = engine(input_ids=ids, labels=ids).loss
                peaks.end("forward")
                peaks.begin()
                engine.backward(loss)
                peaks.end("backward")
                losses.append(float(loss.detach()))
                peaks.begin()
                engine.step()  # DeepSpeed steps the optimizer at the accumulation boundary only
                peaks.end("step")
        rec["losses"] = losses
        rec["status"] = "ok"
    except torch.cuda.OutOfMemoryError as e:
        rec["status"] = "oom"
        rec["error"] = str(e).splitlines()[0]
    except Exception as e:  # recorded, not hidden: the comparison says this side failed
        rec["status"] = "error"
        rec["error"] = f"{type(e).__name__}: {e}"
        rec["traceback"] = traceback.format_exc()[-4000:]
    rec["phases"] = [dict(phase=k, **v) for k, v in peaks.peaks.items()]
    rec["peak_bytes"] = max((p["peak_bytes"] or 0 for p in rec["phases"]), default=0)
    rec["peak_reserved_bytes"] = max((p["peak_reserved_bytes"] or 0 for p in rec["phases"]), default=0)
    rec["wall_s"] = round(time.time() - t0, 2)
    write_json(out, rec)
    print(f"[ds_memory] {case['name']}: {rec['status']} peak {rec['peak_bytes']} reserved "
          f"{rec['peak_reserved_bytes']} ({rec['wall_s']} s)" + (f" {rec.get('error')}" if rec.get("error") else ""))
    return 0 if rec["status"] == "ok" else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", required=True)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--seq", type=int, help="override the case's sequence (the CPU dry run)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    case = by_name(a.case)
    if a.seq:
        case["seq"] = a.seq
    sys.exit(run(case, a.steps, a.device, a.out))


if __name__ == "__main__":
    main()
