#!/usr/bin/env bash
# Step-time overhead of the device-memory tracking: the same run with LibTorch's
# plain allocator (untracked), the tracking allocator and the caching emulation,
# interleaved, several repetitions each; prints the median step times and the
# ratios against plain measured in the same run.
# usage: bench/allocator.sh [model] [steps] [repetitions]   (after scripts/setup.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-small}; steps=${2:-20}; reps=${3:-3}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/ds.json" <<JSON
{"train_batch_size": 8, "zero_optimization": {"stage": 0}}
JSON
for rep in $(seq "$reps"); do
  for a in plain tracking caching; do
    build/zrepro run --config "$tmp/ds.json" --model "$model" --steps "$steps" --allocator "$a" \
      --out "$tmp/$a-$rep" > /dev/null
  done
done
python3 - "$tmp" "$reps" <<'PY'
import json, statistics, sys
tmp, reps = sys.argv[1], int(sys.argv[2])
med = {a: statistics.median(json.load(open(f"{tmp}/{a}-{r}/summary.json"))["time"]["step_s_median"]
                            for r in range(1, reps + 1)) for a in ("plain", "tracking", "caching")}
print("| allocator | median step (s) | vs plain |")
print("|---|---|---|")
for a, t in med.items():
    print(f"| {a} | {t:.4f} | {t / med['plain']:.3f}x |")
PY
