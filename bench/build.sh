#!/usr/bin/env bash
# Build time: a clean configure + build of everything (zrepro and the three test
# binaries) in a scratch folder, then what dominated, from ninja's log: wall time,
# the summed compile time per kind (torch PCH, library TUs, test TUs, links) and the
# slowest translation units. With ccache on PATH the build goes through it
# (scripts/setup.sh does the same); ZREPRO_BENCH_CCACHE=0 turns it off, and
# ZREPRO_BENCH_CCACHE=warm builds twice into the same folder with one fresh cache
# and reports both: cold, then the warm one analysed below.
# usage: bench/build.sh [jobs]   (after scripts/setup.sh; takes ~5-8 minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${1:-$(nproc)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mode=${ZREPRO_BENCH_CCACHE:-auto}
launcher=()
if [ "$mode" != 0 ] && command -v ccache >/dev/null; then
  launcher=("-DCMAKE_CXX_COMPILER_LAUNCHER=env;CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime;ccache")
  if [ "$mode" = warm ]; then export CCACHE_DIR="$tmp/ccache"; fi
fi
# The LibTorch scripts/setup.sh builds against (scripts/torch-prefix.sh).
torch_cmake=$(scripts/torch-prefix.sh --cmake-args)  # the LibTorch scripts/setup.sh builds against
mapfile -t torch_args <<< "$torch_cmake"
build() {  # dir
  cmake -S . -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" "${torch_args[@]}" > /dev/null
  local t0; t0=$(date +%s%N)
  cmake --build "$1" -j "$jobs" > /dev/null
  echo $(( ($(date +%s%N) - t0) / 1000000 ))
}
if [ "$mode" = warm ]; then
  # The same folder twice (ccache keys on the PCH's path): the first build fills the
  # cache (the cold figure), the second is what a clean rebuild costs with it warm.
  echo "cold (empty ccache): $(( $(build "$tmp/b") / 1000 )) s wall"
  rm -rf "$tmp/b"
fi
wall=$(build "$tmp/b")
python3 - "$tmp/b/.ninja_log" "$wall" "$jobs" "$([ ${#launcher[@]} -gt 0 ] && echo "through ccache, $mode" || echo "no ccache")" <<'PY'
import sys, collections
log, wall, jobs, how = sys.argv[1], float(sys.argv[2]) / 1000, sys.argv[3], sys.argv[4]
rows = {}
for line in open(log):
    if line.startswith("#"): continue
    start, end, _, out, _ = line.rstrip("\n").split("\t")
    rows[out] = (int(end) - int(start)) / 1000.0  # the last build of each output
def kind(o):
    if o.endswith((".pch", ".gch")): return "precompiled header"
    if ("/tests/" in o or "_tests.dir/" in o) and o.endswith(".o"): return "test translation units"
    if o.endswith(".o"): return "library translation units"
    if o.endswith(".a") or "tests" in o or o.endswith("zrepro"): return "archives and links"
    return "other"
by = collections.defaultdict(lambda: [0, 0.0])
for o, s in rows.items():
    by[kind(o)][0] += 1; by[kind(o)][1] += s
total = sum(s for _, s in by.values())
print(f"clean build, {jobs} jobs ({how}): {wall:.0f} s wall, {total:.0f} s of summed step time")
print("| kind | steps | seconds | share |")
print("|---|---|---|---|")
for k, (n, s) in sorted(by.items(), key=lambda kv: -kv[1][1]):
    print(f"| {k} | {n} | {s:.0f} | {100 * s / total:.0f}% |")
print("\nslowest steps:")
for o, s in sorted(rows.items(), key=lambda kv: -kv[1])[:12]:
    print(f"  {s:6.1f} s  {o}")
PY
