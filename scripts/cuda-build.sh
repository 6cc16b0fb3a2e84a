#!/usr/bin/env bash
# A CUDA build apart: zrepro against the CUDA LibTorch of a pip torch, into build-cuda/,
# then the test suite of that build on this machine. Without a GPU every test that needs
# none must pass and those that need one skip, saying so. A cold build takes about 5
# minutes on 2 cores (docs/guide/build.md).
#   scripts/cuda-build.sh              build + the whole suite
#   scripts/cuda-build.sh --build-only build only (scripts/gpu-check.sh uses this)
#   scripts/cuda-build.sh -R Model     build + the tests ctest -R selects
# The default build (scripts/setup.sh) is already a CUDA build when its torch is a CUDA
# one (the pinned torch from PyPI is); this script insists on it and builds apart.
# The torch: ZREPRO_TORCH_PYTHON (a python with a CUDA torch), python3's, else the pinned
# torch in ZREPRO_CUDA_VENV (default ~/.cache/zrepro/torch-venv, made if missing: about
# 5 GB from PyPI). ZREPRO_JOBS: compile jobs (default: all cores).
# ZREPRO_CUDA_BUILD_DIR: the build folder (default build-cuda).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${ZREPRO_CUDA_BUILD_DIR:-build-cuda}
# The torch: scripts/torch-prefix.sh's choice (ZREPRO_TORCH_PYTHON, python3's, or the pinned
# one in ZREPRO_CUDA_VENV / ~/.cache/zrepro/torch-venv), refused without CUDA.
export ZREPRO_TORCH_REQUIRE_CUDA=1
[ -n "${ZREPRO_CUDA_VENV:-}" ] && export ZREPRO_TORCH_VENV=$ZREPRO_CUDA_VENV
scripts/setup.sh --build-dir "$dir"
[ "${1:-}" = --build-only ] && exit 0
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
ctest --test-dir "$dir" --output-on-failure -j "${ZREPRO_TEST_JOBS:-2}" "$@"
