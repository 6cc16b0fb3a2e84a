#!/usr/bin/env bash
# The main job of the README: set-up, build, then a default reproduction end to end
# (a short tiny-model run from a plain stage-0 config) and its summary.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
out=${1:-out/demo}
build/zrepro run --config configs/examples/stage0_fp32.json --model tiny --steps 50 --out "$out"
echo "[demo] summary: $out/summary.json"
python3 -m json.tool "$out/summary.json" 2>/dev/null | head -60 || cat "$out/summary.json"
