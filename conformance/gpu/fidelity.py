"""GPU fidelity: zrepro's planner and CPU emulation against the real caching allocator
and against real DeepSpeed, per phase, on the lent GPU (scripts/gpu-check.sh runs it).

    fidelity.py deepspeed --out DIR [--cases A,B]      real DeepSpeed, DIR/ds/<case>.json
    fidelity.py zrepro --bin Z --out DIR [--cases A,B] [--cpu-cases A,B] [--oom-case A]
                                                       zrepro plan / run --device cuda /
                                                       run on the CPU-emulated device
    fidelity.py record --out DIR --record FILE         merges DIR into the record FILE
                                                       (JSON) with every error computed
    fidelity.py table --record FILE                    the comparison as text
    fidelity.py render --record FILE --doc docs/lab/GPU.md the record's tables into the doc

What is compared, per case (cases.py) and per phase (init, forward, backward, step;
zrepro's `partition` counts as init: DeepSpeed builds its optimizer inside
deepspeed.initialize):
  (a) `zrepro plan --device cuda` against `zrepro run --device cuda` (the caching
      allocator's allocated and reserved peaks, [Note: phase peaks]);
  (b) the plan against real DeepSpeed with Hugging Face's model class on the same GPU;
  (c) `zrepro run --device cpu --allocator caching` (the CPU emulation of the device)
      against (a), and whether a capacity just under / over the GPU's peak reserved
      gives the same OOM / fit on both;
  (d) pinned copy bandwidth and the offload copies' hidden share on the real copy
      stream, against the CPU emulation with the link model set to the measured
      bandwidth (from gpu-check's bench_copy.json).
Each side's result is a file of its own, written as it finishes, so a time-out keeps
what ran; `record` reads whatever is there.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from cases import CASES, ROOT, by_name, zrepro_args  # noqa: E402

PHASES = ["init", "forward", "backward", "step"]
ZREPRO_STEPS = 3


def write_json(path, obj):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def selected(arg):
    return [by_name(n) for n in arg.split(",")] if arg else [dict(c) for c in CASES]


def sh(cmd, log, timeout):
    t0 = time.time()
    with open(log, "w") as f:
        try:
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    return rc, round(time.time() - t0, 2)


# --- real DeepSpeed --------------------------------------------------------------

def cmd_deepspeed(a):
    os.makedirs(os.path.join(a.out, "ds"), exist_ok=True)
    for case in selected(a.cases):
        out = os.path.join(a.out, "ds", case["name"] + ".json")
        rc, s = sh([sys.executable, os.path.join(HERE, "ds_memory.py"), "--case", case["name"], "--steps", "3",
                    "--out", out], out[:-5] + ".log", a.timeout)
        if not os.path.exists(out):  # died before writing: say so in its place
            write_json(out, {"case": case["name"], "side": "deepspeed", "status": "error",
                             "error": f"ds_memory.py exited {rc} after {s} s without a result (see its .log)"})
        print(f"[fidelity] deepspeed {case['name']}: rc {rc}, {s} s", flush=True)


# --- zrepro ------------------------------------------------------------------------

def summary_phases(summary):
    """Per-phase peaks of rank 0 from a zrepro summary.json ({phase: (alloc, reserved)})."""
    if not summary:
        return None
    ranks = (summary.get("memory") or {}).get("ranks") or []
    if not ranks:
        return None
    out = {}
    for p in ranks[0].get("phases", []):
        name = "init" if p["phase"] == "partition" else p["phase"]
        a, r = out.get(name, (0, 0))
        out[name] = (max(a, p["peak_bytes"]), max(r, p["peak_reserved_bytes"]))
    return out


def zrepro_run(a, case, cfg, name, extra, timeout):
    d = os.path.join(a.out, name, case["name"])
    os.makedirs(d, exist_ok=True)
    cmd = [a.bin, "run", "--config", cfg, "--out", d] + zrepro_args(case) + extra
    rc, s = sh(cmd, d + ".log", timeout)
    summ = read_json(os.path.join(d, "summary.json"))
    res = {"rc": rc, "wall_s": s, "cmd": " ".join(cmd[1:]), "status": summ.get("status") if summ else None}
    ph = summary_phases(summ)
    if ph:
        res["phases"] = {k: {"peak_bytes": v[0], "peak_reserved_bytes": v[1]} for k, v in ph.items()}
        m = summ["memory"]["ranks"][0]
        res["peak_bytes"], res["peak_reserved_bytes"] = m["peak_bytes"], m["peak_reserved_bytes"]
        res["model_states"] = m.get("model_states")
    if summ and summ.get("offload"):
        res["offload"] = summ["offload"]["ranks"][0]
    return res


def cmd_zrepro(a):
    cfg_dir = os.path.join(a.out, "cfg")
    os.makedirs(cfg_dir, exist_ok=True)
    cpu_cases = set(a.cpu_cases.split(",")) if a.cpu_cases else set()
    for case in selected(a.cases):
        cfg = os.path.join(cfg_dir, case["name"] + ".json")
        write_json(cfg, case["ds_config"])
        res = {"case": case["name"], "side": "zrepro"}
        # (a) the plan for the device
        plan_cmd = [a.bin, "plan", "--config", cfg, "--device", "cuda", "--steps", str(ZREPRO_STEPS),
                    "--json"] + zrepro_args(case)
        p = subprocess.run(plan_cmd, capture_output=True, text=True, timeout=120)
        try:
            plan = json.loads(p.stdout)
            phases = {}
            for ph in plan["phases"]:
                name = "init" if ph["phase"] == "partition" else ph["phase"]
                phases[name] = max(phases.get(name, 0), ph["peak_bytes"])
            res["plan"] = {"peak_bytes": plan["peak_bytes"], "peak_phase": plan["peak_phase"],
                           "phases": {k: {"peak_bytes": v} for k, v in phases.items()},
                           "model_states": plan["model_states"], "cmd": " ".join(plan_cmd[1:])}
        except (ValueError, KeyError) as e:
            res["plan"] = {"error": f"{type(e).__name__}: {e}; exit {p.returncode}: {p.stderr[-500:]}"}
        # (a) the real caching allocator
        res["cuda"] = zrepro_run(a, case, cfg, "cuda", ["--device", "cuda", "--steps", str(ZREPRO_STEPS)], a.timeout)
        # (c) the CPU emulation of the same device
        if case["name"] in cpu_cases:
            link = []
            if a.link_gbps and (case["offload_optimizer"] or case["offload_param"]):
                link = ["--host-link-gbps", f"{a.link_gbps:.3f}"]  # (d) the link model at the measured bandwidth
            res["cpu"] = zrepro_run(a, case, cfg, "cpu", ["--device", "cpu", "--allocator", "caching", "--steps", "1",
                                                         "--threads", str(a.threads)] + link, a.cpu_timeout)
        write_json(os.path.join(a.out, "zrepro", case["name"] + ".json"), res)
        print(f"[fidelity] zrepro {case['name']}: plan {res['plan'].get('peak_bytes')} cuda "
              f"{res['cuda'].get('peak_bytes')} ({res['cuda']['status']}, {res['cuda']['wall_s']} s)"
              + (f" cpu {res['cpu'].get('peak_bytes')} ({res['cpu']['status']}, {res['cpu']['wall_s']} s)"
                 if "cpu" in res else ""), flush=True)
    if a.oom_case:
        oom_check(a, by_name(a.oom_case))


def oom_check(a, case):
    """(c) The same capacity on both devices: 0.9x and 1.1x the GPU run's peak reserved."""
    z = read_json(os.path.join(a.out, "zrepro", case["name"] + ".json")) or {}
    peak = (z.get("cuda") or {}).get("peak_reserved_bytes")
    if not peak:
        print(f"[fidelity] oom check {case['name']}: no GPU peak to size it from", flush=True)
        return
    cfg = os.path.join(a.out, "cfg", case["name"] + ".json")
    rows = []
    for factor in (0.9, 1.1):
        cap = int(peak * factor)
        row = {"capacity_bytes": cap, "factor": factor}
        for dev, extra, t in (("cuda", [], a.timeout),
                              ("cpu", ["--allocator", "caching", "--threads", str(a.threads)], a.cpu_timeout)):
            r = zrepro_run(a, case, cfg, f"oom_{dev}_{factor}",
                           ["--device", dev, "--steps", "1", "--device-memory", str(cap)] + extra, t)
            row[dev] = {"rc": r["rc"], "status": r["status"], "wall_s": r["wall_s"]}
        row["agree"] = row["cuda"]["status"] == row["cpu"]["status"]
        rows.append(row)
        print(f"[fidelity] oom check {case['name']} at {cap} bytes: cuda {row['cuda']['status']} "
              f"cpu {row['cpu']['status']}", flush=True)
    write_json(os.path.join(a.out, "oom.json"), {"case": case["name"], "gpu_peak_reserved_bytes": peak, "rows": rows})


# --- the record ----------------------------------------------------------------------

def rel(x, ref):
    if x is None or not ref:
        return None
    return (x - ref) / ref


def phase_rows(case, z, ds):
    rows = []
    plan = ((z or {}).get("plan") or {}).get("phases") or {}
    cuda = ((z or {}).get("cuda") or {}).get("phases") or {}
    cpu = ((z or {}).get("cpu") or {}).get("phases") or {}
    dsp = {p["phase"]: p for p in (ds or {}).get("phases") or []} if (ds or {}).get("status") == "ok" else {}
    for ph in PHASES:
        r = {"phase": ph,
             "plan": (plan.get(ph) or {}).get("peak_bytes"),
             "zrepro_cuda": (cuda.get(ph) or {}).get("peak_bytes"),
             "zrepro_cuda_reserved": (cuda.get(ph) or {}).get("peak_reserved_bytes"),
             "deepspeed": (dsp.get(ph) or {}).get("peak_bytes"),
             "deepspeed_reserved": (dsp.get(ph) or {}).get("peak_reserved_bytes"),
             "cpu_emulated": (cpu.get(ph) or {}).get("peak_bytes"),
             "cpu_emulated_reserved": (cpu.get(ph) or {}).get("peak_reserved_bytes")}
        r["plan_vs_zrepro_cuda"] = rel(r["plan"], r["zrepro_cuda"])
        r["plan_vs_deepspeed"] = rel(r["plan"], r["deepspeed"])
        r["zrepro_cuda_vs_deepspeed"] = rel(r["zrepro_cuda"], r["deepspeed"])
        r["cpu_vs_cuda"] = rel(r["cpu_emulated"], r["zrepro_cuda"])
        r["cpu_vs_cuda_reserved"] = rel(r["cpu_emulated_reserved"], r["zrepro_cuda_reserved"])
        rows.append(r)
    return rows


def cmd_record(a):
    old = read_json(a.record) or {}
    machine = read_json(os.path.join(a.out, "machine.json")) or {}
    rec = {"generated_by": "conformance/gpu/fidelity.py record (scripts/gpu-check.sh)",
           "recorded": time.strftime("%Y-%m-%d"),
           "machine": machine,
           "zrepro_env": read_json(os.path.join(a.out, "env.json")),
           "assumptions": [" ".join(l.split()) for l in (sys.modules["cases"].__doc__ or "").split("\n- ")[1:]],
           "cases": []}
    for case in CASES:
        z = read_json(os.path.join(a.out, "zrepro", case["name"] + ".json"))
        ds = read_json(os.path.join(a.out, "ds", case["name"] + ".json"))
        if z is None and ds is None:
            prev = next((c for c in old.get("cases", []) if c["name"] == case["name"]), None)
            if prev:
                rec["cases"].append(prev)  # not rerun this time: the earlier record stands
            continue
        spec = {k: case[k] for k in ("model_name", "seq", "micro", "gas", "precision", "stage", "attn",
                                      "activation_checkpointing", "offload_optimizer", "offload_param")}
        rec["cases"].append({
            "name": case["name"], "spec": spec, "ds_config": case["ds_config"],
            "zrepro_flags": ["--model", "configs/models/" + case["model_name"] + ".json", "--seq", str(case["seq"]),
                             "--attn", case["attn"]] + (["--activation-checkpointing"] if case["activation_checkpointing"] else []),
            "plan": (z or {}).get("plan"), "zrepro_cuda": (z or {}).get("cuda"), "zrepro_cpu": (z or {}).get("cpu"),
            "deepspeed": {k: v for k, v in (ds or {}).items() if k not in ("ds_config", "traceback")} if ds else None,
            "phases": phase_rows(case, z, ds)})
    oom = read_json(os.path.join(a.out, "oom.json"))
    rec["oom_check"] = oom if oom else old.get("oom_check")
    bench = read_json(os.path.join(a.out, "bench_copy.json"))
    rec["copy_bandwidth"] = bench if bench else old.get("copy_bandwidth")
    write_json(a.record, rec)
    print(table(rec))


def pct(x):
    return "" if x is None else f"{100 * x:+.1f}%"


def mib(x):
    return "" if x is None else f"{x / 2**20:,.0f}"


def table(rec):
    lines = ["case | phase | plan MiB | zrepro cuda MiB (reserved) | DeepSpeed MiB (reserved) | cpu emu MiB | "
             "plan vs cuda | plan vs DS | cuda vs DS | cpu vs cuda"]
    for c in rec["cases"]:
        for r in c["phases"]:
            lines.append(" | ".join([c["name"], r["phase"], mib(r["plan"]),
                                     f"{mib(r['zrepro_cuda'])} ({mib(r['zrepro_cuda_reserved'])})",
                                     f"{mib(r['deepspeed'])} ({mib(r['deepspeed_reserved'])})",
                                     mib(r["cpu_emulated"]), pct(r["plan_vs_zrepro_cuda"]),
                                     pct(r["plan_vs_deepspeed"]), pct(r["zrepro_cuda_vs_deepspeed"]),
                                     pct(r["cpu_vs_cuda"])]))
    return "\n".join(lines)


def overall(case):
    """Each side's peak over the run and the phase it is in."""
    out = {}
    for side in ("plan", "zrepro_cuda", "deepspeed", "cpu_emulated"):
        vals = [(r[side], r["phase"]) for r in case["phases"] if r[side] is not None]
        out[side] = max(vals) if vals else (None, None)
    return out


def markdown(rec):
    """The record as the tables docs/lab/GPU.md shows (between its fidelity markers)."""
    m = rec["machine"]
    L = [f"Recorded {rec['recorded']} on {m.get('gpu')} ({(m.get('gpu_memory_bytes') or 0) / 2**30:.1f} GiB), driver "
         f"{m.get('driver')}, torch {m.get('torch')} (CUDA {m.get('cuda')}), {m.get('cores')} cores; "
         f"zrepro built there against that torch. Record: `conformance/results/gpu/`; regenerate this part with "
         f"`python3 conformance/gpu/fidelity.py render --record <record> --doc docs/lab/GPU.md`.", "",
         "Assumptions (conformance/gpu/cases.py):", ""]
    L += [f"- {' '.join(a.split())}" for a in rec["assumptions"]]
    L += ["", "### Peak per run (MiB; the phase of the peak)", "",
          "| case | plan | zrepro on CUDA | DeepSpeed + HF | CPU emulation | plan vs DeepSpeed |",
          "|---|---|---|---|---|---|"]
    for c in rec["cases"]:
        o = overall(c)
        cell = lambda side: "" if o[side][0] is None else f"{mib(o[side][0])} ({o[side][1]})"
        L.append(f"| {c['name']} | {cell('plan')} | {cell('zrepro_cuda')} | {cell('deepspeed')} | "
                 f"{cell('cpu_emulated')} | {pct(rel(o['plan'][0], o['deepspeed'][0]))} |")
    L += ["", "### Per phase (MiB allocated; reserved in brackets)", "",
          "| case | phase | plan | zrepro on CUDA | DeepSpeed + HF | CPU emulation | plan vs CUDA | plan vs DeepSpeed "
          "| CUDA vs DeepSpeed | CPU emulation vs CUDA |", "|---|---|---|---|---|---|---|---|---|---|"]
    for c in rec["cases"]:
        for r in c["phases"]:
            L.append(f"| {c['name']} | {r['phase']} | {mib(r['plan'])} | {mib(r['zrepro_cuda'])} "
                     f"({mib(r['zrepro_cuda_reserved'])}) | {mib(r['deepspeed'])} ({mib(r['deepspeed_reserved'])}) | "
                     f"{mib(r['cpu_emulated'])} | {pct(r['plan_vs_zrepro_cuda'])} | {pct(r['plan_vs_deepspeed'])} | "
                     f"{pct(r['zrepro_cuda_vs_deepspeed'])} | {pct(r['cpu_vs_cuda'])} |")
    oom = rec.get("oom_check")
    if oom:
        L += ["", f"### The same capacity on both devices ({oom['case']}; GPU peak reserved "
                  f"{mib(oom['gpu_peak_reserved_bytes'])} MiB)", "",
              "| capacity | x GPU peak reserved | CUDA (memory fraction) | CPU emulation (caching) | agree |",
              "|---|---|---|---|---|"]
        for r in oom["rows"]:
            L.append(f"| {mib(r['capacity_bytes'])} MiB | {r['factor']} | {r['cuda']['status']} (exit {r['cuda']['rc']}) | "
                     f"{r['cpu']['status']} (exit {r['cpu']['rc']}) | {'yes' if r['agree'] else 'NO'} |")
    bw = [r for r in rec.get("copy_bandwidth") or [] if "bytes" in r]
    if bw:
        L += ["", "### Host link (bench copy --device cuda, best of 5, during the check)", "",
              "| bytes | direction | pinned GB/s | pageable GB/s | pageable / pinned |", "|---|---|---|---|---|"]
        for r in bw:
            L.append(f"| {r['bytes']:,} | {r['dir']} | {r['pinned_gbps']:.1f} | {r['pageable_gbps']:.1f} | "
                     f"{r['pageable_over_pinned']:.2f} |")
    return "\n".join(L)


def cmd_render(a):
    rec = read_json(a.record)
    doc = open(a.doc).read()
    begin, end = "<!-- fidelity:begin -->", "<!-- fidelity:end -->"
    if begin not in doc or end not in doc:
        raise SystemExit(f"{a.doc}: no {begin} ... {end} block to fill")
    head, rest = doc.split(begin, 1)
    tail = rest.split(end, 1)[1]
    tmp = a.doc + ".tmp"
    with open(tmp, "w") as f:
        f.write(head + begin + "\n" + markdown(rec) + "\n" + end + tail)
    os.replace(tmp, a.doc)


def replan(binary, case):
    """Today's `zrepro plan --device cuda` of a recorded case: each phase's peak and reserved
    peak (zrepro's partition phase counts as init, as in the record), and the whole run's."""
    with tempfile.TemporaryDirectory() as d:
        cfg = os.path.join(d, "ds.json")
        write_json(cfg, case["ds_config"])
        flags = [os.path.join(ROOT, f) if f.startswith("configs/") else f for f in case["zrepro_flags"]]
        out = subprocess.run([binary, "plan", "--device", "cuda", "--steps", "3", "--json", "--config", cfg] + flags,
                             capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise SystemExit(f"{case['name']}: zrepro plan exit {out.returncode}: {out.stderr[-2000:]}")
        plan = json.loads(out.stdout)
    phases = {}
    for ph in plan["phases"]:
        name = "init" if ph["phase"] == "partition" else ph["phase"]
        phases[name] = max(phases.get(name, 0), ph["peak_bytes"])
    return phases, plan


def cmd_replan(a):
    """Every recorded case replanned with today's build against the record's DeepSpeed figures
    (no GPU needed): per phase and at the whole-run peak. Exit 1 past --tolerance."""
    rec = read_json(a.record)
    rows, worst = [], 0.0
    for c in rec["cases"]:
        if a.cases and c["name"] not in a.cases.split(","):
            continue
        ds = {r["phase"]: r["deepspeed"] for r in c["phases"] if r.get("deepspeed") is not None}
        if not ds:
            continue
        today, plan = replan(a.bin, c)
        for ph in PHASES:
            if ph in ds and ph in today:
                e = rel(today[ph], ds[ph])
                worst = max(worst, abs(e))
                rows.append({"case": c["name"], "phase": ph, "plan": today[ph], "deepspeed": ds[ph], "plan_vs_deepspeed": e})
        e = rel(max(today.values()), max(ds.values()))
        worst = max(worst, abs(e))
        rows.append({"case": c["name"], "phase": "peak", "plan": max(today.values()), "deepspeed": max(ds.values()),
                     "plan_vs_deepspeed": e})
        # The caching allocator's reserved peak (the plan's emulated replay against
        # torch.cuda.max_memory_reserved over the run): compared and reported, not held to
        # the tolerance; the band a GPU verdict (which binds on reserved bytes) allows for.
        ds_reserved = [r["deepspeed_reserved"] for r in c["phases"] if r.get("deepspeed_reserved")]
        if ds_reserved:
            reserved = plan["caching_allocator"]["reserved_peak_bytes"]
            rows.append({"case": c["name"], "phase": "reserved_peak", "plan": reserved, "deepspeed": max(ds_reserved),
                         "plan_vs_deepspeed": rel(reserved, max(ds_reserved))})
    print("case | phase | plan MiB | DeepSpeed MiB | plan vs DeepSpeed")
    for r in rows:
        flag = "" if abs(r["plan_vs_deepspeed"]) <= a.tolerance or r["phase"] == "reserved_peak" else \
            "  <-- past the tolerance"
        print(f"{r['case']} | {r['phase']} | {mib(r['plan'])} | {mib(r['deepspeed'])} | {pct(r['plan_vs_deepspeed'])}{flag}")
    if a.json:
        env = json.loads(subprocess.run([a.bin, "env", "--json"], capture_output=True, text=True, check=True).stdout)
        write_json(a.json, {"generated_by": "conformance/gpu/fidelity.py replan (no GPU: today's planner against the "
                                            "record's measured DeepSpeed figures)",
                            "record": os.path.relpath(a.record, ROOT), "replanned": time.strftime("%Y-%m-%d"),
                            "libtorch": env["libtorch"]["version"], "zrepro": env["zrepro"], "tolerance": a.tolerance,
                            "rows": rows})
    print(f"worst {100 * worst:.1f}% (tolerance {100 * a.tolerance:.1f}%)")
    return 0 if worst <= a.tolerance else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("deepspeed")
    d.add_argument("--out", required=True)
    d.add_argument("--cases")
    d.add_argument("--timeout", type=int, default=240)
    z = sub.add_parser("zrepro")
    z.add_argument("--bin", required=True)
    z.add_argument("--out", required=True)
    z.add_argument("--cases")
    z.add_argument("--cpu-cases", default="")
    z.add_argument("--oom-case", default="")
    z.add_argument("--threads", type=int, default=8)
    z.add_argument("--link-gbps", type=float, default=0.0,
                   help="the measured pinned host-to-device bandwidth: the CPU emulation's link model for offload cases")
    z.add_argument("--timeout", type=int, default=180)
    z.add_argument("--cpu-timeout", type=int, default=300)
    r = sub.add_parser("record")
    r.add_argument("--out", required=True)
    r.add_argument("--record", required=True)
    t = sub.add_parser("table")
    t.add_argument("--record", required=True)
    rp = sub.add_parser("replan", help="today's plan of every recorded case against the record's DeepSpeed")
    rp.add_argument("--bin", default=os.path.join(ROOT, "build", "zrepro"))
    rp.add_argument("--record", default=os.path.join(ROOT, "conformance", "results", "gpu", "nvidia-h200.json"))
    rp.add_argument("--cases")
    rp.add_argument("--tolerance", type=float, default=0.03)
    rp.add_argument("--json")
    rd = sub.add_parser("render")
    rd.add_argument("--record", required=True)
    rd.add_argument("--doc", required=True)
    a = ap.parse_args()
    if a.cmd == "deepspeed":
        cmd_deepspeed(a)
    elif a.cmd == "zrepro":
        cmd_zrepro(a)
    elif a.cmd == "record":
        cmd_record(a)
    elif a.cmd == "render":
        cmd_render(a)
    elif a.cmd == "replan":
        sys.exit(cmd_replan(a))
    else:
        print(table(read_json(a.record)))


if __name__ == "__main__":
    main()
