"""zrepro's checkpoints read by real DeepSpeed (issue 36): zero_to_fp32 and load_checkpoint.

    python conformance/checkpoints.py --zrepro build/zrepro --out conformance/results/checkpoints.json
    (scripts/conformance.sh --only checkpoints runs it)

(needs the venv of scripts/conformance.sh.) For each case zrepro trains N steps on 2 ranks,
saving DeepSpeed's ZeRO checkpoint (--save-every) at step K and at step N, with
--export-inputs (the weights, batches and, at the end, the parameters after step N in
OUT/final.npy). Then:

  consolidate  DeepSpeed's own zero_to_fp32 (deepspeed.utils.zero_to_fp32
               get_fp32_state_dict_from_zero_checkpoint, the code of the zero_to_fp32.py script
               DeepSpeed copies into every checkpoint folder) on global_step<N>, against
               final.npy: bit for bit in fp32 (the parameters are the fp32 master); in bf16
               final.npy holds the bf16 parameters, so the consolidated fp32 master is
               compared after rounding to bf16 (the master itself is what a zrepro resume
               reloads, and that resume is bit-exact: tests/trainer/checkpoint/).
  resume       deepspeed.initialize on conformance/ds_model.py's network with the same
               config, engine.load_checkpoint(zrepro's folder, tag global_step<K>), then steps
               K+1..N on the same batches: losses and grad norms against zrepro's own steps
               K+1..N of the uninterrupted run (the training cases' tolerances). Only for the
               gpt2 toy: ds_model.HfLlama wraps LlamaForCausalLM under "hf.", so its module
               names are not the ones a user's model (and zrepro's checkpoint) has.
  from_deepspeed
               the other way round: DeepSpeed trains steps 1..N from zrepro's exported inputs,
               saving its own checkpoint (engine.save_checkpoint) after step K;
               `zrepro checkpoint from-deepspeed` rewrites it and `zrepro run --resume` trains
               steps K+1..N: losses and grad norms against DeepSpeed's own steps K+1..N (the
               training cases' tolerances). DeepSpeed's zero_to_fp32 on the rewritten files
               must give the state dict it gives on its own (the files stay DeepSpeed's).
               The DeepSpeed-written checkpoints of FIXTURE_CASES are copied into
               results/deepspeed-checkpoints/CASE/ (the CI test resumes from them without
               DeepSpeed). The gpt2 toy, as resume.
  universal    DeepSpeed's ds_to_universal.py (--inject_missing_state) on global_step<K>
               against `zrepro checkpoint to-universal`: every file under zero/ equal, tensor
               for tensor; then DeepSpeed (load_universal) and zrepro (--resume under
               checkpoint.load_universal) resume from it on 1 rank, the same train_batch_size
               (the accumulation makes up for the ranks): losses and grad norms against each
               other (the training cases' tolerances). The gpt2 toy, as resume.
"""
import argparse
import json
import os
import shlex
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from harness import run  # noqa: E402

RANKS, STEPS, SAVE_AT = 2, 4, 2
# Whose DeepSpeed-written checkpoint is kept under results/deepspeed-checkpoints/ (a
# stage 1-2 layout and a stage 3 one, fp32 and bf16; about 1.9 MB each).
FIXTURE_CASES = ("tiny-fp32-stage2", "tiny-bf16-stage3")


def cases():
    import cases as C
    out = []
    for model, stage, precision, resume in (("tiny", 1, "fp32", True), ("tiny", 2, "fp32", True),
                                            ("tiny", 3, "fp32", True), ("tiny", 2, "bf16", True),
                                            ("tiny", 3, "bf16", True), ("tiny-llama", 3, "fp32", False),
                                            ("tiny-llama", 2, "bf16", False)):
        # universal: ds_to_universal on zrepro's checkpoint against zrepro's converter, and the
        # resume at another world size (the gpt2 toy's module names, as for resume).
        cfg = C.ds_config(stage, 2, precision)
        cfg["train_micro_batch_size_per_gpu"] = 2
        if stage == 3:  # some parameters gathered, some persistent
            cfg["zero_optimization"]["stage3_param_persistence_threshold"] = 100
        out.append({"name": f"{model}-{precision}-stage{stage}", "model": model, "stage": stage,
                    "precision": precision, "resume": resume, "config": cfg, "universal": resume,
                    "tolerance": C.FP32_TOL if precision == "fp32" else C.BF16_TOL})
    # The Hugging Face Trainer's own schedule handed to DeepSpeed (the file has "optimizer",
    # no "scheduler"): zrepro saves the LambdaLR's state, DeepSpeed loads it into its own
    # LambdaLR (and the other way round), and the lr continues.
    cfg = C.ds_config(2, 2, "fp32")
    cfg["train_micro_batch_size_per_gpu"] = 2
    out.append({"name": "tiny-fp32-stage2-trainer-cosine", "model": "tiny", "stage": 2, "precision": "fp32",
                "resume": True, "config": cfg, "universal": False, "tolerance": C.FP32_TOL,
                "training_args": {"learning_rate": 0.003, "weight_decay": 0.01, "max_grad_norm": 1.0,
                                  "lr_scheduler_type": "cosine", "warmup_steps": 1},
                "lambda": f"cosine:1:{STEPS}"})
    return out


def trainer_flags(case, work):
    """zrepro's --training-args for a case that has the Trainer's arguments."""
    if "training_args" not in case:
        return []
    path = os.path.join(work, "training_args.json")
    json.dump(case["training_args"], open(path, "w"), indent=1)
    return ["--training-args", path]


def trainer_lambda(spec):
    """transformers' linear or cosine lambda (optimization.py), from NAME:WARMUP:TOTAL."""
    import math
    name, w, total = spec.split(":")
    w, total = int(w), int(total)

    def lam(s):
        if s < w:
            return float(s) / float(max(1, w))
        if name == "linear":
            return max(0.0, float(total - s) / float(max(1, total - w)))
        progress = float(s - w) / float(max(1, total - w))
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * 0.5 * 2.0 * progress)))
    return lam


# ---------------------------------------------------------------- DeepSpeed resumes (one rank)

def worker(a):
    import deepspeed
    import torch
    import torch.distributed as dist
    from ds_model import load, micro_batch

    torch.set_num_threads(1)
    deepspeed.init_distributed(dist_backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model, layout, tokens = load(a.inputs)
    layout["batch"]["world"] = world  # another world size (universal): the same samples per step
    config = json.load(open(a.config))
    sched = None
    if a.trainer_lambda:  # the Trainer's schedule, handed to DeepSpeed as a callable (accelerate's DummyScheduler)
        lam = trainer_lambda(a.trainer_lambda)
        sched = lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lam)  # noqa: E731
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.ordered, config=config,
                                           lr_scheduler=sched)
    path = None
    if a.save_at is None:  # resume from a.ckpt
        path, client = engine.load_checkpoint(a.ckpt, tag=None if a.tag == "latest_universal" else a.tag)
    steps = []
    gas = engine.gradient_accumulation_steps()
    for step in range(a.first, a.steps):
        lr = engine.get_lr()[0]
        losses = []
        for t in range(gas):
            inputs, targets = micro_batch(tokens, layout, step, t, rank)
            loss = engine(inputs, targets)
            engine.backward(loss)
            losses.append(float(loss.detach()))
            engine.step()
        local = torch.tensor([sum(losses) / len(losses)], dtype=torch.float64)
        dist.all_reduce(local)
        norm = engine.get_global_grad_norm()
        steps.append({"step": step, "loss": float(local) / world, "grad_norm": float(norm) if norm is not None else None,
                      "lr": lr})
        if a.save_at is not None and step + 1 == a.save_at:  # DeepSpeed writes the checkpoint zrepro imports
            engine.save_checkpoint(a.ckpt)
    if rank == 0:
        with open(a.out + ".tmp", "w") as f:
            json.dump({"loaded": path, "global_steps": engine.global_steps, "steps": steps}, f, indent=1)
        os.replace(a.out + ".tmp", a.out)
    dist.barrier()
    dist.destroy_process_group()


# ---------------------------------------------------------------- the driver

def zrepro_names_in_order(inputs):
    """DeepSpeed's module names of zrepro's parameters, in zrepro's flat order (final.npy's)."""
    from ds_model import load
    model, layout, _ = load(inputs)
    names = {id(p): n for n, p in model.named_parameters()}
    # ds_model.HfLlama holds LlamaForCausalLM as .hf: a user's model (and the checkpoint) has no prefix.
    return [names[id(p)].removeprefix("hf.") for p in model.ordered], [p.numel() for p in model.ordered]


def consolidate(case, ckpt, inputs, zout):
    import numpy as np
    import torch
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
    sd = get_fp32_state_dict_from_zero_checkpoint(ckpt, tag=f"global_step{STEPS}")
    names, numels = zrepro_names_in_order(inputs)
    final = torch.from_numpy(np.load(os.path.join(zout, "final.npy")))
    missing = [n for n in names if n not in sd]
    if missing:
        return {"ok": False, "what": "zero_to_fp32 names", "missing": missing[:5], "extra": sorted(set(sd) - set(names))[:5]}
    ours = torch.cat([sd[n].reshape(-1) for n in names])
    if case["precision"] == "bf16":
        ours = ours.to(torch.bfloat16).float()
    diff = (ours - final).abs()
    return {"ok": bool(torch.equal(ours, final)), "params": len(names), "elements": int(final.numel()),
            "max_abs_diff": float(diff.max()), "compared": "bit for bit" if case["precision"] == "fp32" else
            "the consolidated fp32 master rounded to bf16, against zrepro's bf16 parameters",
            "extra_keys": sorted(set(sd) - set(names))}


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def resume(case, ckpt, inputs, work, summary, port):
    cfg_path = os.path.join(work, "ds_config.json")
    json.dump(case["config"], open(cfg_path, "w"), indent=1)
    out = os.path.join(work, "deepspeed-resume.json")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(RANKS), "--master_port", str(port),
           os.path.abspath(__file__), "worker", "--inputs", inputs, "--config", cfg_path, "--ckpt", ckpt,
           "--tag", f"global_step{SAVE_AT}", "--first", str(SAVE_AT), "--steps", str(STEPS), "--out", out]
    cmd += ["--trainer-lambda", case["lambda"]] if "lambda" in case else []
    rc, s, log = run(cmd, 900, os.path.join(work, "deepspeed.log"))
    if rc != 0 or not os.path.exists(out):
        return {"ok": False, "exit_code": rc, "seconds": round(s, 1), "log_tail": log[-3000:]}
    d = json.load(open(out))
    z = summary["steps"][SAVE_AT:]
    tol = case["tolerance"]
    tl = tol if isinstance(tol, float) else tol["loss"]
    tg = tol if isinstance(tol, float) else tol["grad_norm"]
    loss_diff = max(rel(x["loss"], y["loss"]) for x, y in zip(z, d["steps"]))
    norm_diff = max(rel(x["grad_norm"], y["grad_norm"]) for x, y in zip(z, d["steps"]))
    lr_diff = max(rel(x["lr"], y["lr"]) if y["lr"] else abs(x["lr"]) for x, y in zip(z, d["steps"]))
    return {"ok": loss_diff <= tl and norm_diff <= tg and lr_diff <= 1e-12 and d["global_steps"] == STEPS,
            "seconds": round(s, 1), "zrepro_lrs": [x["lr"] for x in z], "deepspeed_lrs": [x["lr"] for x in d["steps"]],
            "max_rel_diff_lr": lr_diff,
            "deepspeed_global_steps_after": d["global_steps"],
            "zrepro_losses": [x["loss"] for x in z], "deepspeed_losses": [x["loss"] for x in d["steps"]],
            "zrepro_grad_norms": [x["grad_norm"] for x in z], "deepspeed_grad_norms": [x["grad_norm"] for x in d["steps"]],
            "max_rel_diff_loss": loss_diff, "max_rel_diff_grad_norm": norm_diff, "tolerance": {"loss": tl, "grad_norm": tg}}


def fp32_state_dict(ckpt, tag):
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
    return get_fp32_state_dict_from_zero_checkpoint(ckpt, tag=tag)


def from_deepspeed(case, inputs, work, port, zrepro, fixtures):
    """DeepSpeed saves after step SAVE_AT; zrepro rewrites its checkpoint and resumes from it."""
    import shutil
    cfg_path = os.path.join(work, "ds_config.json")
    json.dump(case["config"], open(cfg_path, "w"), indent=1)
    ds_ckpt, out = os.path.join(work, "deepspeed-checkpoint"), os.path.join(work, "deepspeed-saved.json")
    shutil.rmtree(ds_ckpt, ignore_errors=True)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(RANKS), "--master_port", str(port),
           os.path.abspath(__file__), "worker", "--inputs", inputs, "--config", cfg_path, "--ckpt", ds_ckpt,
           "--save-at", str(SAVE_AT), "--first", "0", "--steps", str(STEPS), "--out", out]
    cmd += ["--trainer-lambda", case["lambda"]] if "lambda" in case else []
    rc, s, log = run(cmd, 900, os.path.join(work, "deepspeed-save.log"))
    if rc != 0 or not os.path.exists(out):
        return {"ok": False, "what": "DeepSpeed training and save_checkpoint", "exit_code": rc, "log_tail": log[-3000:]}
    d = json.load(open(out))["steps"]
    imported = os.path.join(work, "imported")
    shutil.rmtree(imported, ignore_errors=True)
    conv = [zrepro, "checkpoint", "from-deepspeed", "--input-folder", ds_ckpt, "--output-folder", imported]
    rc, _, log = run(conv, 600, os.path.join(work, "zrepro-from-deepspeed.log"))
    if rc != 0:
        return {"ok": False, "what": "zrepro checkpoint from-deepspeed", "exit_code": rc, "log_tail": log[-3000:]}
    tag = f"global_step{SAVE_AT}"
    a, b = fp32_state_dict(ds_ckpt, tag), fp32_state_dict(imported, tag)
    still_deepspeeds = same_tree(a, b) and list(a) == list(b)
    zout = os.path.join(work, "zrepro-from-deepspeed")
    zrun = [zrepro, "run", "--config", cfg_path, "--out", zout, "--model", case["model"], "--ranks", str(RANKS),
            "--steps", str(STEPS), "--resume", imported, "--log-every", "1000"] + trainer_flags(case, work)
    rc, _, log = run(zrun, 600, os.path.join(work, "zrepro-resume-from-deepspeed.log"))
    if rc != 0:
        return {"ok": False, "what": "zrepro --resume", "exit_code": rc, "log_tail": log[-3000:]}
    z = json.load(open(os.path.join(zout, "summary.json")))["steps"]
    theirs = d[SAVE_AT:]
    tol = case["tolerance"]
    tl = tol if isinstance(tol, float) else tol["loss"]
    tg = tol if isinstance(tol, float) else tol["grad_norm"]
    loss_diff = max(rel(x["loss"], y["loss"]) for x, y in zip(z, theirs))
    norm_diff = max(rel(x["grad_norm"], y["grad_norm"]) for x, y in zip(z, theirs))
    lr_diff = max(rel(x["lr"], y["lr"]) if y["lr"] else abs(x["lr"]) for x, y in zip(z, theirs))
    row = {"ok": loss_diff <= tl and norm_diff <= tg and lr_diff <= 1e-12 and len(z) == len(theirs) and still_deepspeeds,
           "zrepro_lrs": [x["lr"] for x in z], "deepspeed_lrs": [x["lr"] for x in theirs], "max_rel_diff_lr": lr_diff,
           "zrepro_losses": [x["loss"] for x in z], "deepspeed_losses": [x["loss"] for x in theirs],
           "zrepro_grad_norms": [x["grad_norm"] for x in z], "deepspeed_grad_norms": [x["grad_norm"] for x in theirs],
           "deepspeed_losses_before_save": [x["loss"] for x in d[:SAVE_AT]],
           "max_rel_diff_loss": loss_diff, "max_rel_diff_grad_norm": norm_diff, "tolerance": {"loss": tl, "grad_norm": tg},
           "rewritten_files_give_deepspeeds_zero_to_fp32": still_deepspeeds}
    if case["name"] in FIXTURE_CASES:
        dest = os.path.join(fixtures, case["name"])
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(os.path.join(ds_ckpt, tag), os.path.join(dest, tag))
        shutil.copy(os.path.join(ds_ckpt, "latest"), dest)
        row["fixture"] = os.path.relpath(dest, ROOT)
    return row


UNIVERSAL_RANKS = 1  # the world size the universal checkpoint (saved on RANKS) resumes at


def load_any(path):
    import torch
    return torch.load(path, map_location="cpu", weights_only=False)


def same_tree(a, b):
    """Whether two loaded .pt values are equal: tensors exactly (dtype, shape, values)."""
    import torch
    if torch.is_tensor(a) or torch.is_tensor(b):
        return torch.is_tensor(a) and torch.is_tensor(b) and a.dtype == b.dtype and a.shape == b.shape and \
            torch.equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return set(a) == set(b) and all(same_tree(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_tree(x, y) for x, y in zip(a, b))
    if hasattr(a, "__dict__") and hasattr(b, "__dict__"):
        return type(a).__name__ == type(b).__name__ and same_tree(vars(a), vars(b))
    return a == b


def compare_universal(ds_dir, z_dir):
    """Every file ds_to_universal wrote under zero/, against zrepro's converter's."""
    files, differ, missing = 0, [], []
    for root, _, names in os.walk(os.path.join(ds_dir, "zero")):
        for n in names:
            rel_path = os.path.relpath(os.path.join(root, n), ds_dir)
            files += 1
            other = os.path.join(z_dir, rel_path)
            if not os.path.exists(other):
                missing.append(rel_path)
                continue
            a, b = load_any(os.path.join(ds_dir, rel_path)), load_any(other)
            if rel_path.endswith("optimizer_state.pt"):
                # The global state: the same keys, loss scaler and param groups.
                ok = set(a) == set(b) and same_tree(a["param_groups"], b["param_groups"]) and \
                    same_tree(a["loss_scaler"], b["loss_scaler"])
            else:
                ok = same_tree(a, b)
            if not ok:
                differ.append(rel_path)
    extra = []
    for root, _, names in os.walk(os.path.join(z_dir, "zero")):
        for n in names:
            rel_path = os.path.relpath(os.path.join(root, n), z_dir)
            if not os.path.exists(os.path.join(ds_dir, rel_path)):
                extra.append(rel_path)
    return {"ok": files > 0 and not differ and not missing and not extra, "files": files, "differ": differ[:10],
            "missing_in_zrepro": missing[:10], "extra_in_zrepro": extra[:10]}


def universal(case, ckpt, inputs, work, summary, port, zrepro):
    """ds_to_universal.py on zrepro's checkpoint against `zrepro checkpoint to-universal`, then
    DeepSpeed and zrepro resume from it on UNIVERSAL_RANKS ranks under load_universal."""
    import deepspeed
    tag = f"global_step{SAVE_AT}"
    ds_root, z_root = os.path.join(work, "universal-deepspeed"), os.path.join(work, "universal-zrepro")
    script = os.path.join(os.path.dirname(deepspeed.__file__), "checkpoint", "ds_to_universal.py")
    rc, s, log = run([sys.executable, script, "--input_folder", os.path.join(ckpt, tag), "--output_folder",
                      os.path.join(ds_root, tag + "_universal"), "--inject_missing_state", "--num_extract_workers",
                      "1", "--num_merge_workers", "1"], 600, os.path.join(work, "ds_to_universal.log"))
    if rc != 0:
        return {"ok": False, "what": "ds_to_universal.py", "exit_code": rc, "log_tail": log[-3000:]}
    zcmd = [zrepro, "checkpoint", "to-universal", "--input-folder", os.path.join(ckpt, tag), "--output-folder",
            os.path.join(z_root, tag + "_universal"), "--inject-missing-state"]
    rc, _, log = run(zcmd, 600, os.path.join(work, "zrepro-to-universal.log"))
    if rc != 0:
        return {"ok": False, "what": "zrepro checkpoint to-universal", "exit_code": rc, "log_tail": log[-3000:]}
    files = compare_universal(os.path.join(ds_root, tag + "_universal"), os.path.join(z_root, tag + "_universal"))
    # The resume at another world size: the same global batch (train_batch_size), so the
    # accumulation makes up for the ranks.
    cfg = json.loads(json.dumps(case["config"]))
    gas = cfg.pop("gradient_accumulation_steps")
    cfg["train_batch_size"] = cfg["train_micro_batch_size_per_gpu"] * gas * RANKS
    cfg["checkpoint"] = {"load_universal": True}
    cfg_path = os.path.join(work, "universal_config.json")
    json.dump(cfg, open(cfg_path, "w"), indent=1)
    out = os.path.join(work, "deepspeed-universal-resume.json")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(UNIVERSAL_RANKS), "--master_port",
           str(port), os.path.abspath(__file__), "worker", "--inputs", inputs, "--config", cfg_path, "--ckpt", ds_root,
           "--tag", "latest_universal", "--first", str(SAVE_AT), "--steps", str(STEPS), "--out", out]
    rc, s, log = run(cmd, 900, os.path.join(work, "deepspeed-universal.log"))
    if rc != 0 or not os.path.exists(out):
        return {"ok": False, "files": files, "what": "DeepSpeed load_universal", "exit_code": rc,
                "log_tail": log[-3000:]}
    d = json.load(open(out))
    zout = os.path.join(work, "zrepro-universal")
    zrun = [zrepro, "run", "--config", cfg_path, "--out", zout, "--model", case["model"], "--steps", str(STEPS),
            "--resume", z_root, "--log-every", "1000"]
    rc, _, log = run(zrun, 600, os.path.join(work, "zrepro-universal.log"))
    if rc != 0:
        return {"ok": False, "files": files, "what": "zrepro --resume (load_universal)", "exit_code": rc,
                "log_tail": log[-3000:]}
    z = json.load(open(os.path.join(zout, "summary.json")))["steps"]
    tol = case["tolerance"]
    tl = tol if isinstance(tol, float) else tol["loss"]
    tg = tol if isinstance(tol, float) else tol["grad_norm"]
    loss_diff = max(rel(x["loss"], y["loss"]) for x, y in zip(z, d["steps"]))
    norm_diff = max(rel(x["grad_norm"], y["grad_norm"]) for x, y in zip(z, d["steps"]))
    uninterrupted = summary["steps"][SAVE_AT:]
    return {"ok": files["ok"] and loss_diff <= tl and norm_diff <= tg and d["global_steps"] == STEPS,
            "files": files, "saved_on": RANKS, "resumed_on": UNIVERSAL_RANKS, "config": cfg,
            "zrepro_losses": [x["loss"] for x in z], "deepspeed_losses": [x["loss"] for x in d["steps"]],
            "zrepro_grad_norms": [x["grad_norm"] for x in z],
            "deepspeed_grad_norms": [x["grad_norm"] for x in d["steps"]],
            "max_rel_diff_loss": loss_diff, "max_rel_diff_grad_norm": norm_diff,
            "tolerance": {"loss": tl, "grad_norm": tg},
            "uninterrupted_losses": [x["loss"] for x in uninterrupted],
            "max_rel_diff_loss_vs_uninterrupted": max(rel(x["loss"], y["loss"]) for x, y in zip(z, uninterrupted))}


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        ap = argparse.ArgumentParser()
        ap.add_argument("worker")
        for k in ("--inputs", "--config", "--ckpt", "--out"):
            ap.add_argument(k, required=True)
        ap.add_argument("--tag", default=None)
        ap.add_argument("--save-at", type=int, default=None, help="train from step 0 and save after this step")
        ap.add_argument("--trainer-lambda", default=None, help="NAME:WARMUP:TOTAL, the Trainer's LambdaLR")
        ap.add_argument("--first", type=int, required=True)
        ap.add_argument("--steps", type=int, required=True)
        worker(ap.parse_args())
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--zrepro", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default=None)
    ap.add_argument("--port", type=int, default=29970)
    a = ap.parse_args()
    import record
    work_root = os.path.abspath(a.work or tempfile.mkdtemp(prefix="zrepro-ckpt-"))
    t0 = time.time()
    rows = []
    for i, case in enumerate(cases()):
        work = os.path.join(work_root, case["name"])
        os.makedirs(work, exist_ok=True)
        cfg = os.path.join(work, "zrepro_config.json")
        json.dump(case["config"], open(cfg, "w"), indent=1)
        ckpt, zout = os.path.join(work, "checkpoint"), os.path.join(work, "zrepro")
        flags = ["--model", case["model"], "--ranks", str(RANKS), "--steps", str(STEPS), "--save-every", str(SAVE_AT),
                 "--log-every", "1000"] + trainer_flags(case, work)
        cmd = [os.path.abspath(a.zrepro), "run", "--config", cfg, "--out", zout, "--save-dir", ckpt,
               "--export-inputs"] + flags
        rc, s, log = run(cmd, 600, os.path.join(work, "zrepro.log"))
        row = {"case": case["name"], "model": case["model"], "stage": case["stage"], "precision": case["precision"],
               "config": case["config"], "zrepro_flags": [f.replace(work + "/", "WORK/") for f in flags],
               "zrepro_exit_code": rc, "zrepro_seconds": round(s, 1),
               "zrepro_command": shlex.join(["zrepro"] + cmd[1:]).replace(work + "/", "WORK/")}
        if "training_args" in case:  # the record test writes them to WORK/training_args.json again
            row["training_args"] = case["training_args"]
        if rc != 0:
            row["error"] = log[-2000:]
            rows.append(row)
            continue
        summary = json.load(open(os.path.join(zout, "summary.json")))
        inputs = os.path.join(zout, "inputs")
        print(f"[ckpt] {case['name']}: zero_to_fp32", flush=True)
        row["consolidate"] = consolidate(case, ckpt, inputs, zout)
        if case["resume"]:
            print(f"[ckpt] {case['name']}: DeepSpeed load_checkpoint + steps {SAVE_AT + 1}..{STEPS}", flush=True)
            row["resume"] = resume(case, ckpt, inputs, work, summary, a.port + i)
        if case["resume"]:
            print(f"[ckpt] {case['name']}: DeepSpeed saves, zrepro checkpoint from-deepspeed + --resume", flush=True)
            row["from_deepspeed"] = from_deepspeed(case, inputs, work, a.port + 100 + i, os.path.abspath(a.zrepro),
                                                   os.path.join(os.path.dirname(os.path.abspath(a.out)),
                                                                "deepspeed-checkpoints"))
        if case["universal"]:
            print(f"[ckpt] {case['name']}: ds_to_universal + load_universal on {UNIVERSAL_RANKS} rank(s)", flush=True)
            row["universal"] = universal(case, ckpt, inputs, work, summary, a.port + 50 + i, os.path.abspath(a.zrepro))
        print(f"[ckpt] {case['name']}: consolidate {row['consolidate'].get('ok')}, resume "
              f"{row.get('resume', {}).get('ok', '-')}, from DeepSpeed {row.get('from_deepspeed', {}).get('ok', '-')}, "
              f"universal {row.get('universal', {}).get('ok', '-')}",
              flush=True)
        rows.append(row)
    rec = {"case": "checkpoints", "kind": "checkpoints", "ranks": RANKS, "steps": STEPS, "save_at": SAVE_AT,
           "rows": rows, "versions": record.versions(), "recorded": time.strftime("%Y-%m-%d"),
           "command": "python conformance/checkpoints.py --zrepro build/zrepro --out conformance/results/checkpoints.json",
           "seconds": round(time.time() - t0, 1)}
    record.write(a.out, rec)


if __name__ == "__main__":
    main()
