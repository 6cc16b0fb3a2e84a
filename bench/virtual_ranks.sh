#!/usr/bin/env bash
# Virtual ranks against real processes: the issue's case (gpt2-xl ZeRO-2 bf16 on 8 x 40 GB,
# scaled down, with the fix: activation checkpointing, 2 steps) as 8 virtual ranks in one
# process (--world-size 8) and as 8 real processes (--ranks 8), interleaved, REPS runs of
# each; prints each run's wall seconds, the medians and their ratio, then every rank's
# peak bytes from both (they must be equal: the memory is the point, the speed the bonus).
# usage: bench/virtual_ranks.sh [reps] [ranks]   (after scripts/setup.sh; default 5, 8)
#        bench/virtual_ranks.sh scale [max-run] [model]   (stood-in peers from 8 to 8192 ranks:
#        bench/virtual_ranks_scale.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = scale ]; then shift; exec bench/virtual_ranks_scale.sh "$@"; fi
reps=${1:-5}; n=${2:-8}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  OMPI_MCA_rmaps_base_oversubscribe=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/ds.json" <<JSON
{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1, "bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 0.001}}, "zero_optimization": {"stage": 2, "overlap_comm": true}}
JSON
flags="--config $tmp/ds.json --target-model gpt2-xl --target-device-memory 40GB --target-world-size $n --steps 2 --activation-checkpointing"
for i in $(seq "$reps"); do
  for mode in virtual real; do
    extra=$([ "$mode" = real ] && echo "--ranks $n" || echo "")
    t0=$EPOCHREALTIME
    build/zrepro run $flags $extra --out "$tmp/$mode" > "$tmp/$mode.log" 2>&1 || { cat "$tmp/$mode.log"; exit 1; }
    echo "$mode $t0 $EPOCHREALTIME" >> "$tmp/times"
  done
done
python3 - "$tmp" "$n" <<'PY'
import json, statistics, sys
tmp, n = sys.argv[1], int(sys.argv[2])
t = {"virtual": [], "real": []}
for line in open(f"{tmp}/times"):
    mode, t0, t1 = line.split()
    t[mode].append(float(t1) - float(t0))
mv, mr = statistics.median(t["virtual"]), statistics.median(t["real"])
print(f"{n} ranks, wall seconds: virtual (one process) {[round(x, 2) for x in t['virtual']]}, "
      f"real ({n} processes) {[round(x, 2) for x in t['real']]}")
print(f"median virtual {mv:.2f} s, real {mr:.2f} s: virtual/real = {mv / mr:.2f}")
v = json.load(open(f"{tmp}/virtual/summary.json"))["memory"]["ranks"]
r = json.load(open(f"{tmp}/real/summary.json"))["memory"]["ranks"]
same = all(a["peak_bytes"] == b["peak_bytes"] and a["by_category"] == b["by_category"] for a, b in zip(v, r))
print("per-rank peak bytes (virtual = real):", [a["peak_bytes"] for a in v], "equal" if same else "DIFFER")
PY
