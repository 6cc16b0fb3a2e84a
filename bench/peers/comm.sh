#!/usr/bin/env bash
# zrepro's comm layer against raw MPI (both from `zrepro bench comm`) and torch.distributed
# gloo (bench/peers/comm_peers.py) at the same sizes, 2 ranks, interleaved rounds; medians
# of each figure and zrepro's speed over gloo's (gloo time / zrepro time). "zrepro" is the
# blocking form (a caller that waits at once), "stream" the comm stream's form (issued,
# waited for later): [Note: a collective on the caller], zero/comm/communicator.cpp.
# usage: bench/peers/comm.sh [min-bytes] [max-bytes] [rounds]   (default 65536 16777216 3;
#        after scripts/setup.sh and scripts/conformance.sh's venv, ZREPRO_CONFORMANCE_VENV)
set -euo pipefail
cd "$(dirname "$0")/../.."
lo=${1:-65536}; hi=${2:-16777216}; rounds=${3:-3}
py=${ZREPRO_CONFORMANCE_VENV:-$HOME/.cache/zrepro/conformance-venv}/bin/python
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for r in $(seq "$rounds"); do
  build/zrepro bench comm --ranks 2 --min-bytes "$lo" --max-bytes "$hi" --iters 100 --json > "$tmp/z_$r.json"
  "$py" bench/peers/comm_peers.py --ranks 2 --min-bytes "$lo" --max-bytes "$hi" --iters 20 2>/dev/null > "$tmp/g_$r.json"
done
python3 - "$tmp" "$rounds" <<'PY'
import json, statistics, sys, glob
tmp, rounds = sys.argv[1], int(sys.argv[2])
z, g = {}, {}
for f in glob.glob(f"{tmp}/z_*.json"):
    for row in json.load(open(f)):
        d = z.setdefault((row["op"], int(row["bytes"])), {"ours": [], "raw": [], "stream": []})
        d["ours"].append(row["time_us"]); d["raw"].append(row["raw_time_us"])
        d["stream"].append(row["stream_time_us"])
for f in glob.glob(f"{tmp}/g_*.json"):
    for row in json.load(open(f)):
        g.setdefault((row["op"], int(row["bytes"])), []).append(row["time_us"])
med = lambda v: statistics.median(v)
print(f"# 2 ranks, float32, times in us: median of {rounds} interleaved rounds [min-max]")
print("| op | size (B) | zrepro | stream | raw MPI | gloo | zrepro / raw MPI speed | stream / raw MPI | zrepro / gloo speed |")
print("|---|---|---|---|---|---|---|---|---|")
for (op, b), d in sorted(z.items()):
    gl = [v for v in g.get((op, b), []) if v is not None]
    gcell = f"{med(gl):.0f} [{min(gl):.0f}-{max(gl):.0f}]" if gl else "not in gloo"
    gr = f"{med(gl) / med(d['ours']):.2f}x" if gl else "-"
    print(f"| {op} | {b} | {med(d['ours']):.1f} [{min(d['ours']):.1f}-{max(d['ours']):.1f}] | {med(d['stream']):.1f} | "
          f"{med(d['raw']):.1f} | {gcell} | {med(d['raw']) / med(d['ours']):.2f}x | "
          f"{med(d['raw']) / med(d['stream']):.2f}x | {gr} |")
PY
