#!/usr/bin/env bash
# The main job of the README: set-up, build, then a default reproduction end to end
# (a short tiny-model run from a plain stage-0 config) and its summary.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
out=${1:-out/demo}
build/zrepro run --config configs/examples/stage0_fp32.json --model tiny --steps 50 --out "$out"
echo "[demo] summary: $out/summary.json"
if command -v python3 > /dev/null; then
  python3 - "$out/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print("status:", s["status"], "| world_size:", s["world_size"], "| zero_stage:", s["zero_stage"])
print("loss:", " ".join(f"{x['loss']:.3f}" for x in s["steps"][::10]), "->", f"{s['steps'][-1]['loss']:.3f}")
print("step time median (s):", s["time"]["step_s_median"], "| tokens/s:", round(s["time"]["tokens_per_s"]))
r = s["memory"]["ranks"][0]
print("peak device bytes:", r["peak_bytes"], "in", r["peak_phase"], "| by category:", r["by_category"])
PY
else
  head -c 2000 "$out/summary.json"
fi
