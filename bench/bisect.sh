#!/usr/bin/env bash
# What a cached bisect costs: the recorded clipping-default bisect (tests/data/bisect/
# clip-default: 36 releases, 8 judged) replayed offline from a copy of its cache, against
# one plain `zrepro run` of the same config on the same ranks and steps, interleaved, REPS
# runs of each; prints the wall seconds, the medians and their ratio (a cached bisect is
# zrepro's runs beside each judged release plus reading the cache: about one run per
# judged release). The first, uncached bisect is dominated by pip installs and DeepSpeed's
# extension builds (minutes per new release) and is not benchmarked here.
# usage: bench/bisect.sh [reps]   (after scripts/setup.sh; default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-3}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  OMPI_MCA_rmaps_base_oversubscribe=1
data=tests/data/bisect/clip-default
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for i in $(seq "$reps"); do
  rm -rf "$tmp/cache" "$tmp/bisect" "$tmp/run"
  cp -r "$data/cache" "$tmp/cache"
  t0=$EPOCHREALTIME
  build/zrepro bisect --config "$data/ds_config.json" --good 0.16.0 --bad 0.19.8 --cache "$tmp/cache" \
    --python /nonexistent --out "$tmp/bisect" > "$tmp/bisect.log" 2>&1 || { cat "$tmp/bisect.log"; exit 1; }
  t1=$EPOCHREALTIME
  build/zrepro run --config "$data/ds_config.json" --ranks 2 --steps 3 --log-every 1000 --out "$tmp/run" \
    > "$tmp/run.log" 2>&1 || { cat "$tmp/run.log"; exit 1; }
  t2=$EPOCHREALTIME
  echo "$t0 $t1 $t2" >> "$tmp/times"
done
grep -q "first release whose figures moved: 0.19.3" "$tmp/bisect.log" || { echo "the replay did not name 0.19.3"; exit 1; }
python3 - "$tmp/times" <<'PY'
import statistics, sys
b, r = [], []
for line in open(sys.argv[1]):
    t0, t1, t2 = map(float, line.split())
    b.append(t1 - t0); r.append(t2 - t1)
mb, mr = statistics.median(b), statistics.median(r)
print(f"cached bisect (8 releases judged) {[round(x, 2) for x in b]} s, one zrepro run {[round(x, 2) for x in r]} s")
print(f"median bisect {mb:.2f} s, run {mr:.2f} s: bisect/run = {mb / mr:.1f}")
PY
