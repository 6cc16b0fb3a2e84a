"""Runs zrepro and real DeepSpeed side by side on every case of cases.py and writes
one JSON per case under --results, with the versions and commands that made it.

    python conformance/harness.py --zrepro build/zrepro --results conformance/results [--only NAME ...]

Needs the venv of scripts/conformance.sh (torch, deepspeed) for the DeepSpeed side.
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import cases as C  # noqa: E402
import record  # noqa: E402
from compare import compare_mismatch, compare_training  # noqa: E402

# The environment of every child the conformance scripts start (zrepro under mpirun as
# root, DeepSpeed on the CPU accelerator, one thread per rank).
ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1",
           OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1", DS_ACCELERATOR="cpu",
           PYTHONUNBUFFERED="1")


def run_flags(case):
    """zrepro's flags for a case besides --config and --out (recorded: the CI test reruns them)."""
    flags = ["--steps", str(case["steps"]), "--ranks", str(case["ranks"]), "--log-every", "1000"]
    flags += case.get("model_args", [])
    if case["kind"] == "gas_mismatch":
        flags += ["--inject", f"gas-mismatch:{case['extra_rank']}", "--comm-timeout", "10"]
    return flags


def zrepro_args(case, config_path, out):
    return ["run", "--config", config_path, "--out", out] + run_flags(case)


def run(cmd, timeout, log):
    """cmd's exit code (None when killed at `timeout` s), its seconds and its output (stdout
    and stderr, also in the file `log`)."""
    t0 = time.time()
    with open(log, "w") as f:
        try:
            p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=ENV, timeout=timeout)
            rc = p.returncode
        except subprocess.TimeoutExpired:
            rc = None  # killed: still running after `timeout` seconds
    return rc, time.time() - t0, open(log, errors="replace").read()


def run_case(case, zrepro, work, port):
    os.makedirs(work, exist_ok=True)
    config_path = os.path.join(work, "ds_config.json")
    json.dump(case["config"], open(config_path, "w"), indent=1)
    zout = os.path.join(work, "zrepro")
    zargs = zrepro_args(case, config_path, zout)
    if case["kind"] == "training":
        # The compared run also writes the inputs DeepSpeed trains on.
        z_rc, z_s, z_log = run([zrepro] + zargs + ["--export-inputs"], 600, os.path.join(work, "zrepro.log"))
        inputs = os.path.join(zout, "inputs")
    else:
        # A clean run of the same config writes the inputs; the compared run has the fault.
        clean = zrepro_args(dict(case, kind="training"), config_path, os.path.join(work, "export"))
        run([zrepro] + clean + ["--export-inputs"], 600, os.path.join(work, "export.log"))
        inputs = os.path.join(work, "export", "inputs")
        z_rc, z_s, z_log = run([zrepro] + zargs, 600, os.path.join(work, "zrepro.log"))
    ds_out = os.path.join(work, "deepspeed.json")
    ds_cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(case["ranks"]),
              "--master_port", str(port), os.path.join(HERE, "ds_run.py"), "--inputs", inputs,
              "--config", config_path, "--steps", str(case["steps"]), "--out", ds_out]
    if case["kind"] == "gas_mismatch":
        ds_cmd += ["--extra-micro-step-rank", str(case["extra_rank"])]
    attempts = 0
    while True:
        attempts += 1
        ds_rc, ds_s, ds_log = run(ds_cmd, 180 if case["kind"] == "gas_mismatch" else 900,
                                  os.path.join(work, "deepspeed.log"))
        # A training run that dies is retried once (DeepSpeed 0.19.8's CPU overlap_comm
        # path has aborted in its teardown once here); a mismatch case's failure is the point.
        if ds_rc == 0 or case["kind"] != "training" or attempts == 2:
            break
    summary = json.load(open(os.path.join(zout, "summary.json"))) if os.path.exists(
        os.path.join(zout, "summary.json")) else None
    ds = json.load(open(ds_out)) if os.path.exists(ds_out) else None
    rec = {"case": case["name"], "kind": case["kind"], "ranks": case["ranks"], "steps": case["steps"],
           "config": case["config"], "zrepro_flags": run_flags(case),
           "zrepro": {"exit_code": z_rc, "seconds": round(z_s, 1)},
           "deepspeed": {"exit_code": ds_rc, "seconds": round(ds_s, 1), "attempts": attempts,
                         "command": shlex.join(ds_cmd[1:])}}
    if case["kind"] == "training":
        if z_rc != 0 or ds_rc != 0 or ds is None or summary is None:
            rec["error"] = {"zrepro_log_tail": z_log[-2000:], "deepspeed_log_tail": ds_log[-3000:]}
            return rec
        metrics = [json.loads(line) for line in open(os.path.join(zout, "metrics.jsonl"))]
        rec.update(compare_training(case, summary, metrics, ds))
        for row in rec["rows"]:
            if not row["ok"]:
                row["cause"] = C.known_gap(case["name"], row["what"])
    else:
        rec.update(compare_mismatch(case, z_rc, summary, z_log, ds_rc, ds_log, ds_s))
    return rec


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--zrepro", required=True)
    ap.add_argument("--results", required=True)
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--work", default=None, help="scratch folder (default: a temporary one)")
    a = ap.parse_args()
    versions = record.versions()
    work = a.work or tempfile.mkdtemp(prefix="zrepro-conformance-")
    os.makedirs(a.results, exist_ok=True)
    todo = [c for c in C.all_cases() if not a.only or c["name"] in a.only]
    for i, case in enumerate(todo):
        t0 = time.time()
        rec = run_case(case, os.path.abspath(a.zrepro), os.path.join(work, case["name"]), 29500 + i % 400)
        rec["versions"] = versions
        rec["recorded"] = time.strftime("%Y-%m-%d")
        rec["command"] = "scripts/conformance.sh --only " + case["name"]
        path = os.path.join(a.results, case["name"] + ".json")
        record.write(path, rec)
        print(f"[conformance] {case['name']}: {rec.get('verdict', 'error')} ({time.time() - t0:.0f} s)", flush=True)
    if not a.only or "moe-stage3-ranks2" in a.only:  # MoE under ZeRO-3, leaf module off and on (moe_zero3.py)
        subprocess.run([sys.executable, os.path.join(HERE, "moe_zero3.py"), "--zrepro", os.path.abspath(a.zrepro),
                        "--out", os.path.join(a.results, "moe-stage3-ranks2.json"),
                        "--work", os.path.join(work, "moe-stage3-ranks2")], env=ENV, check=True)
    if not a.only or "checkpoints" in a.only:  # zrepro's checkpoints read by DeepSpeed (checkpoints.py)
        subprocess.run([sys.executable, os.path.join(HERE, "checkpoints.py"), "--zrepro", os.path.abspath(a.zrepro),
                        "--out", os.path.join(a.results, "checkpoints.json"),
                        "--work", os.path.join(work, "checkpoints")], env=ENV, check=True)
    if not a.only or "zero_to_fp32_memory" in a.only:  # zero_to_fp32's host memory (zero_to_fp32_memory.py)
        subprocess.run([sys.executable, os.path.join(HERE, "zero_to_fp32_memory.py"), "--zrepro",
                        os.path.abspath(a.zrepro), "--out", os.path.join(a.results, "zero_to_fp32_memory.json"),
                        "--work", os.path.join(work, "zero_to_fp32_memory")], env=ENV, check=True)
    if not a.only or "configs" in a.only:
        subprocess.run([sys.executable, os.path.join(HERE, "configs.py"), "--zrepro", os.path.abspath(a.zrepro),
                        "--out", os.path.join(a.results, "configs.json")], check=True)
    if not a.only or "estimators" in a.only:
        subprocess.run([sys.executable, os.path.join(HERE, "estimators.py"), "--zrepro", os.path.abspath(a.zrepro),
                        "--out", os.path.join(a.results, "estimators.json")], check=True)


if __name__ == "__main__":
    main()
