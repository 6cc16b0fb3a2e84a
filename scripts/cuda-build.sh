#!/usr/bin/env bash
# The CUDA build (opt-in): zrepro against the CUDA LibTorch of a pip torch, into
# build-cuda/, then the test suite of that build on this machine. Without a GPU every
# test that needs none must pass and those that need one skip, saying so. Run it
# whenever CUDA, NCCL or build code changes; it takes about 30 minutes on 2 cores
# (docs/lab/PERFORMANCE.md), most of it compiling against LibTorch 2.x headers.
#   scripts/cuda-build.sh              build + the whole suite
#   scripts/cuda-build.sh --build-only build only (scripts/gpu-check.sh uses this)
#   scripts/cuda-build.sh -R Model     build + the tests ctest -R selects
# The venv: ZREPRO_CUDA_VENV, else the conformance venv (~/.cache/zrepro/conformance-venv),
# which pins the same torch (conformance/requirements.txt); made if missing, with only
# torch installed (about 3 GB from PyPI); ZREPRO_TORCH_PYTHON: a python that already has a
# CUDA torch (no venv then). ZREPRO_JOBS: compile jobs (default: all cores).
# ZREPRO_CUDA_BUILD_DIR: the build folder (default build-cuda).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${ZREPRO_CUDA_VENV:-$HOME/.cache/zrepro/conformance-venv}
dir=${ZREPRO_CUDA_BUILD_DIR:-build-cuda}
torch_pin=$(grep -E '^torch==' conformance/requirements.txt | cut -d' ' -f1)

py=${ZREPRO_TORCH_PYTHON:-$venv/bin/python}
if [ -z "${ZREPRO_TORCH_PYTHON:-}" ]; then
  if [ ! -x "$venv/bin/python" ]; then
    echo "[cuda-build] creating $venv"
    python3 -m venv "$venv"
  fi
  if ! "$py" -c 'import torch' 2>/dev/null; then
    echo "[cuda-build] installing $torch_pin into $venv"
    "$py" -m pip install -q "$torch_pin" || {
      echo "[cuda-build] error: pip could not install $torch_pin into $venv (PyPI must be reachable)" >&2; exit 2; }
  fi
fi
read -r tv tcuda prefix < <("$py" -c \
  'import torch; print(torch.__version__, torch.version.cuda or "none", torch.utils.cmake_prefix_path)')
if [ "$tcuda" = none ]; then
  echo "[cuda-build] error: $py has torch $tv without CUDA; install a CUDA wheel ($torch_pin from PyPI is one)" >&2
  exit 2
fi
echo "[cuda-build] torch $tv (CUDA $tcuda) from $py -> $dir/"

ZREPRO_CMAKE_ARGS="-DCMAKE_PREFIX_PATH=$prefix ${ZREPRO_CMAKE_ARGS:-}" scripts/setup.sh --build-dir "$dir"
[ "${1:-}" = --build-only ] && exit 0
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
ctest --test-dir "$dir" --output-on-failure -j "${ZREPRO_TEST_JOBS:-2}" "$@"
