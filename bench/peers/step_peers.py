"""PyTorch's side of bench/peers/step.sh: one training step of zrepro's toy GPT
(conformance/ds_model.py, the same module the DeepSpeed oracle trains) in plain
PyTorch, eager or torch.compile, fp32 or bf16, on the CPU.

bf16 as DeepSpeed (and zrepro) run it: 16-bit parameters and gradients, an fp32 master
copy that AdamW updates, the 16-bit parameters refreshed from it. fp32: AdamW on the
parameters. The batch is micro x seq tokens drawn uniformly from the vocabulary; the
figure is the median step time (forward, backward, optimizer) after warm-up steps.

usage: step_peers.py --model-json '{"vocab":..}' --precision bf16 --micro 4 --mode eager
prints one JSON object: mode, precision, step_s_median, tokens_per_s, steps.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "conformance"))
from ds_model import ToyGpt  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-json", required=True)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--micro", type=int, default=4)
    ap.add_argument("--mode", choices=["eager", "compile"], default="eager")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    m = json.loads(a.model_json)
    model = ToyGpt(m)
    bf16 = a.precision == "bf16"
    if bf16:
        master = [p.detach().clone().float().requires_grad_(True) for p in model.parameters()]
        model = model.to(torch.bfloat16)
        opt = torch.optim.AdamW(master, lr=1e-3, foreach=True)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    fwd = torch.compile(model) if a.mode == "compile" else model
    S, V = m["seq"], m["vocab"]

    def step():
        t = torch.randint(0, V, (a.micro, S + 1))
        loss = fwd(t[:, :-1].contiguous(), t[:, 1:].contiguous())
        loss.backward()
        if bf16:
            with torch.no_grad():
                for mp, p in zip(master, model.parameters()):
                    mp.grad = p.grad.float()
                    p.grad = None
            opt.step()
            opt.zero_grad(set_to_none=True)
            with torch.no_grad():
                for mp, p in zip(master, model.parameters()):
                    p.copy_(mp)
        else:
            opt.step()
            opt.zero_grad(set_to_none=True)
        return float(loss.detach())

    for _ in range(a.warmup):
        step()
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    print(json.dumps({"mode": a.mode, "precision": a.precision, "step_s_median": med,
                      "tokens_per_s": a.micro * S / med, "steps": a.steps}))


if __name__ == "__main__":
    main()
