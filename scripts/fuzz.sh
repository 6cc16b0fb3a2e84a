#!/usr/bin/env bash
# libFuzzer under ASan + UBSan on one of three targets, built into build-fuzz/ with clang
# (coverage on every library):
#   config  the config loader and the `zrepro run` flag parser (fuzz/config_fuzz.cpp),
#           seeded with every DeepSpeed config in the repository and a few flag lines; a
#           ConfigError is a refusal, anything else that escapes is a bug;
#   yaml    the accelerate config reader (`--accelerate-config`, fuzz/yaml_fuzz.cpp), seeded
#           with the accelerate configs in the repository and the YAML inputs that once
#           crashed it (aliases, "billion laughs", deep nesting); a ConfigError is a refusal;
#   log     the log reader of `zrepro diagnose` (fuzz/log_fuzz.cpp), seeded with the
#           diagnose corpus of logs; nothing may escape.
# Runs RUNS inputs and prints libFuzzer's summary. A crash, a sanitizer report or an escaped
# exception stops it with the input saved as build-fuzz/crash-*.
# usage: scripts/fuzz.sh [runs] [jobs] [config|yaml|log]   (default 1000000 runs over 1 job of
#        the config target, each job runs/jobs; needs clang, as Debian's clang)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-1000000}; jobs=${2:-1}; target=${3:-config}; per_job=$((runs / jobs))
case "$target" in config|yaml|log) ;; *) echo "fuzz: got target \"$target\", expected config, yaml or log" >&2; exit 2 ;; esac
dir=${ZREPRO_FUZZ_BUILD_DIR:-build-fuzz}
command -v clang++ > /dev/null || { echo "fuzz: clang++ not found (apt-get install clang)" >&2; exit 2; }
torch_cmake=$(scripts/torch-prefix.sh --cmake-args)  # the LibTorch scripts/setup.sh builds against
mapfile -t torch_args <<< "$torch_cmake"
CC=clang CXX=clang++ cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZREPRO_TESTS=OFF "${torch_args[@]}" \
  -DZREPRO_FUZZ=ON -DZREPRO_SANITIZE=address,undefined > "$dir.configure.log" 2>&1 || { cat "$dir.configure.log"; exit 1; }
bin=zrepro_${target}_fuzz
cmake --build "$dir" --target "$bin" -j "${ZREPRO_JOBS:-$(nproc)}"
corpus=$dir/corpus_$target
rm -rf "$corpus" && mkdir -p "$corpus"
i=0
if [ "$target" = config ]; then
  for f in $(git ls-files 'configs/*.json' 'conformance/configs/*.json' 'tests/*.json'); do
    i=$((i + 1))
    { echo; cat "$f"; } > "$corpus/seed_$i"
  done
  flags=("--world-size 4 --micro-batch 2" "--precision bf16 --zero-stage 3" "--ranks 2 --inject inf-grad:0:1-3"
         "--device-memory 40GB --grad-accum 4" "--model small --lr 3e-4" "--steps 5 --data-rule same --as-rank 1")
  for k in "${!flags[@]}"; do
    { echo "${flags[$k]}"; cat configs/examples/hf_auto_zero2.json; } > "$corpus/flags_$k"
  done
elif [ "$target" = yaml ]; then
  for f in $(git ls-files 'configs/examples/accelerate/*' 'tests/*.yaml' 'tests/*.yml'); do
    i=$((i + 1))
    head -c 8192 "$f" > "$corpus/seed_$i"
  done
else
  for f in $(git ls-files 'tests/trainer/diagnose/diagnose_logs/*.log' 'configs/scenarios/*/*.log'); do
    i=$((i + 1))
    head -c 8192 "$f" > "$corpus/seed_$i"
  done
fi
for f in tests/data/fuzz/"$target"/*; do cp "$f" "$corpus/regression_$(basename "$f")"; done  # inputs that once crashed
echo "fuzz: $(ls "$corpus" | wc -l) seeds, $jobs job(s) x $per_job runs"
rm -f "$dir"/fuzz-*.log
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 OMP_NUM_THREADS=1
if [ "$jobs" -gt 1 ]; then  # libFuzzer writes each job's output to fuzz-<n>.log in the working folder
  (cd "$dir" && ./"$bin" -runs="$per_job" -jobs="$jobs" -workers="$jobs" -max_len=8192 -timeout=10 \
     -artifact_prefix=./ -print_final_stats=1 "corpus_$target" > fuzz.log 2>&1) || true
else
  "$dir/$bin" -runs="$per_job" -max_len=8192 -timeout=10 -artifact_prefix="$dir/" -print_final_stats=1 \
    "$corpus" > "$dir/fuzz-0.log" 2>&1 || true
fi
ok=0
for log in "$dir"/fuzz-*.log; do
  grep -E "stat::number_of_executed_units|stat::average_exec_per_sec|ERROR|SUMMARY|Test unit" "$log" | sed "s|^|$(basename "$log"): |"
  grep -q "^Done $per_job runs" "$log" && ok=$((ok + 1))
done
[ "$ok" -eq "$jobs" ] && echo "fuzz: $jobs x $per_job = $runs runs, no crash" || { echo "fuzz: FAILED (see $dir/fuzz-*.log)"; exit 1; }
