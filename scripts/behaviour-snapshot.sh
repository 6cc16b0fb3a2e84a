#!/usr/bin/env bash
# Runs a fixed set of zrepro runs (stages 0-3 on 1 and 2 ranks, accumulation,
# offload, OOM, hang, fp16 overflow, scale-down, plan --json) and writes one JSON
# of what must not change across a refactor: exit codes, status, per-step losses and
# grad norms, per-rank bytes by category and phase, failure kind/phase, plan verdicts.
# Usage: scripts/behaviour-snapshot.sh OUT.json [BIN]     then diff two snapshots with
#        scripts/behaviour-snapshot.sh --compare A.json B.json
set -uo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--compare" ]; then
  python3 - "$2" "$3" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
bad = 0
for k in sorted(set(a) | set(b)):
    if a.get(k) != b.get(k):
        bad += 1
        print(f"DIFF {k}:\n  before {json.dumps(a.get(k))[:600]}\n  after  {json.dumps(b.get(k))[:600]}")
print(f"{len(a)} runs compared, {bad} differ")
sys.exit(1 if bad else 0)
PY
  exit $?
fi
out=${1:?usage: $0 OUT.json [BIN]}
bin=${2:-build/zrepro}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
       OMPI_MCA_rmaps_base_oversubscribe=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ex=configs/examples sc=configs/scenarios
run() {  # NAME ARGS...
  local name=$1; shift
  mkdir -p "$tmp/$name"
  "$bin" "$@" --out "$tmp/$name" >"$tmp/$name/stdout" 2>"$tmp/$name/stderr"
  echo $? >"$tmp/$name/rc"
}
for s in 0 1 2 3; do
  for n in 1 2; do
    run "stage${s}_r${n}" run --ranks $n --config $ex/stage0_fp32.json --zero-stage $s --steps 4 --grad-accum 2 --micro-batch 2
  done
done
run bf16_s3_r2 run --ranks 2 --config $ex/zero3_tiny.json --steps 4
run offload_s3_r2 run --ranks 2 --config $ex/zero3_offload.json --steps 3
run offload_accum_r1 run --config $sc/offload-with-accumulation/ds_config.json --steps 3
run oom_partition_r1 run --config $sc/optimizer-partition-oom/ds_config.json --model small --device-memory 48MB --steps 2
run oom_partition_r4 run --ranks 4 --config $sc/optimizer-partition-oom/ds_config.json --model small --device-memory 48MB --steps 2
run hang_r2 run --ranks 2 --config $ex/stage0_fp32.json --zero-stage 2 --steps 3 --inject gas-mismatch:1 --comm-timeout 3
run fp16_overflow_r1 run --config $ex/fp16_dynamic_scale.json --steps 6 --inject inf-grad:0:3-
run scale_down_s2_r2 run --ranks 2 --config $sc/zero2-params-dont-fit/ds_config.json --target-model gpt3-6.7b \
    --target-device-memory 40GB --activation-checkpointing --steps 2
run caching_frag_r1 run --config $sc/fragmentation/ds_config.json --allocator caching --device-memory 64MB --steps 2
for s in 0 1 2 3; do
  "$bin" plan --config $ex/stage0_fp32.json --zero-stage $s --model gpt2 --world-size 8 --device-memory 16GB \
     --precision bf16 --json >"$tmp/plan_s$s.json" 2>/dev/null; echo $? >"$tmp/plan_s$s.rc"
done
"$bin" plan --config $ex/zero3_offload.json --model gpt3-13b --world-size 8 --device-memory 40GB --json \
   >"$tmp/plan_13b.json" 2>/dev/null; echo $? >"$tmp/plan_13b.rc"
python3 - "$tmp" "$out" <<'PY'
import json, os, sys
tmp, out = sys.argv[1:3]
snap = {}
def keep_mem(r):
    return {k: r.get(k) for k in ("rank", "peak_bytes", "peak_phase", "by_category", "category_peaks",
                                  "model_states", "host_pinned_bytes")}
for name in sorted(os.listdir(tmp)):
    d = os.path.join(tmp, name)
    if name.endswith(".rc"):
        base = name[:-3]
        e = {"rc": int(open(d).read())}
        try:
            e["plan"] = json.load(open(os.path.join(tmp, base + ".json")))
            # Where the GPU record lies is the checkout's path, not behaviour.
            for k in ("record", "replan"):
                (e["plan"].get("gpu_fidelity") or {}).pop(k, None)
        except Exception as x:
            e["plan"] = f"unreadable: {x}"
        snap[base] = e
        continue
    if not os.path.isdir(d): continue
    e = {"rc": int(open(os.path.join(d, "rc")).read())}
    p = os.path.join(d, "summary.json")
    if os.path.exists(p):
        s = json.load(open(p))
        e["status"] = s.get("status")
        e["steps"] = [{k: st.get(k) for k in ("step", "loss", "grad_norm", "loss_scale", "skipped", "lr")}
                      for st in s.get("steps", [])]
        m = s.get("memory", {})
        e["memory"] = [keep_mem(r) for r in m.get("ranks", [])]
        e["planned"] = m.get("planned")
        f = s.get("failure")
        e["failure"] = None if not f else {k: f.get(k) for k in ("kind", "rank", "phase", "checkpoint",
                                                                 "request_bytes", "by_category")}
        c = s.get("comm") or {}
        e["comm"] = {"bytes_per_step": c.get("bytes_per_step"),
                     "calls_per_step": {k: v.get("calls_per_step") for k, v in (c.get("ops") or {}).items()}}
        if "scale_down" in s: e["scale_down"] = s["scale_down"]
        e["zero_stage"] = s.get("zero_stage")
    else:
        e["summary"] = None
    snap[name] = e
json.dump(snap, open(out, "w"), indent=1, sort_keys=True)
print(f"{len(snap)} runs -> {out}")
PY
