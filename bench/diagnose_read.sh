#!/usr/bin/env bash
# How fast `zrepro diagnose` reads a log, against `grep -cE` on the same file, and how much
# memory it holds ([Note: a log read as a stream], trainer/diagnose/evidence.h).
# Makes a Hugging Face Trainer-style log of SIZE_MB (progress bars, loss dicts, DeepSpeed's
# step and timer lines on 8 ranks, a CUDA OOM at its end; the same bytes every run), then
# times, median of 3 runs each:
#   grep     grep -cE with an alternation of fingerprint-like patterns (the floor: the disk
#            and one regex engine pass, no decision)
#   start    `zrepro --version`: the process start every zrepro command pays (LibTorch's
#            libraries load), the same for any log
#   diagnose `zrepro diagnose LOG` (every line read, the diagnosis printed)
# and prints the ratios diagnose / grep, whole and after the start, and the peak RSS of
# diagnose on the big log against on its first 100 lines (flat: the log is not held).
# With BASELINE=path/to/another/zrepro, that binary is timed too, on the same file in the
# same run (diagnose / baseline: the ratio a change of the reader is judged by).
# usage: [BASELINE=BIN] bench/diagnose_read.sh [SIZE_MB]   (after scripts/setup.sh; default 100)
set -euo pipefail
cd "$(dirname "$0")/.."
size_mb=${1:-100}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$tmp/big.log" "$size_mb" <<'PY'
import random, sys
path, size_mb = sys.argv[1], int(sys.argv[2])
random.seed(1)
lines = [
    "{'loss': %.4f, 'grad_norm': %.3f, 'learning_rate': 1.9e-05, 'epoch': %.2f}",
    "[rank%d]:[2026-12-01 10:%02d:%02d,123] [INFO] [logging.py:128:log_dist] [Rank 0] step=%d, skipped=0, lr=[1.9e-05], mom=[(0.9, 0.999)]",
    " %d%%|######    | %d/10000 [1:02:03<2:03:04,  1.23s/it]",
    "[2026-12-01 10:00:00,000] [INFO] [timer.py:264:stop] epoch=0/micro_step=%d/global_step=%d, RunningAvgSamplesPerSec=12.3, CurrSamplesPerSec=12.1, MemAllocated=13.2GB, MaxMemAllocated=20.1GB",
]
with open(path, "w") as out:
    size, i = 0, 0
    while size < size_mb << 20:
        k = i % 4
        args = ((random.random() * 3, random.random(), i / 1e5), (i % 8, i % 60, i % 60, i), (i % 100, i % 10000), (i, i // 4))[k]
        line = lines[k] % args + "\n"
        out.write(line)
        size += len(line)
        i += 1
    out.write("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
              "79.15 GiB of which 1.50 GiB is free.\n")
PY
head -100 "$tmp/big.log" > "$tmp/small.log"
pattern='CUDA out of memory|OVERFLOW! Rank [0-9]+|Watchdog caught collective operation timeout|train_batch_size is not equal|[Ee]rror|[Tt]raceback|step=[0-9]+'
median() {  # median wall seconds of 3 runs of "$@"
  python3 - "$@" <<'PY'
import subprocess, sys, time
t = []
for _ in range(3):
    a = time.perf_counter()
    subprocess.run(sys.argv[1:], capture_output=True)  # not /dev/null: GNU grep stops at the first match there
    t.append(time.perf_counter() - a)
print(sorted(t)[1])
PY
}
rss_kb() { /usr/bin/time -f %M "$@" 2>&1 > /dev/null | tail -1; }
cat "$tmp/big.log" > /dev/null  # in the page cache for every contender
g=$(median grep -cE "$pattern" "$tmp/big.log")
s=$(median build/zrepro --version)
d=$(median build/zrepro diagnose "$tmp/big.log")
if [ -n "${BASELINE:-}" ]; then b=$(median "$BASELINE" diagnose "$tmp/big.log"); bs=$(median "$BASELINE" --version); fi
bytes=$(stat -c %s "$tmp/big.log")
echo "| log | grep -cE (s) | zrepro start (s) | zrepro diagnose (s) | diagnose / grep | (diagnose - start) / grep | diagnose MB/s after start |"
echo "|---|---|---|---|---|---|---|"
python3 -c "
g, s, d, b = $g, $s, $d, $bytes
print(f'| {b / 2**20:.0f} MiB | {g:.3f} | {s:.3f} | {d:.3f} | {d / g:.1f}x | {(d - s) / g:.1f}x | {b / 2**20 / max(d - s, 1e-9):.0f} |')"
if [ -n "${BASELINE:-}" ]; then
  python3 -c "
g, s, d, b, bs = $g, $s, $d, $b, $bs
print(f'baseline {\"$BASELINE\"}: {b:.3f} s ({(b - bs) / g:.1f}x grep after its start); diagnose / baseline: {d / b:.2f}, after the start: {(d - s) / max(b - bs, 1e-9):.2f}')"
fi
if [ -x /usr/bin/time ]; then
  echo
  echo "peak RSS of zrepro diagnose: $(rss_kb build/zrepro diagnose "$tmp/small.log") KiB on 100 lines," \
       "$(rss_kb build/zrepro diagnose "$tmp/big.log") KiB on ${size_mb} MiB"
fi
