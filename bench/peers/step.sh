#!/usr/bin/env bash
# zrepro's training step against PyTorch on the same GPT and batch: `zrepro run` (stage
# 0, one rank, AdamW, no offload) and plain PyTorch eager and torch.compile
# (bench/peers/step_peers.py, the conformance oracle's module) for each model and
# precision, one thread each, interleaved rounds; medians of the median step time, their
# spread, and zrepro's tokens/s over the faster peer's.
# usage: bench/peers/step.sh [models] [rounds] [steps]   (default "tiny small", 3, 10;
#        after scripts/setup.sh and scripts/conformance.sh's venv, ZREPRO_CONFORMANCE_VENV)
set -euo pipefail
cd "$(dirname "$0")/../.."
models=${1:-tiny small}; rounds=${2:-3}; steps=${3:-10}
py=${ZREPRO_CONFORMANCE_VENV:-$HOME/.cache/zrepro/conformance-venv}/bin/python
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
micro=4
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for model in $models; do
  for prec in fp32 bf16; do
    if [ "$prec" = bf16 ]; then p='"bf16": {"enabled": true},'; else p=''; fi
    echo "{\"train_micro_batch_size_per_gpu\": $micro, $p \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.001}}, \"zero_optimization\": {\"stage\": 0}}" > "$tmp/$prec.json"
    for r in $(seq "$rounds"); do
      # warm-up steps are in the run and out of the median (zrepro's step_s_median skips none:
      # 3 more steps than the peers' measured ones keep the median off the first step)
      build/zrepro run --config "$tmp/$prec.json" --model "$model" --steps $((steps + 3)) --out "$tmp/z" > /dev/null
      mj=$(python3 -c "import json; print(json.dumps(json.load(open('$tmp/z/summary.json'))['model']))")
      python3 -c "import json; s=json.load(open('$tmp/z/summary.json')); print(json.dumps({'mode':'zrepro','precision':'$prec','step_s_median':s['time']['step_s_median'],'tokens_per_s':s['time']['tokens_per_s']}))" \
        > "$tmp/${model}_${prec}_zrepro_$r.json"
      for mode in eager compile; do
        "$py" bench/peers/step_peers.py --model-json "$mj" --precision "$prec" --micro "$micro" --mode "$mode" \
          --steps "$steps" 2>/dev/null > "$tmp/${model}_${prec}_${mode}_$r.json"
      done
    done
  done
done
python3 - "$tmp" "$rounds" "$models" <<'PY'
import json, statistics, sys, glob
tmp, rounds, models = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
print(f"# tokens/s, median of {rounds} interleaved rounds [min-max]; 1 thread; micro-batch 4; AdamW; stage 0")
print("| model | precision | zrepro | PyTorch eager | torch.compile | zrepro / faster peer |")
print("|---|---|---|---|---|---|")
for model in models:
    for prec in ["fp32", "bf16"]:
        cell, med = {}, {}
        for mode in ["zrepro", "eager", "compile"]:
            v = [json.load(open(f))["tokens_per_s"] for f in glob.glob(f"{tmp}/{model}_{prec}_{mode}_*.json")]
            med[mode] = statistics.median(v)
            cell[mode] = f"{med[mode]:.0f} [{min(v):.0f}-{max(v):.0f}]"
        best = max(med["eager"], med["compile"])
        print(f"| {model} | {prec} | {cell['zrepro']} | {cell['eager']} | {cell['compile']} | {med['zrepro'] / best:.2f}x |")
PY
