#!/usr/bin/env bash
# zrepro check as a CI job: every config of a suite folder against its baseline, one table,
# JUnit XML for the CI's test report ([Note: a check suite], trainer/app/check.h).
#   scripts/ci-check.sh [SUITE_DIR] [OUT_DIR]
#       SUITE_DIR (default configs/check-suite) without baselines: write them (commit them);
#       with: check every config, OUT_DIR/junit.xml (default check_out). Exit 0 nothing
#       moved, 11 something moved or could not run, 2 bad input.
#   scripts/ci-check.sh --demo
#       the whole loop here, in a temporary copy of configs/check-suite: save the baselines,
#       an identical recheck (PASS), then the DeepSpeed 0.19.4 -> 0.19.8 upgrade of
#       zero3_offload (REGRESSION on offload's pinned host memory). Exit 0 when both came out so.
# Builds zrepro first (scripts/setup.sh) unless build/zrepro exists.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
[ -x "$root/build/zrepro" ] || "$root/scripts/setup.sh"
zrepro="$root/build/zrepro"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

if [ "${1:-}" = "--demo" ]; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  cp -r "$root/configs/check-suite" "$tmp/suite"
  rm -rf "$tmp/suite/baselines"
  echo "== 1. baselines (before the upgrade)"
  "$zrepro" check --save-suite "$tmp/suite" --work "$tmp/work0"
  echo "== 2. an identical recheck: expect PASS"
  "$zrepro" check --suite "$tmp/suite" --work "$tmp/work1" --junit "$tmp/pass.xml"
  echo "== 3. the DeepSpeed upgrade 0.19.4 -> 0.19.8 of zero3_offload: expect REGRESSION (exit 11)"
  sed -i 's/--deepspeed-version 0.19.4/--deepspeed-version 0.19.8/' "$tmp/suite/zero3_offload.args"
  set +e
  "$zrepro" check --suite "$tmp/suite" --work "$tmp/work2" --junit "$tmp/upgrade.xml"
  code=$?
  set -e
  echo "== JUnit XML of step 3:"
  cat "$tmp/upgrade.xml"
  if [ "$code" -ne 11 ]; then
    echo "ci-check --demo: the upgrade check exited $code, expected 11" >&2
    exit 1
  fi
  echo "ci-check --demo: PASS then REGRESSION, as expected"
  exit 0
fi

suite="${1:-$root/configs/check-suite}"
out="${2:-check_out}"
mkdir -p "$out"
if [ ! -d "$suite/baselines" ]; then
  echo "[ci-check] $suite has no baselines: writing them (commit $suite/baselines)"
  exec "$zrepro" check --save-suite "$suite" --work "$out/work"
fi
exec "$zrepro" check --suite "$suite" --work "$out/work" --junit "$out/junit.xml"
