#!/usr/bin/env bash
# zrepro's fused CPU Adam against DeepSpeedCPUAdam and torch AdamW (foreach, fused),
# interleaved rounds at 1 and 2 threads, medians and spreads of Mparam/s, plus the
# machine's Adam-pattern probe and STREAM triad from `zrepro bench adam`.
# usage: bench/peers/adam.sh [sizes] [rounds]   (default 20M,100M and 3; after
#        scripts/setup.sh and scripts/conformance.sh's venv, ZREPRO_CONFORMANCE_VENV)
set -euo pipefail
cd "$(dirname "$0")/../.."
sizes=${1:-20M,100M}; rounds=${2:-3}
py=${ZREPRO_CONFORMANCE_VENV:-$HOME/.cache/zrepro/conformance-venv}/bin/python
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for t in 1 2; do
  for r in $(seq "$rounds"); do
    OMP_NUM_THREADS=$t build/zrepro bench adam --sizes "$sizes" --threads "$t" --reps 5 --json > "$tmp/z_${t}_$r.json"
    OMP_NUM_THREADS=$t DS_ACCELERATOR=cpu "$py" bench/peers/adam_peers.py --sizes "$sizes" --threads "$t" --reps 5 \
      2>/dev/null > "$tmp/p_${t}_$r.json"
  done
done
python3 - "$tmp" "$rounds" <<'PY'
import json, statistics, sys, glob
tmp, rounds = sys.argv[1], int(sys.argv[2])
rows = {}
for f in sorted(glob.glob(f"{tmp}/*.json")):
    for r in json.load(open(f)):
        d = rows.setdefault((r["threads"], r["params"]), {})
        for k, v in r.items():
            if k not in ("threads", "params"):
                d.setdefault(k, []).append(v)
cols = [("fused_mparams_per_s", "zrepro"), ("fused_bf16_mparams_per_s", "zrepro+bf16"),
        ("deepspeed_cpu_adam_mparams_per_s", "DeepSpeedCPUAdam"), ("torch_adamw_fused_mparams_per_s", "torch fused"),
        ("torch_adamw_foreach_mparams_per_s", "torch foreach"), ("adam_pattern_gbps", "probe GB/s"),
        ("triad_gbps", "triad GB/s")]
print(f"# Mparam/s, median of {rounds} interleaved rounds [min-max]; probe: Adam's access pattern (28 B/param)")
print("# threads params | " + " | ".join(c[1] for c in cols) + " | zrepro/DS | zrepro/probe")
for (t, n), d in sorted(rows.items()):
    med = {k: statistics.median(v) for k, v in d.items()}
    cells = [f"{med[k]:.0f} [{min(d[k]):.0f}-{max(d[k]):.0f}]" if k in med else "-" for k, _ in cols]
    ratio = med["fused_mparams_per_s"] / med["deepspeed_cpu_adam_mparams_per_s"]
    probe = med["fused_mparams_per_s"] * 28 / 1e3 / med["adam_pattern_gbps"]
    print(f"  {t} {n} | " + " | ".join(cells) + f" | {ratio:.2f}x | {100 * probe:.0f}%")
PY
