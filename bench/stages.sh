#!/usr/bin/env bash
# Whole-run benchmark: median step time of ZeRO stages 0-3 on 1, 2 and 4 ranks for
# the tiny and small models at a fixed global batch, as a ratio against stage 0 on
# one rank measured in the same run, with the share of the step spent waiting on
# collectives. Prints a markdown table (docs/lab/PERFORMANCE.md keeps the results).
# usage: bench/stages.sh [steps]   (after scripts/setup.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-12}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "| model | ranks | stage | step median (s) | vs stage 0, 1 rank | tokens/s | comm wait share |"
echo "|---|---|---|---|---|---|---|"
for model in tiny small; do
  base=""
  for ranks in 1 2 4; do
    for stage in 0 1 2 3; do
      cat > "$tmp/ds.json" <<JSON
{"train_batch_size": 16, "bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
 "zero_optimization": {"stage": $stage}}
JSON
      out="$tmp/$model-$ranks-$stage"
      build/zrepro run --config "$tmp/ds.json" --model "$model" --steps "$steps" --ranks "$ranks" --oversubscribe \
        --out "$out" > "$out.log" 2>&1 || { echo "run failed: $model $ranks $stage" >&2; cat "$out.log" >&2; exit 1; }
      python3 - "$out/summary.json" "$model" "$ranks" "$stage" "${base:-}" > "$out.row" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
t = s["time"]
med = t["step_s_median"]
steps = len(s["steps"])
wait = t["breakdown_s"]["comm_wait"] / max(1e-12, sum(x for x in [t["step_s_median"] * steps]))
base = float(sys.argv[5]) if sys.argv[5] else med
print(f"| {sys.argv[2]} | {sys.argv[3]} | {sys.argv[4]} | {med:.4f} | {med / base:.2f}x | {t['tokens_per_s']:.0f} | {wait:.0%} |")
print(med, file=sys.stderr)
PY
      [ -z "$base" ] && base=$(python3 -c "import json;print(json.load(open('$out/summary.json'))['time']['step_s_median'])")
      cat "$out.row"
    done
  done
done
