#!/usr/bin/env bash
# The main job of the README: set-up, build, then the flagship reproduction end to end.
# A ZeRO-2 bf16 job of gpt3-6.7b on 4 x 40 GB runs out of memory in its first optimizer step
# (every rank holds all 16-bit parameters); zrepro scales it down to a toy that keeps
# every memory category's share of the 40 GB, reproduces the OOM on 4 CPU ranks, plans
# the fixes, and verifies the fix (ZeRO-3) with `zrepro ab`. A few seconds after the build.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
out=${1:-out/demo}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
sc=configs/scenarios/zero2-params-dont-fit
echo "[demo] 1. what the planner predicts for the target (gpt3-6.7b, ZeRO-2, 4 ranks, 40 GB each):"
build/zrepro plan --config "$sc/ds_config.json" --model gpt3-6.7b --world-size 4 --device cuda \
    --activation-checkpointing --device-memory 40GB | grep -E "verdict|planner:" || true
echo "[demo] 2. reproduce it scaled down on 4 CPU ranks, and verify the fix (ZeRO-3):"
code=0
build/zrepro scenario run zero2-params-dont-fit --out "$out" || code=$?
echo "[demo] the failing side's summary: $out/A_r4/summary.json, its report: $out/A_r4/report.html"
echo "[demo] the comparison: $out/ab.json and $out/ab.html"
exit "$code"
