#!/usr/bin/env bash
# The test command of the README (and of CI): set-up, build, then the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
# Warnings are errors here (CI): the project's own code builds without one.
ZREPRO_EXTRA_PACKAGES=chromium ZREPRO_CMAKE_ARGS="-DZREPRO_WERROR=ON ${ZREPRO_CMAKE_ARGS:-}" scripts/setup.sh
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
ctest --test-dir build --output-on-failure -j "${ZREPRO_TEST_JOBS:-2}" "$@"
