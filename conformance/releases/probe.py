"""One real DeepSpeed release's ZeRO training step on the CPU (gloo): the probe behind
docs/lab/DEEPSPEED_RELEASES.md, groundwork for `zrepro bisect` (issue 37).

A two-layer MLP (10,384 parameters, the same initial weights on every rank), micro-batch
2 x gradient accumulation 2, AdamW lr 1e-3, ZeRO stage --stage, 3 optimizer steps on
fixed random data (different per rank, the same for every release). Prints one line
`RESULT {json}` per rank: the release and file imported, torch, the stage, the losses of
the 6 micro-steps and the grad norm after each optimizer step. Judge a run by that line,
not its exit code (0.19.0 aborted at exit after printing it).

Run (conformance/releases/run.sh does it per release):
    DS_ACCELERATOR=cpu OMP_NUM_THREADS=1 PYTHONPATH=<release folder> \\
        python -m torch.distributed.run --nproc_per_node 2 probe.py --stage S
"""
import argparse
import json
import os
import time

p = argparse.ArgumentParser()
p.add_argument("--stage", type=int, required=True)
p.add_argument("--local_rank", type=int, default=-1)  # older launchers pass it
args = p.parse_args()

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import deepspeed  # noqa: E402

rank = int(os.environ.get("RANK", "0"))
t0 = time.time()

torch.manual_seed(0)  # identical initial weights on every rank
model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 16))

deepspeed.init_distributed(dist_backend="gloo")
cfg = {
    "train_micro_batch_size_per_gpu": 2,
    "gradient_accumulation_steps": 2,
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
    "zero_optimization": {"stage": args.stage},
}
engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)

g = torch.Generator().manual_seed(1234 + rank)
steps = 3
micro = steps * cfg["gradient_accumulation_steps"]
xs = torch.randn(micro, 2, 64, generator=g)
ys = torch.randn(micro, 2, 16, generator=g)

losses, norms = [], []
for i in range(micro):
    loss = torch.nn.functional.mse_loss(engine(xs[i]), ys[i])
    engine.backward(loss)
    engine.step()
    losses.append(float(loss.detach()))
    if (i + 1) % cfg["gradient_accumulation_steps"] == 0:
        gn = engine.get_global_grad_norm()
        norms.append(None if gn is None else float(gn))

print("RESULT " + json.dumps({
    "rank": rank, "deepspeed": deepspeed.__version__, "ds_file": deepspeed.__file__,
    "torch": torch.__version__, "stage": args.stage, "global_steps": engine.global_steps,
    "losses": [round(v, 6) for v in losses],
    "grad_norms": [None if n is None else round(n, 6) for n in norms],
    "seconds": round(time.time() - t0, 2),
}), flush=True)
