"""What Hugging Face's own decoder layer keeps for backward, measured on the CPU.

For each case (a config.json from configs/models/, attention, dtype, micro-batch and
sequence), transformers builds its own model class from the config with two layers and
runs one forward with `torch.autograd.graph.saved_tensors_hooks`: every tensor autograd
saves is attributed to the decoder layer running when it was saved (forward pre-hooks),
counted once per storage (views of one storage, a parameter's storage, are not new
bytes). The figure per case is one decoder layer's saved bytes, the second layer's (its
input, saved by its first norm, is the first layer's output: one hidden state, as in
zrepro's block tape), with the tensors by shape and dtype so a difference can be read.

zrepro's side: `zrepro plan --json` reports `activations.block_saved_bytes` per
micro-batch, what a block adds to a forward's activations in its tapes (the block's forward
and what follows it before the next block); with --zrepro the record keeps that figure
beside transformers' for docs/design/CONFORMANCE.md, and
tests/trainer/planner/hf_activations_test.cpp compares today's with transformers'. Eager attention and the MLP run the same
ATen ops on the CPU and on CUDA; sdpa differs by kernel (the CPU's flash attention
against CUDA's flash or memory-efficient kernels), so sdpa cases record the CPU's kernel
and say so.

    python conformance/hf_activations.py --zrepro build/zrepro --out conformance/results/hf_activations.json
"""
import argparse
import json
import os
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
MODELS = os.path.join(ROOT, "configs", "models")

# (config, attention, dtype, micro-batch, sequence): the families and switches the planner
# models. Small shapes: the saved bytes are sums of B*S*h-, B*S*I- and B*a*S*S-sized tensors,
# so two sequence lengths tell the terms apart.
CASES = [
    (model, attn, dtype, B, S)
    for model in ("gpt2", "llama-toy")
    for attn in ("eager", "sdpa")
    for dtype in ("float32", "bfloat16")
    for B, S in ((1, 64), (2, 128))
]


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def decoder_layers(model):
    for name in ("transformer.h", "model.layers"):
        mod = model
        try:
            for part in name.split("."):
                mod = getattr(mod, part)
            return list(mod)
        except AttributeError:
            continue
    raise SystemExit("no decoder layers found (transformer.h or model.layers)")


def two_layer_config(transformers, path):
    """The config.json at path with two decoder layers and no dropout."""
    cfg = transformers.AutoConfig.from_pretrained(path)
    for k in ("resid_pdrop", "embd_pdrop", "attn_pdrop", "attention_dropout", "hidden_dropout"):
        if hasattr(cfg, k):
            setattr(cfg, k, 0.0)
    for k in ("num_hidden_layers", "n_layer"):
        if hasattr(cfg, k):
            setattr(cfg, k, 2)
    return cfg


def measure(torch, transformers, model_name, attn, dtype, B, S):
    cfg = two_layer_config(transformers, os.path.join(MODELS, model_name + ".json"))
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=attn, dtype=getattr(torch, dtype))
    model.config.use_cache = False
    model.train()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    current = {"layer": None}
    layers = decoder_layers(model)
    for i, layer in enumerate(layers):
        layer.register_forward_pre_hook(lambda m, a, i=i: current.__setitem__("layer", i))
        layer.register_forward_hook(lambda m, a, o: current.__setitem__("layer", None))
    seen = set()
    saved = {i: [] for i in range(len(layers))}

    def pack(t):
        st = t.untyped_storage()
        key = st.data_ptr()
        if current["layer"] is not None and key not in params and key not in seen:
            saved[current["layer"]].append({"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""),
                                            "bytes": st.nbytes()})
        seen.add(key)
        return t

    ids = torch.randint(0, cfg.vocab_size, (B, S))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(input_ids=ids, labels=ids)
    second = saved[1]
    return {"model": model_name, "attention": attn, "dtype": dtype, "micro_batch": B, "seq": S,
            "hidden": cfg.hidden_size, "heads": cfg.num_attention_heads,
            "block_saved_bytes": sum(x["bytes"] for x in second), "tensors": second}


def zrepro_block_bytes(binary, row):
    """`zrepro plan --json`'s activations.block_saved_bytes for the same model and shapes."""
    import subprocess
    import tempfile
    cfg = {"train_micro_batch_size_per_gpu": row["micro_batch"], "zero_optimization": {"stage": 0}}
    if row["dtype"] == "bfloat16":
        cfg["bf16"] = {"enabled": True}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "ds.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        out = subprocess.run([binary, "plan", "--config", path, "--model", os.path.join(MODELS, row["model"] + ".json"),
                              "--seq", str(row["seq"]), "--attn", row["attention"], "--json"],
                             capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout)["activations"]["block_saved_bytes"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--zrepro", help="a zrepro binary: its plan's figure for each case goes beside transformers'")
    a = ap.parse_args()
    import torch
    import transformers
    torch.set_num_threads(1)
    t0 = time.time()
    rows = [measure(torch, transformers, *c) for c in CASES]
    for r in rows:
        if a.zrepro:
            r["zrepro_block_bytes"] = zrepro_block_bytes(a.zrepro, r)
        print(f"{r['model']:10s} {r['attention']:5s} {r['dtype']:8s} B={r['micro_batch']} S={r['seq']:4d}: "
              f"{r['block_saved_bytes']:>10,} B saved per decoder layer"
              + (f", zrepro {r['zrepro_block_bytes']:>10,}" if a.zrepro else ""))
    write_json(a.out, {"generated_by": "conformance/hf_activations.py", "recorded": time.strftime("%Y-%m-%d"),
                       "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
                       "device": "cpu", "wall_s": round(time.time() - t0, 1), "cases": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
