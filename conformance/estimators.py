"""DeepSpeed's model-state estimators beside `zrepro plan`'s figures for the same
model and cluster. DeepSpeed's functions are called as a user would
(estimate_zero{2,3}_model_states_mem_needs with model_to_params' totals); the
model is Hugging Face's (transformers' AutoModelForCausalLM from the preset's
configs/models/<preset>.json) where zrepro's preset is a Hugging Face model, else
zrepro's network (ds_model.ToyGpt: the toys and the untied GPT-3 shapes), built on
the meta device, so a 13B model costs no memory.

    python conformance/estimators.py --zrepro build/zrepro --out conformance/results/estimators.json
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ds_model import ToyGpt  # noqa: E402
import record  # noqa: E402

# (model preset, world size, GPUs per node, ZeRO stage)
CASES = [("tiny", 2, 2, 2), ("tiny", 2, 2, 3), ("gpt2", 8, 8, 2), ("gpt2-xl", 16, 8, 3),
         ("gpt3-6.7b", 8, 8, 2), ("gpt3-13b", 8, 8, 3), ("gpt3-13b", 32, 8, 3),
         ("tinyllama-1.1b", 2, 2, 2), ("llama-2-7b", 8, 8, 2), ("llama-2-7b", 8, 8, 3), ("llama-3-8b", 16, 8, 3),
         ("mistral-7b", 8, 8, 3), ("qwen2.5-7b", 8, 8, 2)]
MODELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "configs", "models")


def build(model, dims):
    """The network DeepSpeed would be handed, on the meta device."""
    path = os.path.join(MODELS, model + ".json")
    with torch.device("meta"):
        if os.path.exists(path):
            from transformers import AutoConfig, AutoModelForCausalLM
            return AutoModelForCausalLM.from_config(AutoConfig.for_model(**json.load(open(path))))
        return ToyGpt(dims)


def params_like_model_to_params(model):
    """deepspeed.runtime.zero.stage3.model_to_params, keyed by tensor identity (on
    the meta device every data_ptr is 0, which would fold all parameters into one)."""
    total = sum({id(p): p.numel() for p in model.parameters()}.values())
    largest = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
    return total, largest


def deepspeed_figures(total, largest, gpn, nodes, stage):
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    out = {}
    if stage < 3:
        for off in (False, True):
            cpu, gpu = estimate_zero2_model_states_mem_needs(total, gpn, nodes, cpu_offload=off)
            out[f"zero2, offload_optimizer={'cpu' if off else 'none'}"] = {"gpu_bytes": gpu, "cpu_bytes": cpu}
    else:
        for off_opt, off_par in ((False, False), (True, False), (True, True)):
            cpu, gpu, _ = estimate_zero3_model_states_mem_needs(total, largest, gpn, nodes, cpu_offload=off_opt,
                                                                cpu_offload_params=off_par, zero_init=True)
            key = (f"zero3, offload_param={'cpu' if off_par else 'none'}, "
                   f"offload_optimizer={'cpu' if off_opt else 'none'}")
            out[key] = {"gpu_bytes": gpu, "cpu_bytes": cpu}
    return out


def zrepro_plan(zrepro, model, world, gpn, stage):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": stage}}, f)
    try:
        out = subprocess.run([zrepro, "plan", "--config", f.name, "--model", model, "--world-size", str(world),
                              "--gpus-per-node", str(gpn), "--json"], capture_output=True, text=True, check=True)
    finally:
        os.unlink(f.name)
    return json.loads(out.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--zrepro", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    rows = []
    for model, world, gpn, stage in CASES:
        plan = zrepro_plan(a.zrepro, model, world, gpn, stage)
        dims = plan["model"]
        net = build(model, dims)
        total, largest = params_like_model_to_params(net)
        ds = deepspeed_figures(total, largest, gpn, world // gpn, stage)
        ours = {e["setting"]: e for e in plan["deepspeed_estimates"]}
        for setting, theirs in ds.items():
            z = ours.get(setting, {})
            rows.append({"model": model, "world_size": world, "gpus_per_node": gpn, "stage": stage,
                         "setting": setting, "params": {"zrepro": dims["params"], "deepspeed": total},
                         "largest_layer": {"deepspeed": largest},
                         "gpu_bytes": {"zrepro": z.get("gpu_bytes"), "deepspeed": theirs["gpu_bytes"]},
                         "cpu_bytes": {"zrepro": z.get("cpu_bytes"), "deepspeed": theirs["cpu_bytes"]},
                         "ok": z.get("gpu_bytes") == theirs["gpu_bytes"] and z.get("cpu_bytes") == theirs["cpu_bytes"]
                         and dims["params"] == total})
    record.write(a.out, {"kind": "estimators", "versions": record.versions(),
                         "command": "scripts/conformance.sh --only estimators", "rows": rows})
    bad = [r for r in rows if not r["ok"]]
    print(f"[conformance] estimators: {len(rows) - len(bad)}/{len(rows)} settings agree exactly")


if __name__ == "__main__":
    main()
