#!/usr/bin/env bash
# Rank 1 of an N-rank ZeRO-3 bf16 job in one process, N = 8 .. 8192: wall seconds and
# peak RSS of the subject rank alone with stood-in peers (--peers stand-in) against every
# rank running on a thread (--peers run, up to MAX_RUN ranks), 2 steps, the same-data
# rule; and, at every N both ran, whether rank 1's bytes by category, its losses and its
# collectives' bytes are equal. A row per run: mode, N, seconds, peak RSS.
# usage: bench/virtual_ranks.sh scale [max-run] [model] [peer-values]
#   (after scripts/setup.sh; default 512, tiny, model; e.g. `scale 0 tinyllama-1.1b initial --seq 32`)
set -euo pipefail
cd "$(dirname "$0")/.."
max_run=${1:-512}; model=${2:-tiny}; values=${3:-model}; shift $(( $# < 3 ? $# : 3 ))
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/ds.json" <<JSON
{"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 0.0001}},
 "zero_optimization": {"stage": 3, "overlap_comm": true, "reduce_bucket_size": 500000,
   "stage3_prefetch_bucket_size": 500000, "stage3_param_persistence_threshold": 10000}}
JSON
run() {  # mode N [flags]
  local mode=$1 n=$2 out="$tmp/$1-$2" extra secs kb
  shift 2
  extra=$([ "$mode" = stand-in ] && echo "--peers stand-in --peer-values $values" || echo "--peers run")
  /usr/bin/time -f "%e %M" -o "$out.time" build/zrepro run --config "$tmp/ds.json" --model "$model" "$@" \
    --world-size "$n" --as-rank 1 --data-rule same --steps 2 --out "$out" $extra > "$out.log" 2>&1 \
    || { cat "$out.log"; exit 1; }
  read -r secs kb < "$out.time"
  printf "%-9s %6d ranks  %7.2f s  %8.1f MB peak RSS\n" "$mode" "$n" "$secs" "$(echo "$kb / 1024" | bc -l)"
}
for n in 8 64 512 4096 8192; do
  run stand-in "$n" "$@"
  if [ "$n" -le "$max_run" ]; then run run "$n" "$@"; fi
done
python3 - "$tmp" "$max_run" <<'PY'
import json, os, sys
tmp, max_run = sys.argv[1], int(sys.argv[2])
for n in [8, 64, 512, 4096, 8192]:
    if n > max_run: continue
    a = json.load(open(f"{tmp}/run-{n}/summary.json")); b = json.load(open(f"{tmp}/stand-in-{n}/summary.json"))
    ra = [r for r in a["memory"]["ranks"] if r["rank"] == 1][0]; rb = b["memory"]["ranks"][0]
    mem = ra["by_category"] == rb["by_category"] and ra["peak_bytes"] == rb["peak_bytes"]
    loss = [(s["loss"], s["grad_norm"]) for s in a["steps"]] == [(s["loss"], s["grad_norm"]) for s in b["steps"]]
    comm = all(a["comm"]["ops"][k]["bytes_per_step"] == b["comm"]["ops"][k]["bytes_per_step"] for k in a["comm"]["ops"])
    print(f"{n} ranks, rank 1 stand-in vs run: bytes by category {'equal' if mem else 'DIFFER'}, "
          f"losses {'equal' if loss else 'DIFFER'}, collective bytes {'equal' if comm else 'DIFFER'}; "
          f"check {b['virtual_ranks']['stand_in']}")
b = json.load(open(f"{tmp}/stand-in-8192/summary.json"))
r = b["memory"]["ranks"][0]; p = b["memory"]["planned"]
print(f"8192 ranks: measured peak {r['peak_bytes']} B, planned {p['peak_bytes']} B "
      f"({abs(r['peak_bytes'] - p['peak_bytes']) / r['peak_bytes']:.2e} apart)")
PY
