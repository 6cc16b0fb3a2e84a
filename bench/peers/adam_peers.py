#!/usr/bin/env python3
"""The peers of `zrepro bench adam`, timed the same way (best of --reps after a warm-up):
DeepSpeedCPUAdam (DeepSpeed's AVX CPU Adam, fp32 states) and torch.optim.AdamW with
foreach and fused kernels, on one flat fp32 parameter of each size.

usage: adam_peers.py --sizes 20M,100M --threads 1 --reps 5     (prints JSON rows)
Run with the conformance venv's python (torch 2.15, deepspeed 0.19.8); the thread
count is OMP_NUM_THREADS / torch.set_num_threads, set before DeepSpeed loads its op.
"""
import argparse
import json
import os
import time


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1]] if s[-1] in mult else int(s)


ap = argparse.ArgumentParser()
ap.add_argument("--sizes", default="20M,100M")
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--reps", type=int, default=5)
a = ap.parse_args()
os.environ["OMP_NUM_THREADS"] = str(a.threads)
os.environ.setdefault("DS_ACCELERATOR", "cpu")
import torch  # noqa: E402

torch.set_num_threads(a.threads)
from deepspeed.ops.adam import DeepSpeedCPUAdam  # noqa: E402


def best(reps, f):
    f()  # warm-up (first touch of the states)
    t = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        t.append(time.perf_counter() - t0)
    return min(t)


rows = []
for spec in a.sizes.split(","):
    n = parse_size(spec)
    row = {"params": n, "threads": a.threads}
    for name, make in (
        ("deepspeed_cpu_adam", lambda p: DeepSpeedCPUAdam([p], lr=1e-3, weight_decay=0.01, adamw_mode=True)),
        ("torch_adamw_foreach", lambda p: torch.optim.AdamW([p], lr=1e-3, weight_decay=0.01, foreach=True)),
        ("torch_adamw_fused", lambda p: torch.optim.AdamW([p], lr=1e-3, weight_decay=0.01, fused=True)),
    ):
        p = torch.nn.Parameter(torch.randn(n))
        p.grad = torch.randn(n)
        opt = make(p)
        t = best(a.reps, opt.step)
        row[name + "_mparams_per_s"] = n / t / 1e6
        del opt, p
    rows.append(row)
print(json.dumps(rows, indent=1))
