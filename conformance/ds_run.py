"""One real DeepSpeed training run on the CPU, on zrepro's inputs.

Launched by harness.py under torch.distributed.run (one process per rank, gloo):
    DS_ACCELERATOR=cpu python -m torch.distributed.run --nproc_per_node N ds_run.py \
        --inputs OUT/inputs --config ds_config.json --steps 20 --out ds.json
Each step: the same micro-batches zrepro's rank trains on, engine(inputs, targets),
engine.backward, engine.step. Under the inputs' loss_normalization "token" each micro-batch's
loss is driven as the Hugging Face Trainer drives it (transformers 5.25 trainer.py:
_get_num_items_in_batch, compute_loss, training_step): the sum over its scored tokens divided
by the scored tokens of the whole accumulated batch gathered over the ranks, times the world
size, and engine.backward(loss, scale_wrt_gas=False). Records per step the global mean loss, the grad norm
before clipping, whether an overflow skipped the step, the collectives by op, and the live-tensor memory walk at the
first step's boundary micro-step: inside backward once the last gradient exists
(`backward`: DeepSpeed's stage 1/2 reduce buckets live only then), after backward
(`boundary`, before the optimizer step), and after the last step (`after_step`). Rank 0 writes every rank's record to --out; a config the release refuses at
deepspeed.initialize gives {"refused": "<exception>"} there instead. Also run per release
by `zrepro bisect` (trainer/bisect/), so it uses only what DeepSpeed 0.15-0.19 all have.
"""
import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ds_probe import CommCounter, OffloadCopyCounter, memory_by_category, zero_convention  # noqa: E402

COUNTER = CommCounter()  # before deepspeed binds torch.distributed's functions

import deepspeed  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from ds_model import load, micro_batch  # noqa: E402


def grad_norm_now(model):
    """L2 norm of the full (already averaged) gradients: stage 0 keeps them whole
    and its engine does not store the norm it clips with."""
    total = sum(float(p.grad.float().pow(2).sum()) for p in model.parameters() if p.grad is not None)
    return math.sqrt(total)


def trainer_optimizer(params, spec):
    """The optimizer a Hugging Face Trainer brings to a config without "optimizer" (zrepro's
    [Note: the optimizer the Trainer brings], trainer/bisect/deepspeed_config.h): torch AdamW,
    or DeepSpeedCPUAdam where Accelerate swaps it in under an optimizer offload."""
    kwargs = dict(lr=spec["lr"], betas=tuple(spec["betas"]), eps=spec["eps"], weight_decay=spec["weight_decay"])
    if spec["type"] == "DeepSpeedCPUAdam":
        from deepspeed.ops.adam import DeepSpeedCPUAdam
        return DeepSpeedCPUAdam(params, adamw_mode=True, **kwargs)
    return torch.optim.AdamW(params, **kwargs)


def write_record(path, record):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(record, f, indent=1)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--inputs", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--extra-micro-step-rank", type=int, default=-1,
                    help="this rank runs one more micro-step per step (a gradient_accumulation_steps mismatch)")
    a = ap.parse_args()

    torch.set_num_threads(1)
    deepspeed.init_distributed(dist_backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model, layout, tokens = load(a.inputs)
    if layout["batch"]["world"] != world:
        raise SystemExit(f"inputs were exported for {layout['batch']['world']} ranks, this run has {world}")
    config = json.load(open(a.config))
    trainer = config.pop("zrepro_trainer_optimizer", None)  # the Trainer's optimizer, when the file has none
    client = trainer_optimizer(model.ordered, trainer) if trainer else None
    lr_by_step = trainer["lr_by_step"] if trainer else []
    if rank == a.extra_micro_step_rank:
        # This rank's config says one more accumulation step (equal optimizer steps).
        config["gradient_accumulation_steps"] += 1
        config.pop("train_batch_size", None)
    try:
        engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.ordered, optimizer=client,
                                               config=config)
    except Exception as e:  # the release refuses the config: say so in the record (zrepro bisect reads it)
        if rank == 0:
            write_record(a.out, {"refused": f"{type(e).__name__}: {e}".strip()[:2000],
                                 "versions": {"torch": torch.__version__, "deepspeed": deepspeed.__version__}})
        raise
    stage = engine.zero_optimization_stage()
    gas = engine.gradient_accumulation_steps()
    memory = {"init": memory_by_category(engine, model)}
    offload = config.get("zero_optimization", {}).get("offload_optimizer", {}).get("device", "none") == "cpu"
    copies = OffloadCopyCounter(engine.optimizer) if offload and stage < 3 else None

    def phase(fn, *args, **kwargs):
        """fn under the offload copy counter (when there is one), its host buffers refreshed."""
        if copies is None:
            return fn(*args, **kwargs)
        copies.refresh()
        with copies.mode:
            return fn(*args, **kwargs)
    steps = []
    probe = {"armed": False}

    def in_backward(param):
        # The embedding's gradient is the last one backward computes; this runs once
        # it is accumulated (after DeepSpeed's own hooks, registered earlier).
        if probe["armed"]:
            probe["armed"] = False
            was, COUNTER.enabled = COUNTER.enabled, False
            memory["backward"] = memory_by_category(engine, model)
            COUNTER.enabled = was

    model.wte.weight.register_post_accumulate_grad_hook(in_backward)
    t0 = time.time()
    token = layout.get("loss_normalization", "mean") == "token"
    for step in range(a.steps):
        micro_steps = gas
        losses, norm = [], None
        COUNTER.enabled = True
        skipped_before = engine.skipped_steps
        if lr_by_step:  # the Trainer's lr of this step, as zrepro's run had it
            for group in client.param_groups:
                group["lr"] = lr_by_step[min(step, len(lr_by_step) - 1)]
        if token:  # num_items_in_batch: this rank's scored targets of the step, summed over the ranks
            n = torch.tensor([float(sum(int((micro_batch(tokens, layout, step, t, rank)[1] != -100).sum())
                                        for t in range(micro_steps)))], dtype=torch.float64)
            dist.all_reduce(n)
            items = float(n)
        for t in range(micro_steps):
            inputs, targets = micro_batch(tokens, layout, step, t, rank)
            probe["armed"] = step == 0 and t == micro_steps - 1
            if token:
                loss = phase(engine, inputs, targets, "sum") / items * world
                phase(engine.backward, loss, scale_wrt_gas=False)
            else:
                loss = phase(engine, inputs, targets)
                phase(engine.backward, loss)
            losses.append(float(loss.detach()))
            if engine.is_gradient_accumulation_boundary():
                if stage == 0:
                    norm = grad_norm_now(model)
                if step == 0:
                    COUNTER.enabled = False
                    memory["boundary"] = memory_by_category(engine, model)
                    COUNTER.enabled = True
            phase(engine.step)
        COUNTER.enabled = False
        calls = COUNTER.take()
        local = torch.tensor([sum(losses) if token else sum(losses) / len(losses)], dtype=torch.float64)
        dist.all_reduce(local)
        if stage > 0:
            norm = engine.get_global_grad_norm()
            norm = float(norm) if norm is not None else None
        skipped = engine.skipped_steps > skipped_before  # fp16: an overflow skipped the update
        steps.append({"step": step, "loss": float(local) / world, "grad_norm": norm, "skipped": skipped,
                      "comm_bytes": zero_convention(calls, world),
                      "offload_bytes": copies.take() if copies else None,
                      "comm_calls": {op: sum(1 for c in calls if c["op"] == op) for op in {c["op"] for c in calls}}})
        if rank == 0:  # progress for whoever waits (zrepro bisect shows it)
            print(f"[zrepro] step={step + 1}/{a.steps} (DeepSpeed {deepspeed.__version__})", flush=True)
    memory["after_step"] = memory_by_category(engine, model)
    record = {"rank": rank, "world": world, "zero_stage": stage, "grad_accum": gas,
              "micro": engine.train_micro_batch_size_per_gpu(), "steps": steps, "memory": memory,
              "seconds": time.time() - t0}
    gathered = [None] * world
    dist.all_gather_object(gathered, record)
    if rank == 0:
        write_record(a.out, {"ranks": gathered,
                             "versions": {"torch": torch.__version__, "deepspeed": deepspeed.__version__}})
    # Nobody leaves before the record is on disk (a rank that crashes in its own
    # teardown must not take rank 0 down with it before the write).
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
