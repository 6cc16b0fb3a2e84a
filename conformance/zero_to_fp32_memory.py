"""The host memory of DeepSpeed's zero_to_fp32 on a zrepro checkpoint, against zrepro's model
([Note: zero_to_fp32's host memory], trainer/checkpoint/zero_to_fp32.h).

    python conformance/zero_to_fp32_memory.py --zrepro build/zrepro --out conformance/results/zero_to_fp32_memory.json
    (scripts/conformance.sh --only zero_to_fp32_memory runs it; about 3 minutes)

(needs the venv of scripts/conformance.sh.) zrepro trains GPT-2 (124M parameters) one step
on 2 ranks at ZeRO stages 2 and 3, saves DeepSpeed's checkpoint and, with --zero-to-fp32,
consolidates it itself (summary.json's checkpoint.zero_to_fp32: the modelled peak of
anonymous host memory). Then each way DeepSpeed consolidates runs in a fresh interpreter
that samples its own RssAnon (the anonymous memory the kernel's OOM killer weighs; the
mapped checkpoint pages are file-backed and reclaimable) every 2 ms from a thread:
  api     get_fp32_state_dict_from_zero_checkpoint (the whole fp32 state dict at once)
  script  convert_zero_checkpoint_to_fp32_state_dict (zero_to_fp32.py's code) with
          --max_shard_size 5GB (the default: one shard here) and 100MB (several)
Each peak is above the interpreter's RssAnon after importing torch and deepspeed. Also
recorded: VmHWM (ru_maxrss: file-backed pages included).
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
from harness import ENV  # noqa: E402

WAYS = (("api", None), ("script", "5GB"), ("script", "100MB"))
# zrepro's modelled peak against the measured RssAnon peak above the interpreter, as a share
# of the fp32 model. The script path measures ~44 MB (9% of GPT-2's fp32 model) more than its
# shards, at every shard size and stage: it appears when split_torch_state_dict_into_shards
# runs over DeepSpeed's empty-tensor state dict, before any shard is merged (not modelled).
TOLERANCE = 0.10


def child(a):
    """One consolidation in this interpreter: its RssAnon peak above the baseline, as JSON."""
    import resource
    import threading

    import deepspeed  # noqa: F401  (the baseline includes the imports, the script's own among them)
    import torch  # noqa: F401
    from deepspeed.utils import zero_to_fp32 as z
    from huggingface_hub import split_torch_state_dict_into_shards  # noqa: F401  (imported by the script)

    def rss_anon():
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
        return 0

    base = rss_anon()
    peak = [base]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], rss_anon())
            time.sleep(0.002)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    t0 = time.time()
    if a.way == "api":
        sd = z.get_fp32_state_dict_from_zero_checkpoint(a.ckpt)
        peak[0] = max(peak[0], rss_anon())
        n = sum(v.numel() for v in sd.values())
        files = []
    else:
        z.convert_zero_checkpoint_to_fp32_state_dict(a.ckpt, a.out_dir, max_shard_size=a.shard)
        n = None
        files = sorted(os.listdir(a.out_dir))
    done.set()
    t.join()
    print(json.dumps({"rss_anon_peak_above_baseline": peak[0] - base, "baseline_rss_anon": base,
                      "vm_hwm": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "numel": n,
                      "files": files, "seconds": round(time.time() - t0, 1)}))


def run(cmd, log, timeout=900):
    """Like harness.run, but stdout apart (the child's JSON line) and no timing."""
    with open(log, "w") as f:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=f, env=ENV, timeout=timeout, text=True)
    return p.returncode, p.stdout


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        ap = argparse.ArgumentParser()
        ap.add_argument("child")
        ap.add_argument("--way", required=True)
        ap.add_argument("--ckpt", required=True)
        ap.add_argument("--out-dir", default=None)
        ap.add_argument("--shard", default=None)
        child(ap.parse_args())
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--zrepro", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default=None)
    a = ap.parse_args()
    import record
    work = os.path.abspath(a.work or tempfile.mkdtemp(prefix="zrepro-z2f-"))
    os.makedirs(work, exist_ok=True)
    t0 = time.time()
    rows = []
    for stage in (2, 3):
        cfg = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
               "zero_optimization": {"stage": stage}}
        case = f"gpt2-stage{stage}"
        cdir = os.path.join(work, case)
        os.makedirs(cdir, exist_ok=True)
        cfg_path = os.path.join(cdir, "ds_config.json")
        json.dump(cfg, open(cfg_path, "w"))
        ckpt = os.path.join(cdir, "checkpoint")
        for way, shard in WAYS:
            name = f"{way}-{shard or 'all'}"
            zout = os.path.join(cdir, "zrepro-" + name)
            flags = ["--model", "gpt2", "--seq", "16", "--ranks", "2", "--steps", "1", "--save-every", "1",
                     "--zero-to-fp32-mode", way] + (["--zero-to-fp32-shard", shard] if shard else [])
            cmd = [os.path.abspath(a.zrepro), "run", "--config", cfg_path, "--out", zout, "--save-dir", ckpt,
                   "--zero-to-fp32", os.path.join(zout, "fp32"), "--log-every", "1000"] + flags
            print(f"[z2f] {case} {name}: zrepro", flush=True)
            rc, _ = run(cmd, os.path.join(cdir, f"zrepro-{name}.log"))
            row = {"case": case, "stage": stage, "way": way, "max_shard_size": shard, "zrepro_exit_code": rc,
                   "zrepro_command": shlex.join(["zrepro"] + cmd[1:]).replace(work + "/", "WORK/")}
            if rc != 0:
                rows.append(row)
                continue
            z = json.load(open(os.path.join(zout, "summary.json")))["checkpoint"]["zero_to_fp32"]
            print(f"[z2f] {case} {name}: DeepSpeed", flush=True)
            dout = os.path.join(cdir, "deepspeed-" + name)
            ccmd = [sys.executable, os.path.abspath(__file__), "child", "--way", way, "--ckpt", ckpt,
                    "--out-dir", dout] + (["--shard", shard] if shard else [])
            rc, out = run(ccmd, os.path.join(cdir, f"deepspeed-{name}.log"))
            if rc != 0 or not out.strip():
                row.update({"ok": False, "deepspeed_exit_code": rc})
                rows.append(row)
                continue
            d = json.loads(out.strip().splitlines()[-1])
            measured, modelled = d["rss_anon_peak_above_baseline"], z["peak_anon_host_bytes"]
            rel = abs(modelled - measured) / max(z["numel"] * 4, 1)
            files_same = way == "api" or sorted(f for f in z["files"]) == d["files"]
            if way != "api":
                d["file_bytes"] = {f: os.path.getsize(os.path.join(dout, f)) for f in d["files"]}
            row.update({"zrepro": z, "deepspeed": d, "modelled_peak_anon": modelled, "measured_peak_anon": measured,
                        "diff_share_of_fp32_model": rel, "rel_diff_of_measured": abs(modelled - measured) / max(measured, 1), "fp32_model_bytes": z["numel"] * 4, "files_same": files_same,
                        "ok": rel <= TOLERANCE and files_same})
            print(f"[z2f] {case} {name}: modelled {modelled / 2**20:.1f} MiB, measured {measured / 2**20:.1f} MiB "
                  f"({rel:.1%} of the fp32 model), files {'same' if files_same else 'DIFFER'}", flush=True)
            rows.append(row)
    rec = {"case": "zero_to_fp32_memory", "kind": "zero_to_fp32_memory", "rows": rows, "tolerance": TOLERANCE,
           "versions": record.versions(), "recorded": time.strftime("%Y-%m-%d"),
           "command": "python conformance/zero_to_fp32_memory.py --zrepro build/zrepro "
                      "--out conformance/results/zero_to_fp32_memory.json",
           "seconds": round(time.time() - t0, 1)}
    record.write(a.out, rec)


if __name__ == "__main__":
    main()
