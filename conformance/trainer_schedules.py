"""The Hugging Face Trainer's lr schedules, as transformers runs them, for the test of
zrepro's ([Note: the Trainer's schedule], zero/zero_config.h).

    ~/.cache/zrepro/conformance-venv/bin/python conformance/trainer_schedules.py \
        --out conformance/results/trainer_schedules.json

(the venv of scripts/conformance.sh: torch, transformers and accelerate of
requirements.txt; DeepSpeed is not used: the Trainer builds this schedule itself.) For each case the TrainingArguments are
built from the keys a job's training_args.json holds, and the schedule exactly as
Trainer.create_scheduler does: get_scheduler(args.lr_scheduler_type, optimizer,
num_warmup_steps=args.get_warmup_steps(steps), num_training_steps=steps,
scheduler_specific_kwargs=args.lr_scheduler_kwargs), on a torch AdamW. The lr of every
optimizer step is recorded (the optimizer's lr when it steps, then scheduler.step()), and
the LambdaLR state_dict after two steps (what DeepSpeed saves as "lr_scheduler" when the
Trainer hands it the schedule). The test (tests/trainer/config/training_args_test.cpp)
resolves the same arguments through zrepro and compares each lr.
"""
import argparse
import json
import os
import tempfile

import accelerate
import torch
import transformers
from transformers import TrainingArguments, get_scheduler

# (name, the training_args.json keys, the run's optimizer steps)
CASES = [
    ("defaults", {"learning_rate": 1e-3}, 10),
    ("linear-warmup-3", {"learning_rate": 1e-3, "warmup_steps": 3}, 10),
    ("linear-warmup-past-the-run", {"learning_rate": 1e-3, "warmup_steps": 12}, 10),
    ("cosine-warmup-share-0.2", {"learning_rate": 2e-5, "lr_scheduler_type": "cosine", "warmup_steps": 0.2}, 10),
    ("cosine-one-cycle", {"learning_rate": 1e-3, "lr_scheduler_type": "cosine", "warmup_steps": 1,
                          "lr_scheduler_kwargs": {"num_cycles": 1.0}}, 9),
    ("constant-with-warmup-4", {"learning_rate": 1e-3, "lr_scheduler_type": "constant_with_warmup",
                                "warmup_steps": 4}, 8),
    ("constant", {"learning_rate": 1e-3, "lr_scheduler_type": "constant", "warmup_steps": 3}, 5),
    ("cosine-min-lr-rate", {"learning_rate": 1e-3, "lr_scheduler_type": "cosine_with_min_lr", "warmup_steps": 2,
                            "lr_scheduler_kwargs": {"min_lr_rate": 0.1}}, 10),
    ("cosine-min-lr", {"learning_rate": 1e-3, "lr_scheduler_type": "cosine_with_min_lr",
                       "lr_scheduler_kwargs": {"min_lr": 1e-4}}, 10),
]


def run_case(keys, steps):
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(output_dir=out, report_to=[], **keys)
    param = torch.nn.Parameter(torch.zeros(4))
    opt = torch.optim.AdamW([param], lr=args.learning_rate)
    sched = get_scheduler(args.lr_scheduler_type, opt, num_warmup_steps=args.get_warmup_steps(steps),
                          num_training_steps=steps, scheduler_specific_kwargs=args.lr_scheduler_kwargs)
    lrs, state = [], None
    for k in range(steps):
        lrs.append(opt.param_groups[0]["lr"])
        param.grad = torch.ones_like(param)
        opt.step()
        sched.step()
        if k == 1:
            state = {key: value for key, value in sched.state_dict().items()}
    return {"warmup_steps": args.get_warmup_steps(steps), "lrs": lrs, "state_dict_after_2_steps": state}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    record = {
        "what": "the Hugging Face Trainer's lr per optimizer step (conformance/trainer_schedules.py)",
        "versions": {"transformers": transformers.__version__, "accelerate": accelerate.__version__,
                     "torch": torch.__version__},
        "cases": [dict(name=n, training_args=k, steps=s, **run_case(k, s)) for n, k, s in CASES],
    }
    tmp = a.out + ".partial"
    with open(tmp, "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    os.replace(tmp, a.out)
    print(f"wrote {a.out}: {len(CASES)} cases")


if __name__ == "__main__":
    main()
