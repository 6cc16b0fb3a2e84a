#!/usr/bin/env bash
# Conformance with real DeepSpeed (opt-in; downloads about 4 GB once): makes a venv
# with the pinned torch and deepspeed of conformance/requirements.txt, builds
# zrepro, trains every case of conformance/cases.py with both on the CPU, records
# the results under conformance/results/ and renders docs/design/CONFORMANCE.md.
#   scripts/conformance.sh                 all cases (about 6 minutes after set-up)
#   scripts/conformance.sh --only NAME...  some cases (the rest of the record stays)
# ZREPRO_CONFORMANCE_VENV picks the venv folder (default ~/.cache/zrepro/conformance-venv).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${ZREPRO_CONFORMANCE_VENV:-$HOME/.cache/zrepro/conformance-venv}
if [ ! -x "$venv/bin/python" ]; then
  echo "[conformance] creating $venv"
  python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -m pip install -q -r conformance/requirements.txt; then
  echo "[conformance] error: pip could not install conformance/requirements.txt into $venv;" \
       "PyPI must be reachable (about 4 GB for torch and its CUDA wheels)" >&2
  exit 2
fi
scripts/setup.sh >/dev/null
export DS_ACCELERATOR=cpu
"$venv/bin/python" conformance/harness.py --zrepro build/zrepro --results conformance/results "$@"
"$venv/bin/python" conformance/render.py conformance/results docs/design/CONFORMANCE.md
echo "[conformance] results: conformance/results/, table: docs/design/CONFORMANCE.md"
