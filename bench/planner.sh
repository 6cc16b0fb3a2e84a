#!/usr/bin/env bash
# Planner error table: for each case, `zrepro run` measures the peak device bytes
# per rank (tracking allocator) and `zrepro plan` predicts them for the same
# config; prints a markdown table of measured vs planned peak, phase and error.
# usage: bench/planner.sh [model] [ranks]   (after scripts/setup.sh; default tiny, 1)
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-tiny}; ranks=${2:-1}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Small buckets and a low persistence threshold, so activations, buckets and
# stage-3 gathers all show on a toy model.
cat > "$tmp/ds.json" <<JSON
{"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
 "optimizer": {"type": "AdamW", "params": {"lr": 0.001}}, "bf16": {"enabled": "auto"},
 "zero_optimization": {"stage": 0, "reduce_bucket_size": 20000, "stage3_param_persistence_threshold": 1000,
                       "stage3_prefetch_bucket_size": 30000}}
JSON
echo "| precision | stage | ckpt | micro | measured peak (B) | phase | planned peak (B) | phase | error |"
echo "|---|---|---|---|---|---|---|---|---|"
for precision in fp32 bf16; do
  for stage in 0 1 2 3; do
    for ckpt in "" "--activation-checkpointing"; do
      for micro in 1 2 4 8; do
        flags="--model $model --precision $precision --zero-stage $stage --micro-batch $micro $ckpt"
        build/zrepro run --ranks "$ranks" --oversubscribe --config "$tmp/ds.json" $flags --steps 2 --out "$tmp/o" > /dev/null 2>&1
        build/zrepro plan --config "$tmp/ds.json" --world-size "$ranks" $flags --json > "$tmp/p.json"
        python3 - "$tmp" "$precision" "$stage" "${ckpt:+yes}" "$micro" <<'PY'
import json, sys
tmp, precision, stage, ckpt, micro = sys.argv[1:6]
m = json.load(open(f"{tmp}/o/summary.json"))["memory"]["ranks"][0]
p = json.load(open(f"{tmp}/p.json"))
err = 100.0 * (p["peak_bytes"] - m["peak_bytes"]) / m["peak_bytes"]
print(f"| {precision} | {stage} | {ckpt or 'no'} | {micro} | {m['peak_bytes']} | {m['peak_phase']} | "
      f"{p['peak_bytes']} | {p['peak_phase']} | {err:+.2f}% |")
PY
      done
    done
  done
done
