#!/usr/bin/env bash
# Offload step time against no offload, measured in the same run: ZeRO-2 and ZeRO-3
# (bf16, gas 4, overlap_comm on as DeepSpeed's offload examples set it; one ZeRO-2 row
# without it) without offload, with optimizer offload on pinned and on pageable
# host memory, and (stage 3) with parameter offload too, at a modelled host link;
# prints median step time, the ratio against no offload, copy time, the time the
# compute thread waited on copies (gradients down + parameters up), and the share of
# copy time that overlapped, in all and for the gradients going down.
# usage: bench/offload.sh [model] [steps] [host-link-gbps]   (after scripts/setup.sh;
#        ZREPRO_BENCH_BUCKET: reduce and prefetch bucket size, default 2000000)
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-small}; steps=${2:-8}; link=${3:-2}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bucket=${ZREPRO_BENCH_BUCKET:-2000000}
write() {  # name stage offload_optimizer_json offload_param_json [overlap_comm]
  cat > "$tmp/$1.json" <<JSON
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4, "bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
 "zero_optimization": {"stage": $2, "reduce_bucket_size": $bucket, "stage3_prefetch_bucket_size": $bucket,
                       "overlap_comm": ${5:-true}, "offload_optimizer": $3, "offload_param": $4}}
JSON
}
none='{"device": "none"}'
write z2_none 2 "$none" "$none"
write z2_pinned 2 '{"device": "cpu", "pin_memory": true}' "$none"
write z2_pinned_no_overlap 2 '{"device": "cpu", "pin_memory": true}' "$none" false
write z2_pageable 2 '{"device": "cpu", "pin_memory": false}' "$none"
write z3_none 3 "$none" "$none"
write z3_pinned 3 '{"device": "cpu", "pin_memory": true}' "$none"
write z3_pageable 3 '{"device": "cpu", "pin_memory": false}' "$none"
write z3_param_pinned 3 '{"device": "cpu", "pin_memory": true}' '{"device": "cpu", "pin_memory": true}'
for c in z2_none z2_pinned z2_pinned_no_overlap z2_pageable z3_none z3_pinned z3_pageable z3_param_pinned; do
  build/zrepro run --config "$tmp/$c.json" --model "$model" --steps "$steps" --host-link-gbps "$link" \
    --out "$tmp/$c" > /dev/null
done
python3 - "$tmp" "$link" <<'PY'
import json, sys
tmp, link = sys.argv[1], sys.argv[2]
print(f"host link model: {link} GB/s pinned, pageable at half of it")
print("| config | step median (s) | vs no offload | d2h MB/step | h2d MB/step | copy s/step | exposed s/step (d2h + h2d) | overlapped | d2h overlapped |")
print("|---|---|---|---|---|---|---|---|---|")
for c in ["z2_none", "z2_pinned", "z2_pinned_no_overlap", "z2_pageable", "z3_none", "z3_pinned", "z3_pageable", "z3_param_pinned"]:
    s = json.load(open(f"{tmp}/{c}/summary.json"))
    base = json.load(open(f"{tmp}/{c[:2]}_none/summary.json"))["time"]["step_s_median"]
    t = s["time"]["step_s_median"]; n = len(s["steps"])
    o = (s.get("offload") or {}).get("ranks", [None])[0]
    if o:
        ov = "-" if o["overlap_ratio"] is None else f"{100 * o['overlap_ratio']:.0f}%"
        d2h_s = o["d2h_copy_s"]
        dov = f"{100 * max(0.0, 1 - o['d2h_exposed_s'] / d2h_s):.0f}%" if d2h_s > 0 else "-"
        print(f"| {c} | {t:.4f} | {t / base:.2f}x | {o['d2h_bytes'] / n / 1e6:.1f} | {o['h2d_bytes'] / n / 1e6:.1f} | "
              f"{o['copy_s'] / n:.4f} | {o['exposed_s'] / n:.4f} ({o['d2h_exposed_s'] / n:.4f} + {o['h2d_exposed_s'] / n:.4f}) | {ov} | {dov} |")
    else:
        print(f"| {c} | {t:.4f} | 1.00x | - | - | - | - | - | - |")
PY
