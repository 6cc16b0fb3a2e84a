"""Config acceptance and resolution: every real-world config of configs/ (see
configs/SOURCES.md) is resolved by real DeepSpeed (DeepSpeedConfig, world size 1)
and by `zrepro config --json`, after the same Hugging Face-style filling of "auto"
(HF_AUTO below, the values the Trainer would put there for the `tiny` model), and
the resolved settings are compared key by key.

    python conformance/configs.py --zrepro build/zrepro --out conformance/results/configs.json
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import cases as C  # noqa: E402
import record  # noqa: E402
HIDDEN = 64  # tiny's hidden size: what HF's "auto" bucket sizes derive from
HF_AUTO = {
    "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4, "gradient_clipping": 1.0,
    "fp16.enabled": False, "bf16.enabled": True,
    "optimizer.params.lr": 1e-5, "optimizer.params.betas": [0.9, 0.999], "optimizer.params.eps": 1e-8,
    "optimizer.params.weight_decay": 0.0,
    "scheduler.params.warmup_min_lr": 0, "scheduler.params.warmup_max_lr": 1e-5, "scheduler.params.warmup_num_steps": 0,
    "scheduler.params.total_num_steps": 100,
    "zero_optimization.reduce_bucket_size": HIDDEN * HIDDEN,
    "zero_optimization.stage3_prefetch_bucket_size": int(0.9 * HIDDEN * HIDDEN),
    "zero_optimization.stage3_param_persistence_threshold": 10 * HIDDEN,
}


def fill_auto(cfg, path=""):
    """HF's deepspeed integration: "auto" gets the Trainer's value."""
    out = {}
    for k, v in cfg.items():
        p = f"{path}.{k}" if path else k
        if isinstance(v, dict):
            out[k] = fill_auto(v, p)
        elif v == "auto":
            if p == "train_batch_size":
                out[k] = HF_AUTO["train_micro_batch_size_per_gpu"] * HF_AUTO["gradient_accumulation_steps"]
            elif p in HF_AUTO:
                out[k] = HF_AUTO[p]
            else:
                raise SystemExit(f"{p}: \"auto\" without an HF value in configs.py HF_AUTO")
        else:
            out[k] = v
    return out


# The resolved settings compared, as (name, DeepSpeed getter, zrepro path in `resolved`).
def _z(cfg):
    return cfg.zero_config


def _off(cfg, which):
    return getattr(_z(cfg), which)


def _device(cfg, which):
    o = _off(cfg, which)
    if o is None:
        return "none"
    return o.device.value if hasattr(o.device, "value") else str(o.device)


def _pin(cfg, which):
    return _off(cfg, which).pin_memory if _device(cfg, which) != "none" else None


KEYS = [
    ("train_batch_size", lambda c: c.train_batch_size, "train_batch_size"),
    ("train_micro_batch_size_per_gpu", lambda c: c.train_micro_batch_size_per_gpu, "train_micro_batch_size_per_gpu"),
    ("gradient_accumulation_steps", lambda c: c.gradient_accumulation_steps, "gradient_accumulation_steps"),
    ("zero_optimization.stage", lambda c: c.zero_optimization_stage, "zero_optimization.stage"),
    ("fp16.enabled", lambda c: bool(c.float16_config.enabled), "fp16.enabled"),
    ("bf16.enabled", lambda c: bool(c.bfloat16_config.enabled), "bf16.enabled"),
    ("gradient_clipping", lambda c: c.gradient_clipping, "gradient_clipping"),
    ("zero_optimization.offload_optimizer.device", lambda c: _device(c, "offload_optimizer"),
     "zero_optimization.offload_optimizer.device"),
    ("zero_optimization.offload_optimizer.pin_memory", lambda c: _pin(c, "offload_optimizer"),
     "zero_optimization.offload_optimizer.pin_memory"),
    ("zero_optimization.offload_param.device", lambda c: _device(c, "offload_param"),
     "zero_optimization.offload_param.device"),
    ("zero_optimization.offload_param.pin_memory", lambda c: _pin(c, "offload_param"),
     "zero_optimization.offload_param.pin_memory"),
    ("zero_optimization.overlap_comm", lambda c: _z(c).overlap_comm, "zero_optimization.overlap_comm"),
    ("zero_optimization.contiguous_gradients", lambda c: _z(c).contiguous_gradients,
     "zero_optimization.contiguous_gradients"),
    ("zero_optimization.reduce_bucket_size", lambda c: int(_z(c).reduce_bucket_size),
     "zero_optimization.reduce_bucket_size"),
    ("zero_optimization.allgather_bucket_size", lambda c: int(_z(c).allgather_bucket_size),
     "zero_optimization.allgather_bucket_size"),
    ("zero_optimization.sub_group_size", lambda c: int(_z(c).sub_group_size), "zero_optimization.sub_group_size"),
    ("zero_optimization.stage3_prefetch_bucket_size", lambda c: int(_z(c).prefetch_bucket_size),
     "zero_optimization.stage3_prefetch_bucket_size"),
    ("zero_optimization.stage3_param_persistence_threshold", lambda c: int(_z(c).param_persistence_threshold),
     "zero_optimization.stage3_param_persistence_threshold"),
    ("zero_optimization.stage3_max_live_parameters", lambda c: int(_z(c).max_live_parameters),
     "zero_optimization.stage3_max_live_parameters"),
    ("zero_optimization.stage3_max_reuse_distance", lambda c: int(_z(c).max_reuse_distance),
     "zero_optimization.stage3_max_reuse_distance"),
]


def dig(d, path):
    for k in path.split("."):
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def deepspeed_resolve(cfg):
    from deepspeed.runtime.config import DeepSpeedConfig
    try:
        c = DeepSpeedConfig(cfg)
    except Exception as e:  # DeepSpeed's own refusal is the figure
        return {"accepted": False, "error": f"{type(e).__name__}: {e}"[:400]}
    vals = {}
    for name, get, _ in KEYS:
        try:
            vals[name] = get(c)
        except Exception as e:
            vals[name] = f"unavailable: {type(e).__name__}"
    return {"accepted": True, "values": vals}


def zrepro_resolve(zrepro, cfg, name):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(cfg, f)
    try:
        p = subprocess.run([zrepro, "config", "--config", f.name, "--world-size", "1", "--json"],
                           capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    if p.returncode != 0:
        text = (p.stderr or p.stdout).replace(f.name, name).strip()  # no temporary path in the record
        return {"accepted": False, "exit_code": p.returncode, "error": text[:400]}
    j = json.loads(p.stdout)
    vals = {name: dig(j["resolved"], path) for name, _, path in KEYS}
    for which in ("offload_optimizer", "offload_param"):  # pin_memory means nothing without offload
        if vals[f"zero_optimization.{which}.device"] == "none":
            vals[f"zero_optimization.{which}.pin_memory"] = None
    return {"accepted": True, "values": vals, "warnings": j.get("warnings", [])}


def same(a, b):
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return float(a) == float(b)
    return a == b


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--zrepro", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29911")
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("LOCAL_RANK", "0")
    import deepspeed
    deepspeed.init_distributed(dist_backend="gloo")
    rows = []
    for path in sorted(glob.glob(os.path.join(HERE, "configs", "*.json"))):
        raw = json.load(open(path))
        cfg = fill_auto(raw)
        ds, zr = deepspeed_resolve(cfg), zrepro_resolve(a.zrepro, cfg, os.path.basename(path))
        keys = []
        if ds["accepted"] and zr["accepted"]:
            for name, _, _ in KEYS:
                d, z = ds["values"][name], zr["values"][name]
                keys.append({"key": name, "deepspeed": d, "zrepro": z, "ok": same(d, z)})
        for k in keys:
            if not k["ok"]:
                k["cause"] = C.config_gap(os.path.basename(path), k["key"])
        rows.append({"config": os.path.basename(path), "filled": cfg, "deepspeed": {k: v for k, v in ds.items()
                                                                                    if k != "values"},
                     "zrepro": {k: v for k, v in zr.items() if k != "values"},
                     "acceptance_ok": ds["accepted"] == zr["accepted"], "keys": keys,
                     "ok": ds["accepted"] == zr["accepted"] and all(k["ok"] for k in keys)})
    record.write(a.out, {"kind": "configs", "versions": record.versions(),
                         "command": "scripts/conformance.sh --only configs", "hf_auto": HF_AUTO, "rows": rows})
    print(f"[conformance] configs: {sum(r['ok'] for r in rows)}/{len(rows)} resolve alike")


if __name__ == "__main__":
    sys.exit(main())
