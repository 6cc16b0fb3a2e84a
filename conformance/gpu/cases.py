"""The GPU fidelity cases: one table read by both sides (zrepro and real DeepSpeed).

Each case is a Hugging Face config.json from configs/models/, a sequence length, a
micro-batch, a precision, a ZeRO stage and its switches. zrepro reads the same
config.json (`--model`), so both sides build the same architecture with the same
parameter count; DeepSpeed's side builds Hugging Face's own model class from it.

The set spans the memory categories: ZeRO 0-3, fp32 and bf16, activation
checkpointing, optimizer and parameter offload, eager and sdpa attention, a GPT-2
(124M), a Llama-family toy (GQA, untied head) and a ~1B model (TinyLlama-1.1B).

Assumptions both sides share, stated once here and recorded with every result:
- one rank (world size 1): the lent machine has one GPU. ZeRO's partitions are then
  whole; its buffers (reduce buckets, stage-3 gathers, persistence) still exist;
- AdamW. DeepSpeed's side uses torch's fused AdamW ("torch_adam": true, "fused": true)
  instead of DeepSpeed's FusedAdam, which would need a JIT build of a CUDA extension on
  the lent machine: both keep exp_avg and exp_avg_sq in fp32 and allocate no
  temporaries in the step; with optimizer offload the same torch AdamW runs on the
  host ("zero_force_ds_cpu_optimizer": false), which moves no device bytes;
- no dropout (Hugging Face's configs set 0 here: zrepro's model has none, and a mask
  per dropout would be an activation zrepro does not keep);
- bf16 models are built in bf16 (from_config(dtype=bfloat16), as users load
  with from_pretrained(dtype=...)); ZeRO-3 builds under deepspeed.zero.Init.
"""
import copy
import os

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODELS = os.path.join(ROOT, "configs", "models")

# Buckets as users write them (the DeepSpeed defaults of 5e8 elements would give a
# 124M-parameter model a 1 GB reduce bucket and hide every other category).
ZERO_COMMON = {
    "reduce_bucket_size": 50_000_000,
    "allgather_bucket_size": 50_000_000,
    "stage3_prefetch_bucket_size": 50_000_000,
    "stage3_param_persistence_threshold": 100_000,
    "stage3_max_live_parameters": 1_000_000_000,
    "stage3_max_reuse_distance": 1_000_000_000,
    "contiguous_gradients": True,
    "overlap_comm": False,
}


def _case(name, model, seq, micro, precision, stage, attn, ac=False, offload_opt=False, offload_param=False, gas=1):
    zero = dict(ZERO_COMMON, stage=stage)
    if offload_opt:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if offload_param:
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    ds = {
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": gas,
        "gradient_clipping": 1.0,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.01}},
        "zero_optimization": zero,
        "steps_per_print": 1000,
    }
    if precision == "bf16":
        ds["bf16"] = {"enabled": True}
    return {
        "name": name,
        "model": os.path.join(MODELS, model + ".json"),
        "model_name": model,
        "seq": seq,
        "micro": micro,
        "gas": gas,
        "precision": precision,
        "stage": stage,
        "attn": attn,
        "activation_checkpointing": ac,
        "offload_optimizer": offload_opt,
        "offload_param": offload_param,
        "ds_config": ds,
    }


CASES = [
    _case("gpt2-fp32-z0", "gpt2", 1024, 2, "fp32", 0, "eager"),
    _case("gpt2-bf16-z1", "gpt2", 1024, 4, "bf16", 1, "eager"),
    _case("gpt2-bf16-z2", "gpt2", 1024, 4, "bf16", 2, "eager"),
    _case("gpt2-bf16-z3", "gpt2", 1024, 4, "bf16", 3, "eager"),
    _case("gpt2-bf16-z2-sdpa", "gpt2", 1024, 4, "bf16", 2, "sdpa"),
    _case("gpt2-bf16-z2-ac", "gpt2", 1024, 4, "bf16", 2, "eager", ac=True),
    _case("gpt2-bf16-z2-offopt", "gpt2", 1024, 4, "bf16", 2, "eager", offload_opt=True),
    _case("gpt2-bf16-z3-offload", "gpt2", 1024, 4, "bf16", 3, "eager", offload_opt=True, offload_param=True),
    _case("llama-toy-bf16-z2-sdpa", "llama-toy", 1024, 4, "bf16", 2, "sdpa"),
    _case("llama-toy-bf16-z3-eager-gas2", "llama-toy", 1024, 2, "bf16", 3, "eager", gas=2),
    _case("tinyllama-1.1b-bf16-z2-sdpa", "tinyllama-1.1b", 2048, 1, "bf16", 2, "sdpa"),
    _case("tinyllama-1.1b-bf16-z3-ac", "tinyllama-1.1b", 2048, 2, "bf16", 3, "sdpa", ac=True),
    # Added 2026-12-06 for what the DeepSpeed timeline and the Hugging Face activations changed
    # (docs/lab/GPU.md "Replanned"): not yet run on a GPU.
    _case("qwen2.5-0.5b-bf16-z2-sdpa", "qwen2.5-0.5b", 1024, 4, "bf16", 2, "sdpa"),
    _case("gpt2-fp32-z3-gas4", "gpt2", 1024, 2, "fp32", 3, "eager", gas=4),
    _case("gpt2-bf16-z3-offparam", "gpt2", 1024, 4, "bf16", 3, "eager", offload_param=True),
]


def by_name(name):
    for c in CASES:
        if c["name"] == name:
            return copy.deepcopy(c)
    raise SystemExit(f"no GPU fidelity case {name!r}; cases: {', '.join(c['name'] for c in CASES)}")


def deepspeed_config(case):
    """The config DeepSpeed's side runs: the case's, with the optimizer stand-in above."""
    ds = copy.deepcopy(case["ds_config"])
    ds["optimizer"]["params"]["torch_adam"] = True
    ds["optimizer"]["params"]["fused"] = not case["offload_optimizer"]
    if case["offload_optimizer"]:
        ds["zero_force_ds_cpu_optimizer"] = False
    return ds


def zrepro_args(case):
    """zrepro's flags for the case (the config file is written beside them)."""
    args = ["--model", case["model"], "--seq", str(case["seq"]), "--attn", case["attn"]]
    if case["activation_checkpointing"]:
        args.append("--activation-checkpointing")
    return args
