#!/usr/bin/env bash
# One DeepSpeed release against probe.py at ZeRO stages 1-3 on the CPU, without touching
# the conformance venv: the release goes into its own folder (pip --target, no deps) and
# is put first on PYTHONPATH; each release builds its C++ extensions into its own folder.
# usage: conformance/releases/run.sh VERSION [WORK]   (STAGES="1 2 3" by default;
#        PIP_EXTRA=--no-build-isolation for sdists whose setup.py imports torch: 0.13.0)
# Needs the conformance venv (scripts/conformance.sh makes it). Results: WORK/logs/.
set -uo pipefail
V=$1
W=${2:-/tmp/ds-releases}
here=$(cd "$(dirname "$0")" && pwd)
PY=${ZREPRO_CONFORMANCE_PY:-$HOME/.cache/zrepro/conformance-venv/bin/python}
mkdir -p "$W/logs"
L=$W/logs/$V
if [ ! -d "$W/$V/deepspeed" ]; then
  "$PY" -m pip install --no-deps ${PIP_EXTRA:-} --target "$W/$V" "deepspeed==$V" > "$L-install.log" 2>&1
  echo "install rc=$?" | tee -a "$L-install.log"
fi
# Without the release's folder Python would import the venv's own DeepSpeed: stop.
[ -d "$W/$V/deepspeed" ] || { echo "install of deepspeed==$V failed: $L-install.log"; exit 1; }
cd "$W"
export DS_ACCELERATOR=cpu OMP_NUM_THREADS=1 PYTHONPATH="$W/$V" TORCH_EXTENSIONS_DIR="$W/ext-$V"
"$PY" -c 'import deepspeed; print(deepspeed.__version__, deepspeed.__file__)' 2>&1 | tail -1
for S in ${STAGES:-1 2 3}; do
  timeout 900 "$PY" -m torch.distributed.run --nproc_per_node 2 "$here/probe.py" --stage "$S" > "$L-stage$S.log" 2>&1
  echo "stage $S rc=$?"
  grep '^RESULT' "$L-stage$S.log"
done
