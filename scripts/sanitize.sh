#!/usr/bin/env bash
# The test suite under AddressSanitizer + UndefinedBehaviorSanitizer: builds build-asan/
# (every zrepro target instrumented: -DZREPRO_SANITIZE=address,undefined; LibTorch and
# Open MPI are not), then runs ctest there. Leak reports are off (Open MPI and LibTorch
# keep allocations for the process's life); any other report fails the test it ran in.
# usage: scripts/sanitize.sh [ctest args]   (e.g. -L unit; ZREPRO_SANITIZE_BUILD_DIR)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${ZREPRO_SANITIZE_BUILD_DIR:-build-asan}
ZREPRO_BUILD_TYPE=RelWithDebInfo ZREPRO_CMAKE_ARGS="-DZREPRO_SANITIZE=address,undefined ${ZREPRO_CMAKE_ARGS:-}" \
  bash scripts/setup.sh --build-dir "$dir"
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir "$dir" --output-on-failure -j "${ZREPRO_TEST_JOBS:-2}" "$@"
