"""What Hugging Face's decoder layer saves for backward, recorded under FakeTensorMode,
against the same measured in a real CPU run: the method for planning an architecture
zrepro has no model of.

`conformance/hf_activations.py` measures one decoder layer's saved tensors in a real forward
on the CPU (`torch.autograd.graph.saved_tensors_hooks`, each storage once). Here the same
count runs twice per case: with real tensors, and with every tensor a FakeTensor (shapes and
dtypes, no memory, no arithmetic: a 2048-token forward of a 2B-parameter model in about two
seconds). A case agrees when the two are byte for byte equal. The cases are the planner's
families (GPT-2, Llama; eager and sdpa; fp32 and bf16) and three architectures zrepro has no
model for (Qwen3, Phi-3, Gemma-2: conformance/hf_models/, toys of their config keys).

[Note: FakeTensorMode is not eager to transformers] transformers reads a FakeTensor as a
sign of tracing (utils/import_utils.py is_tracing: is_fake_tensor) and then builds explicit
attention masks and repeats the key/value heads for sdpa, which an eager run does not (the
llama toy's sdpa layer saved 7% more); and its mask code asks data-dependent questions (is
the batch packed? masking_utils.find_packed_sequence_indices) a FakeTensor cannot answer.
The recording therefore says what the eager run would find: not tracing, and no packed
sequences (the batches are not packed). With those two, every case here is exact.

    python conformance/hf_fake_activations.py --out conformance/results/hf_fake_activations.json

tests/conformance/hf_fake_activations_test.cpp holds the record: every case exact, the
three foreign architectures among them.
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from hf_activations import decoder_layers, two_layer_config  # noqa: E402
ROOT = os.path.dirname(HERE)
FAMILIES = os.path.join(ROOT, "configs", "models")
FOREIGN = os.path.join(HERE, "hf_models")

CASES = (
    [(os.path.join(FAMILIES, m + ".json"), attn, dtype, B, S)
     for m in ("gpt2", "llama-toy") for attn in ("eager", "sdpa") for dtype in ("float32", "bfloat16")
     for B, S in ((1, 64), (2, 128))]
    + [(os.path.join(FOREIGN, m + ".json"), attn, "bfloat16", 2, 128)
       for m, attn in (("qwen3-toy", "sdpa"), ("qwen3-toy", "eager"), ("phi3-toy", "sdpa"), ("gemma2-toy", "eager"))]
)


def eager_answers(transformers):
    """[Note: FakeTensorMode is not eager to transformers]: the answers an eager run finds."""
    import transformers.masking_utils as masking
    import transformers.utils.import_utils as iu
    iu.is_fake_tensor = lambda x: False
    masking.find_packed_sequence_indices = lambda position_ids: None


def saved_by_second_layer(torch, transformers, path, attn, dtype, B, S, fake):
    """Bytes the second decoder layer saves for backward (each storage once, parameters not)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    cfg = two_layer_config(transformers, path)
    torch.manual_seed(0)
    mode = FakeTensorMode(allow_non_fake_inputs=True) if fake else None
    if mode:
        mode.__enter__()
    try:
        model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=attn, dtype=getattr(torch, dtype))
        model.config.use_cache = False
        model.train()
        key = lambda t: t.untyped_storage()._cdata  # noqa: E731 (a fake storage has no data pointer)
        params = {key(p) for p in model.parameters()}
        current = {"layer": None}
        for i, layer in enumerate(decoder_layers(model)):
            layer.register_forward_pre_hook(lambda m, a, i=i: current.__setitem__("layer", i))
            layer.register_forward_hook(lambda m, a, o: current.__setitem__("layer", None))
        seen, saved = set(), []

        def pack(t):
            k = key(t)
            if current["layer"] == 1 and k not in params and k not in seen:
                saved.append(t.untyped_storage().nbytes())
            seen.add(k)
            return t

        ids = torch.randint(0, cfg.vocab_size, (B, S))
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model(input_ids=ids, labels=ids)
        return sum(saved), len(saved), cfg.model_type
    finally:
        if mode:
            mode.__exit__(None, None, None)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    import torch
    import transformers
    torch.set_num_threads(1)
    eager_answers(transformers)
    rows, t0 = [], time.time()
    for path, attn, dtype, B, S in CASES:
        real, n, model_type = saved_by_second_layer(torch, transformers, path, attn, dtype, B, S, fake=False)
        t1 = time.time()
        fake, nf, _ = saved_by_second_layer(torch, transformers, path, attn, dtype, B, S, fake=True)
        row = {"config": os.path.relpath(path, ROOT), "model_type": model_type, "attention": attn, "dtype": dtype,
               "micro_batch": B, "seq": S, "real_bytes": real, "fake_bytes": fake, "real_tensors": n,
               "fake_tensors": nf, "fake_s": round(time.time() - t1, 2)}
        rows.append(row)
        print(f"{row['config']:32s} {attn:5s} {dtype:8s} B={B} S={S:4d}: real {real:>10,} fake {fake:>10,} "
              + ("exact" if real == fake else "DIFFERS"), flush=True)
    rec = {"generated_by": "conformance/hf_fake_activations.py", "recorded": time.strftime("%Y-%m-%d"),
           "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
           "method": "one decoder layer's saved tensors (saved_tensors_hooks, each storage once), real CPU tensors "
                     "against FakeTensorMode with transformers told it is not tracing and the batch is not packed",
           "wall_s": round(time.time() - t0, 1), "cases": rows}
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(rec, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, a.out)
    return 0 if all(r["real_bytes"] == r["fake_bytes"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
