#!/usr/bin/env python3
"""The verdict of scripts/gpu-check.sh from what its folder holds so far.

usage: gpu-verdict.py OUT      writes OUT/gpu-check.json, prints the checks, exits 0 when
                               every check ran and passed, 1 otherwise.
Each check is null until its step ran, so a verdict written after a time-out says how far
the check got ("reached") and what passed up to there.
"""
import json
import os
import re
import sys

out = sys.argv[1]


def read(name):
    p = os.path.join(out, name)
    return open(p).read().strip() if os.path.exists(p) else None


def summary(name):
    p = os.path.join(out, name, "summary.json")
    try:
        return json.load(open(p))
    except (OSError, ValueError):
        return None


def rc(name):
    r = read(name + ".rc")
    return int(r) if r not in (None, "") else None


def backend(name):
    log = read(name + ".log") or ""
    m = re.search(r"comm=(\w+)", log)
    return m.group(1) if m else None


def loss_rel(a, b):
    """Worst relative loss difference over the steps of two ok runs (None if either is missing)."""
    sa, sb = summary(a), summary(b)
    if not sa or not sb or sa.get("status") != "ok" or sb.get("status") != "ok":
        return None
    pairs = list(zip(sa["steps"], sb["steps"]))
    if not pairs or len(sa["steps"]) != len(sb["steps"]):
        return None
    return max(abs(x["loss"] - y["loss"]) / abs(x["loss"]) for x, y in pairs)


def within(v, tol):
    return v is not None and v < tol


steps = (read("steps.txt") or "").split()
checks = {}
if "unit" in steps and read("unit.log") is not None:
    try:
        suites = json.load(open(os.path.join(out, "unit.json")))["testsuites"]
        tests = {t["name"]: (t.get("result"), bool(t.get("failures"))) for s in suites for t in s["testsuite"]}
        ran = {n: r == "COMPLETED" and not f for n, (r, f) in tests.items()}
        checks["unit"] = {"tests": tests and {n: ("pass" if ok else "fail/skip") for n, ok in ran.items()},
                          "ok": bool(ran) and all(ran.values())}
    except (OSError, ValueError, KeyError):
        checks["unit"] = {"ok": False, "error": "no unit.json: " + (read("unit.log") or "")[-300:]}
if "stages" in steps:
    rel = {f"stage{s}": loss_rel(f"cpu{s}", f"cuda{s}") for s in range(4)}
    checks["stages_cuda_vs_cpu_loss_rel"] = {**rel, "ok": all(within(v, 1e-3) for v in rel.values())}
if "memory" in steps:
    fit = summary("cuda_fit")
    checks["memory"] = {"oom_exit": rc("cuda_oom"), "fit_exit": rc("cuda_fit"),
                        "oom_failure": (summary("cuda_oom") or {}).get("failure"),
                        "fit_memory": fit and fit.get("memory", {}).get("measured", fit.get("memory")),
                        "ok": rc("cuda_oom") == 3 and rc("cuda_fit") == 0}
if "memory" in steps:  # the offload runs are part of the memory step
    r = loss_rel("cuda_nooff", "cuda_off")
    s = summary("cuda_off")
    checks["offload_vs_none_loss_rel"] = {"rel": r, "offload": s and s.get("offload"), "ok": within(r, 1e-4)}
if "comm" in steps:
    a, b = loss_rel("nccl_cpu", "nccl_cuda"), loss_rel("shared_cpu", "shared_cuda")
    checks["comm"] = {"one_rank_per_gpu": {"backend": backend("nccl_cuda"), "loss_rel_vs_cpu": a},
                      "ranks_sharing_a_gpu": {"backend": backend("shared_cuda"), "loss_rel_vs_cpu": b},
                      "ok": within(a, 1e-3) and within(b, 1e-3) and backend("nccl_cuda") == "nccl"}
if "virtual" in steps:
    r = loss_rel("virtual_cpu", "virtual_cuda")
    s = summary("virtual_cuda")
    checks["virtual"] = {"loss_rel_vs_cpu": r, "virtual_ranks": s and s.get("virtual_ranks"),
                         "ok": within(r, 1e-3) and rc("virtual_cuda") == 0}
if "bench" in steps:
    bench = {}
    for name in ("bench_copy",):
        try:
            bench[name] = json.load(open(os.path.join(out, name + ".json")))
        except (OSError, ValueError):
            bench[name] = None
    checks["bench"] = {**bench, "ok": all(v is not None for v in bench.values())}

if "fidelity" in steps or "record" in steps:
    fid = os.path.join(out, "fid")
    def case_files(side):
        d = os.path.join(fid, side)
        return sorted(f[:-5] for f in os.listdir(d) if f.endswith(".json")) if os.path.isdir(d) else []
    def status(side, name):
        try:
            r = json.load(open(os.path.join(fid, side, name + ".json")))
        except (OSError, ValueError):
            return None
        return r.get("status") if side == "ds" else (r.get("cuda") or {}).get("status")
    z, d = case_files("zrepro"), case_files("ds")
    checks["fidelity"] = {"zrepro_cases": {n: status("zrepro", n) for n in z},
                          "deepspeed_cases": {n: status("ds", n) for n in d},
                          # Measured figures, not a pass mark: the record says how far each is off.
                          "ok": bool(z) and all(status("zrepro", n) == "ok" for n in z)}

expected = ["unit", "stages_cuda_vs_cpu_loss_rel", "memory", "offload_vs_none_loss_rel", "comm", "virtual", "bench",
            "fidelity"]
res = {
    "reached": steps[-1] if steps else None,
    "steps": steps,
    "skipped": [s.split(":", 1)[1] for s in steps if s.startswith("skipped:")],
    "gpus": read("gpus.txt"),
    "linked": (read("linked.txt") or "").splitlines(),
    "build_exit": int(read("build.rc")) if (read("build.rc") or "").isdigit() else None,
    "checks": checks,
}
res["pass"] = all(k in checks and checks[k]["ok"] for k in expected)
tmp = os.path.join(out, "gpu-check.json.tmp")
with open(tmp, "w") as f:
    json.dump(res, f, indent=1, default=str)
os.replace(tmp, os.path.join(out, "gpu-check.json"))
for k, v in checks.items():
    print(f"[gpu-check] {k}: {'ok' if v['ok'] else 'FAIL'}")
print("[gpu-check]", "PASS" if res["pass"] else f"FAIL (reached {res['reached']})")
sys.exit(0 if res["pass"] else 1)
