#!/usr/bin/env bash
# What fetching a MoE block's experts one by one costs against fetching the block as a
# ZeRO-3 leaf module, when the ranks' routing agrees (--data-rule same: the run completes
# either way): all-gathers and their bytes per step (deterministic) and the median step
# time, as a ratio against the leaf measured in the same run. Prints a markdown table
# (docs/lab/PERFORMANCE.md keeps the results).
# usage: bench/moe_fetch.sh [steps] [model] [seq]   (after scripts/setup.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-12}
model=${2:-tiny-mixtral}
seq=${3:-8}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "| fetch | all-gathers / step | all-gather MB / step | step median (s) | vs leaf |"
echo "|---|---|---|---|---|"
base=""
for leaf in '["MixtralSparseMoeBlock", "Qwen2MoeSparseMoeBlock"]' '[]'; do
  cat > "$tmp/ds.json" <<JSON
{"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "bf16": {"enabled": true},
 "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0, "leaf_module": {"classes": $leaf}}}
JSON
  out="$tmp/run"
  rm -rf "$out"
  build/zrepro run --config "$tmp/ds.json" --model "$model" --seq "$seq" --steps "$steps" --ranks 2 --data-rule same \
    --out "$out" > "$out.log" 2>&1 || { echo "run failed: leaf $leaf" >&2; cat "$out.log" >&2; exit 1; }
  python3 - "$out/summary.json" "${base:-}" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
ag = s["comm"]["ops"]["all_gather"]
med = s["time"]["step_s_median"]
base = float(sys.argv[2]) if sys.argv[2] else med
print(f"| {s['model']['experts']['fetched']} | {ag['calls_per_step']:.1f} | {ag['bytes_per_step'] / 1e6:.3f} | "
      f"{med:.4f} | {med / base:.2f}x |")
PY
  [ -z "$base" ] && base=$(python3 -c "import json;print(json.load(open('$out/summary.json'))['time']['step_s_median'])")
done
