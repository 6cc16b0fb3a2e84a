"""Real DeepSpeed's memory per phase on the CPU: the CPU record beside the GPU one.

For each case (conformance/gpu/cases.py's table, at a shorter sequence so that a case takes
seconds), real DeepSpeed trains Hugging Face's own model class built from the case's
config.json on the CPU accelerator (DS_ACCELERATOR=cpu, gloo), exactly as
conformance/gpu/ds_memory.py does on a GPU, while a TorchDispatchMode counts the live CPU
tensor storages (each storage once, from the op that made it until it is freed): the
peak of each phase (init, forward, backward, step; a phase counts what it began with) over
3 optimizer steps. A case runs in one process per rank (one or two ranks, each with one
intra-op thread when there are two) and has one row per rank, its zrepro flags naming the
rank (--world-size, --as-rank). Validated against the hand count of DeepSpeed's own code: GPT-2 (P =
124,439,808) bf16 ZeRO-2 holds 6.0 P after init, peaks at 10.0 P in init and 22.0 P in the
step, the H200 record's figures less cuBLAS's 64 MiB workspace (docs/lab/GPU.md).

tests/conformance/cpu_phases_process_test.cpp replans every case with `zrepro plan
--device cpu` and fails past 3% in any phase: the gap to real DeepSpeed is held closed in
CI without a GPU.

    DS_ACCELERATOR=cpu python conformance/cpu_phases.py --out conformance/results/cpu_phases.json
"""
import argparse
import copy
import json
import os
import subprocess
import sys
import time
import weakref

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "gpu"))
from cases import by_name, deepspeed_config  # noqa: E402

# (GPU case, sequence, micro-batch): families (GPT-2, Llama, Qwen2, Mixtral), stages 0-3,
# fp32 / bf16, optimizer and parameter offload, checkpointing, accumulation, one and two ranks.
CASES = [
    ("gpt2-fp32-z0", 256, 2), ("gpt2-bf16-z1", 256, 2), ("gpt2-bf16-z2", 256, 2), ("gpt2-bf16-z3", 256, 2),
    ("gpt2-bf16-z2-sdpa", 256, 2), ("gpt2-bf16-z2-ac", 256, 2), ("gpt2-bf16-z2-offopt", 256, 2),
    ("gpt2-bf16-z3-offload", 256, 2), ("gpt2-bf16-z3-offparam", 256, 2), ("gpt2-fp32-z3-gas4", 256, 1),
    ("llama-toy-bf16-z2-sdpa", 256, 2), ("llama-toy-bf16-z3-eager-gas2", 256, 2),
    ("qwen2.5-0.5b-bf16-z2-sdpa", 128, 1),
]
EXTRA = {  # cases of the table's shape that the GPU table does not have
    "gpt2-fp32-z2-gas2": dict(base="gpt2-bf16-z2", precision="fp32", gas=2),
    "llama-toy-fp32-z1-eager": dict(base="llama-toy-bf16-z2-sdpa", precision="fp32", stage=1, attn="eager"),
    "llama-toy-bf16-z1-ac": dict(base="llama-toy-bf16-z2-sdpa", stage=1, ac=True),
    # Two ranks (two processes over gloo, each recording its own peaks): the partitions halve
    # while the buckets, gathers and activations do not.
    "gpt2-bf16-z1-ranks2": dict(base="gpt2-bf16-z1", ranks=2),
    "gpt2-bf16-z2-ranks2": dict(base="gpt2-bf16-z2", ranks=2),
    "gpt2-bf16-z3-ranks2": dict(base="gpt2-bf16-z3", ranks=2),
    "gpt2-fp32-z2-gas2-ranks2": dict(base="gpt2-bf16-z2", precision="fp32", gas=2, ranks=2),
    "llama-toy-bf16-z3-eager-gas2-ranks2": dict(base="llama-toy-bf16-z3-eager-gas2", ranks=2),
    # A mixture of experts as transformers builds it (Mixtral, 8 experts, top 2).
    "mixtral-toy-bf16-z2-eager": dict(base="llama-toy-bf16-z2-sdpa", model="mixtral-toy", attn="eager"),
    "mixtral-toy-bf16-z3-eager": dict(base="llama-toy-bf16-z2-sdpa", model="mixtral-toy", attn="eager", stage=3),
    "mixtral-toy-bf16-z3-sdpa-ac-ranks2": dict(base="llama-toy-bf16-z2-sdpa", model="mixtral-toy", stage=3, ac=True,
                                               ranks=2),
    # Architectures zrepro has no model of, planned from transformers' own modules recorded under
    # FakeTensorMode (trainer/planner/hf_record.py; the recordings in results/recordings/).
    "qwen3-toy-bf16-z2-sdpa": dict(base="llama-toy-bf16-z2-sdpa", model_path="conformance/hf_models/qwen3-toy.json",
                                   recording="qwen3-toy-bf16-sdpa-s256"),
    "qwen3-toy-bf16-z3-sdpa-ac": dict(base="llama-toy-bf16-z2-sdpa", model_path="conformance/hf_models/qwen3-toy.json",
                                      recording="qwen3-toy-bf16-sdpa-s256", stage=3, ac=True),
    "phi3-toy-bf16-z1-sdpa": dict(base="llama-toy-bf16-z2-sdpa", model_path="conformance/hf_models/phi3-toy.json",
                                  recording="phi3-toy-bf16-sdpa-s256", stage=1),
    "gemma2-toy-bf16-z2-eager": dict(base="llama-toy-bf16-z2-sdpa", model_path="conformance/hf_models/gemma2-toy.json",
                                     recording="gemma2-toy-bf16-eager-s256", attn="eager"),
}
CASES += [("gpt2-fp32-z2-gas2", 256, 2), ("llama-toy-fp32-z1-eager", 256, 2), ("llama-toy-bf16-z1-ac", 256, 2),
          ("gpt2-bf16-z1-ranks2", 256, 2), ("gpt2-bf16-z2-ranks2", 256, 2), ("gpt2-bf16-z3-ranks2", 256, 2),
          ("gpt2-fp32-z2-gas2-ranks2", 256, 2), ("llama-toy-bf16-z3-eager-gas2-ranks2", 256, 2),
          ("mixtral-toy-bf16-z2-eager", 256, 2), ("mixtral-toy-bf16-z3-eager", 256, 2),
          ("mixtral-toy-bf16-z3-sdpa-ac-ranks2", 256, 2), ("qwen3-toy-bf16-z2-sdpa", 256, 2),
          ("qwen3-toy-bf16-z3-sdpa-ac", 256, 2), ("phi3-toy-bf16-z1-sdpa", 256, 2), ("gemma2-toy-bf16-z2-eager", 256, 2)]


def case_of(name, seq, micro):
    if name in EXTRA:
        e = EXTRA[name]
        c = by_name(e["base"])
        c["name"] = name
        if "model" in e:
            c["model_name"] = e["model"]
            c["model"] = os.path.join(os.path.dirname(c["model"]), e["model"] + ".json")
        if "model_path" in e:
            c["model_name"] = os.path.basename(e["model_path"])[:-5]
            c["model"] = os.path.join(ROOT, e["model_path"])
            c["recording"] = "conformance/results/recordings/" + e["recording"] + ".tape.json"
        if "precision" in e:
            c["precision"] = e["precision"]
            c["ds_config"].pop("bf16", None)
            if e["precision"] == "bf16":
                c["ds_config"]["bf16"] = {"enabled": True}
        if "stage" in e:
            c["stage"] = e["stage"]
            c["ds_config"]["zero_optimization"]["stage"] = e["stage"]
        if "gas" in e:
            c["gas"] = e["gas"]
            c["ds_config"]["gradient_accumulation_steps"] = e["gas"]
        if "attn" in e:
            c["attn"] = e["attn"]
        if e.get("ac"):
            c["activation_checkpointing"] = True
        c["ranks"] = e.get("ranks", 1)
    else:
        c = by_name(name)
    c = copy.deepcopy(c)
    c.setdefault("ranks", 1)
    c["seq"], c["micro"] = seq, micro
    c["ds_config"]["train_micro_batch_size_per_gpu"] = micro
    return c


class LiveStorages:
    """Live CPU tensor storages made by ops under this mode, and their peak."""

    def __init__(self, torch):
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_flatten
        tracker = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                for t in tree_flatten(out)[0]:
                    tracker.see(t)
                return out

        self.torch, self.mode = torch, Mode()
        self.live, self.total, self.peak = {}, 0, 0

    def see(self, t):
        if not isinstance(t, self.torch.Tensor) or t.device.type != "cpu":
            return
        st = t.untyped_storage()
        key = st.data_ptr()
        if key == 0 or key in self.live:
            return
        self.live[key] = st.nbytes()
        self.total += st.nbytes()
        self.peak = max(self.peak, self.total)
        weakref.finalize(st, self.gone, key)

    def gone(self, key):
        self.total -= self.live.pop(key, 0)

    def begin(self):
        self.peak = self.total


def run(c, steps):
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    import torch
    import transformers
    import deepspeed
    from ds_memory import build_model
    if not torch.distributed.is_initialized():
        deepspeed.init_distributed(dist_backend="gloo")
    ds = deepspeed_config(c)
    m = LiveStorages(torch)
    peaks, t0 = {}, time.time()
    with m.mode:
        m.begin()
        model, cfg = build_model(c, transformers, torch, deepspeed, ds, "cpu")
        engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds)
        peaks["init"], after_init = m.peak, m.total
        g = torch.Generator().manual_seed(1234)
        for _ in range(steps):
            for _ in range(c["gas"]):
                ids = torch.randint(0, cfg.vocab_size, (c["micro"], c["seq"]), generator=g)
                for phase, work in (("forward", lambda: engine(input_ids=ids, labels=ids).loss),
                                    ("backward", None), ("step", None)):
                    m.begin()
                    if phase == "forward":
                        loss = work()
                    elif phase == "backward":
                        engine.backward(loss)
                    else:
                        engine.step()
                    peaks[phase] = max(peaks.get(phase, 0), m.peak)
    params = sum(p.ds_numel if hasattr(p, "ds_numel") else p.numel() for p in model.parameters())
    versions = {"torch": torch.__version__, "deepspeed": deepspeed.__version__, "transformers": transformers.__version__}
    del engine, model
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    model = c.get("recording") or "configs/models/" + c["model_name"] + ".json"
    flags = ["--model", model, "--seq", str(c["seq"]), "--attn", c["attn"]]
    flags += ["--activation-checkpointing"] if c["activation_checkpointing"] else []
    flags += ["--world-size", str(world), "--as-rank", str(rank)] if world > 1 else []
    return {"name": c["name"] + (f".r{rank}" if world > 1 else ""), "case": c["name"], "rank": rank,
            "world_size": world, "ds_config": ds, "params": params, "after_init_bytes": after_init,
            "phases": [{"phase": k, "peak_bytes": v} for k, v in peaks.items()], "zrepro_flags": flags,
            "wall_s": round(time.time() - t0, 1), "versions": versions}


def run_ranks(name, ranks, a):
    """One case in fresh processes (DeepSpeed keeps global state), one per rank, together;
    each rank's row, rank 0 first."""
    port = str(29500 + (os.getpid() + len(name)) % 1000)
    procs, outs = [], []
    for rank in range(ranks):
        out = f"{a.out}.{name}.r{rank}.json"
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(ranks), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=port)
        if ranks > 1:  # ranks share the cores: one intra-op thread each
            env["OMP_NUM_THREADS"] = "1"
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), "--one", name, "--steps",
                                       str(a.steps), "--out", out], env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))
        outs.append(out)
    try:
        codes = [p.wait(timeout=1200) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    if any(codes):
        raise SystemExit(f"{name}: a rank failed ({codes}); rerun with --one {name} to see it")
    rows = []
    for out in outs:
        with open(out) as f:
            rows.append(json.load(f))
        os.remove(out)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--cases", help="comma-separated names (default: every case)")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if os.environ.get("DS_ACCELERATOR") != "cpu":
        raise SystemExit("DS_ACCELERATOR=cpu: the CPU record runs DeepSpeed's CPU accelerator")
    if a.one:  # one case in this process (main runs each in its own: DeepSpeed keeps global state)
        name, seq, micro = next(x for x in CASES if x[0] == a.one)
        r = run(case_of(name, seq, micro), a.steps)
        with open(a.out, "w") as f:
            json.dump(r, f)
        return 0
    chosen = [x for x in CASES if not a.cases or x[0] in a.cases.split(",")]
    rows = []
    for name, seq, micro in chosen:
        for r in run_ranks(name, case_of(name, seq, micro)["ranks"], a):
            print(f"[cpu_phases] {r['name']}: " + ", ".join(f"{p['phase']} {p['peak_bytes'] / r['params']:.3f} P"
                                                          for p in r["phases"]) + f" ({r['wall_s']} s)", flush=True)
            rows.append(r)
    rec = {"generated_by": "conformance/cpu_phases.py", "recorded": time.strftime("%Y-%m-%d"), "device": "cpu",
           "method": "live CPU tensor storages under a TorchDispatchMode (each storage once), per phase peak over "
                     f"{a.steps} optimizer steps", "cases": rows}
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(rec, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
