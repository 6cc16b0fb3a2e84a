#!/usr/bin/env bash
# The GPU check, for a GPU machine lent for minutes, as it is: no network, no apt, its own
# python3 with a CUDA torch, nvcc, CMake, ninja, many cores. What this Debian machine's
# scripts/setup.sh would install comes from the bundle (scripts/gpu-bundle.sh, carried as
# .gpu-bundle/), unpacked into a private prefix (scripts/gpu-prefix.sh). It builds zrepro
# against the machine's own torch into build-gpu/, runs the checks that need a GPU and
# measures zrepro's memory figures against the real caching allocator and real DeepSpeed
# (conformance/gpu/). Results go to gpu-out/ (GPU_CHECK_WORK); one verdict,
# gpu-out/gpu-check.json, is rewritten after every step, and with OUT set (the device
# tool) gpu-out/ is packed into $OUT/gpu-out.tar.gz after every step, so a time-out keeps
# what ran. Steps start only while their estimated need fits in GPU_CHECK_BUDGET_S
# (default 480 s); a step left out is named in the verdict ("skipped").
#   env       nvidia-smi, machine.json (GPU, driver, torch, CUDA, cores)
#   prefix    the bundle's packages and Python wheels (DeepSpeed and what it lacks there)
#   deepspeed real DeepSpeed + Hugging Face per fidelity case, in the background from here
#             on (it needs only the GPU while zrepro compiles)
#   build     build-gpu/: zrepro (every core but two), then the unit tests in the background
#   stages    ZeRO 0-3 on cuda vs the CPU-emulated device: same losses (fp32, 1e-3 relative)
#   bench     bench copy --device cuda (pinned vs pageable; the link the fidelity step uses)
#   fidelity  per case: zrepro plan, zrepro on cuda (phase peaks), the CPU emulation of some
#             cases, the OOM / fit check at 0.9x / 1.1x the GPU's peak
#   memory    --device-memory on cuda: a real OOM (exit 3); offload: same losses as none
#   comm      NCCL (one rank per GPU) and ranks sharing a GPU (MPI staging) vs the CPU
#   virtual   --world-size 4, the subject rank on the GPU, vs the CPU-only virtual run
#   unit      the Cuda.* unit tests (when their background build finished)
#   record    conformance/gpu/fidelity.py record -> gpu-out/gpu-record.json
# usage: scripts/gpu-check.sh      (GPU_CHECK_DRY=1: stop before the first step that needs a GPU)
# Env: OUT, GPU_CHECK_WORK (default gpu-out), GPU_CHECK_BUDGET_S, ZREPRO_PREBUILT (a zrepro
#      built elsewhere against the same torch, used only if the build here fails), ZREPRO_CUDA_BUILD_DIR
#      (default build-gpu), ZREPRO_BUILD_TYPE (default Release), GPU_CHECK_CASES /
#      GPU_CHECK_CPU_CASES (fidelity cases, comma-separated; default all / a chosen few).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${GPU_CHECK_WORK:-gpu-out}
mkdir -p "$out/fid"
: > "$out/steps.txt"
# The check runs as a child of this shell, which only waits: a wait is interrupted by
# SIGINT / SIGTERM (a foreground step is not), and then every process the check started
# (real DeepSpeed in the background, the unit tests' build, timeout's own process groups)
# is ended by walking the process tree. Exit 130 / 143 as one process would.
killtree() { local c; for c in $(pgrep -P "$1"); do killtree "$c"; done; kill "$1" 2>/dev/null; }
if [ -z "${GPU_CHECK_INNER:-}" ]; then
  GPU_CHECK_INNER=1 bash "$0" "$@" &
  child=$!
  trap 'killtree "$child"; exit 130' INT
  trap 'killtree "$child"; exit 143' TERM
  wait "$child"
  exit $?
fi
trap 'for c in $(pgrep -P $$); do killtree "$c"; done' EXIT  # the background work ends with the check
budget=${GPU_CHECK_BUDGET_S:-480}
t_start=$(date +%s)
elapsed() { echo $(( $(date +%s) - t_start )); }
pack() {
  [ -n "${OUT:-}" ] || return 0
  tar czf "$OUT/gpu-out.tar.gz.tmp" -C "$out" . 2>/dev/null && mv "$OUT/gpu-out.tar.gz.tmp" "$OUT/gpu-out.tar.gz"
  cp "$out/gpu-check.json" "$OUT/" 2>/dev/null || true
}
step() {
  echo "[gpu-check] $(date +%T) +$(elapsed)s step $*"; echo "$*" >> "$out/steps.txt"
  python3 scripts/gpu-verdict.py "$out" >/dev/null; pack
}
# want NEED NAME: start step NAME only if NEED seconds are left in the budget.
want() {
  local left=$(( budget - $(elapsed) ))
  if [ "$left" -lt "$1" ]; then echo "skipped:$2" >> "$out/steps.txt"; echo "[gpu-check] skip $2: needs ~$1 s, $left s left"; return 1; fi
  step "$2"
}
export ZREPRO_CUDA_BUILD_DIR=${ZREPRO_CUDA_BUILD_DIR:-build-gpu}
export ZREPRO_BUILD_TYPE=${ZREPRO_BUILD_TYPE:-Release}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
cores=$(getconf _NPROCESSORS_ONLN)  # not nproc: it answers OMP_NUM_THREADS, set to 1 above

step env
nvidia-smi > "$out/nvidia-smi.txt" 2>&1
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
echo "${gpus:-0}" > "$out/gpus.txt"
python3 - "$out/machine.json" "$cores" <<'PY' 2> "$out/machine.err"
import json, subprocess, sys, platform
m = {"cores": int(sys.argv[2]), "python": platform.python_version()}
try:
    import torch
    m.update(torch=torch.__version__, cuda=torch.version.cuda,
             gpu=torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
             gpu_memory_bytes=torch.cuda.get_device_properties(0).total_memory if torch.cuda.is_available() else None)
except Exception as e:
    m["torch_error"] = repr(e)
try:
    m["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True).stdout.strip() or None
except OSError:
    m["driver"] = None
json.dump(m, open(sys.argv[1], "w"), indent=1)
PY
# A python3 that already has a CUDA torch is used as it is; otherwise cuda-build.sh
# makes (or reuses) the venv.
if [ -z "${ZREPRO_TORCH_PYTHON:-}" ] && python3 -c 'import torch, sys; sys.exit(0 if torch.version.cuda else 1)' 2>/dev/null; then
  export ZREPRO_TORCH_PYTHON=python3
fi

step prefix
source scripts/gpu-prefix.sh
gpu_prefix_setup > "$out/prefix.log" 2>&1 || { cat "$out/prefix.log"; step failed-prefix; exit 1; }
cat "$out/prefix.log"
export ZREPRO_NO_APT=1
# DeepSpeed and the packages the image lacks, into a private site folder (never the image's).
site=/tmp/zrepro-site
if ls .gpu-bundle/wheels/*.whl >/dev/null 2>&1 && python3 -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 12) else 1)'; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
    .gpu-bundle/wheels/*.whl > "$out/wheels.log" 2>&1 && export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
  python3 -c 'import deepspeed, transformers; print("deepspeed", deepspeed.__version__, "transformers", transformers.__version__)' \
    >> "$out/wheels.log" 2>&1
  tail -1 "$out/wheels.log"
else
  echo "[gpu-check] no DeepSpeed wheels for this python (scripts/gpu-bundle.sh makes them for CPython 3.12)" | tee "$out/wheels.log"
fi

if [ -z "${GPU_CHECK_DRY:-}" ] && grep -q '^deepspeed' "$out/wheels.log"; then
  step deepspeed
  PYTHONUNBUFFERED=1 nohup python3 conformance/gpu/fidelity.py deepspeed --out "$out/fid" \
    ${GPU_CHECK_CASES:+--cases "$GPU_CHECK_CASES"} > "$out/deepspeed.log" 2>&1 &
  ds_pid=$!
fi

step build
t0=$(date +%s)
ZREPRO_JOBS=$(( cores > 4 ? cores - 2 : cores )) ZREPRO_BUILD_TARGETS=zrepro \
  scripts/cuda-build.sh --build-only > "$out/build.log" 2>&1
echo $? > "$out/build.rc"
echo "$(( $(date +%s) - t0 )) $(grep -c 'Building CXX' "$out/build.log") $cores" > "$out/build_time.txt"  # seconds, units, cores
grep '^-- zrepro:' "$out/build.log" > "$out/linked.txt"
z=$ZREPRO_CUDA_BUILD_DIR/zrepro
if [ ! -x "$z" ] && [ -x "${ZREPRO_PREBUILT:-}" ]; then
  # Fallback: a zrepro built elsewhere against the same torch release (ZREPRO_PREBUILT),
  # loading this machine's own LibTorch, CUDA runtime and NCCL. Recorded as such.
  tail -30 "$out/build.log"; echo "[gpu-check] build failed: using the prebuilt $ZREPRO_PREBUILT" | tee "$out/prebuilt.txt"
  tl=$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))')
  export LD_LIBRARY_PATH=$tl/lib:$tl/../nvidia/cu13/lib:$tl/../nvidia/nccl/lib:$LD_LIBRARY_PATH
  export ZREPRO_DATA_DIR=$PWD/configs
  z=$ZREPRO_PREBUILT
fi
[ -x "$z" ] || { step failed-build; tail -30 "$out/build.log"; exit 1; }
"$z" env --json > "$out/env.json" 2> "$out/env.err"
cat "$out/build_time.txt" "$out/linked.txt"
# The unit tests compile in the background, at low priority, while the GPU works.
( t1=$(date +%s); nice -n 10 cmake --build "$ZREPRO_CUDA_BUILD_DIR" -j $(( cores > 8 ? cores / 2 : 2 )) \
    --target zrepro_unit_tests > "$out/unit-build.log" 2>&1; echo "$? $(( $(date +%s) - t1 ))" > "$out/unit-build.rc" ) &
unit_build=$!
if [ -n "${GPU_CHECK_DRY:-}" ]; then
  wait $unit_build
  step dry-run-stop
  echo "[gpu-check] dry run: stopped before the first step that needs a GPU"; cat "$out/unit-build.rc"; exit 0
fi

cfg=$out/ds.json
cat > "$cfg" <<'JSON'
{"train_micro_batch_size_per_gpu": 4, "optimizer": {"type": "AdamW", "params": {"lr": 0.003}},
 "zero_optimization": {"stage": 0, "stage3_param_persistence_threshold": 1000}}
JSON
off=$out/offload.json
cat > "$off" <<'JSON'
{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2, "optimizer": {"type": "AdamW", "params": {"lr": 0.003}},
 "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 1000,
   "offload_optimizer": {"device": "cpu", "pin_memory": true}, "offload_param": {"device": "cpu", "pin_memory": true}}}
JSON
run() { local name=$1; shift; timeout 120 "$z" run "$@" --out "$out/$name" > "$out/$name.log" 2>&1; echo $? > "$out/$name.rc"; }
# Under mpirun even for one rank: a CUDA run under MPI takes NCCL when every local rank has a GPU.
mrun() { local name=$1 np=$2; shift 2
  timeout 120 mpirun -np "$np" --bind-to none "$z" run "$@" --out "$out/$name" > "$out/$name.log" 2>&1; echo $? > "$out/$name.rc"; }

if want 30 stages; then
  for s in 0 1 2 3; do
    run cpu$s --config "$cfg" --zero-stage "$s" --steps 10 --device cpu
    run cuda$s --config "$cfg" --zero-stage "$s" --steps 10 --device cuda
  done
fi

if want 20 bench; then
  timeout 60 "$z" bench copy --device cuda --sizes 1M,16M,256M --json > "$out/bench_copy.json" 2> "$out/bench_copy.err"
  cp "$out/bench_copy.json" "$out/fid/"
fi
link=$(python3 -c 'import json,sys
rows=[r for r in json.load(open(sys.argv[1])) if r.get("dir")=="h2d"]
print(max(r["pinned_gbps"] for r in rows))' "$out/bench_copy.json" 2>/dev/null || echo 0)

if want 150 fidelity; then
  timeout $(( budget - $(elapsed) - 60 )) python3 conformance/gpu/fidelity.py zrepro --bin "$z" --out "$out/fid" \
    ${GPU_CHECK_CASES:+--cases "$GPU_CHECK_CASES"} \
    --cpu-cases "${GPU_CHECK_CPU_CASES:-gpt2-bf16-z2,gpt2-bf16-z2-offopt,llama-toy-bf16-z2-sdpa}" \
    --oom-case gpt2-bf16-z2 --threads $(( cores / 2 )) --link-gbps "$link" > "$out/fidelity.log" 2>&1
  tail -20 "$out/fidelity.log"
fi

if want 40 memory; then
  run cuda_oom --config "$cfg" --model small --steps 2 --device cuda --device-memory 20MB
  run cuda_fit --config "$cfg" --model small --steps 2 --device cuda --device-memory 4GB
  run cuda_off --config "$off" --steps 6 --device cuda
  run cuda_nooff --config "$cfg" --zero-stage 3 --grad-accum 2 --steps 6 --device cuda
fi

if want 40 comm; then
  n=$(cat "$out/gpus.txt"); [ "$n" -ge 1 ] 2>/dev/null || n=1
  mrun nccl_cuda "$n" --config "$cfg" --zero-stage 2 --steps 6 --device cuda
  mrun nccl_cpu "$n" --config "$cfg" --zero-stage 2 --steps 6 --device cpu
  mrun shared_cuda $((n + 1)) --config "$cfg" --zero-stage 3 --steps 6 --device cuda
  mrun shared_cpu $((n + 1)) --config "$cfg" --zero-stage 3 --steps 6 --device cpu
fi

if want 20 virtual; then
  run virtual_cuda --config "$cfg" --zero-stage 2 --steps 6 --device cuda --world-size 4 --as-rank 1
  run virtual_cpu --config "$cfg" --zero-stage 2 --steps 6 --device cpu --world-size 4 --as-rank 1
fi

if [ -s "$out/unit-build.rc" ] && [ -x "$ZREPRO_CUDA_BUILD_DIR/zrepro_unit_tests" ] && want 20 unit; then
  timeout 60 "$ZREPRO_CUDA_BUILD_DIR/zrepro_unit_tests" --gtest_filter='Cuda.*' --gtest_output="json:$out/unit.json" \
    > "$out/unit.log" 2>&1
else
  echo "skipped:unit" >> "$out/steps.txt"; echo "[gpu-check] unit tests not built in time: $(cat "$out/unit-build.rc" 2>/dev/null)"
fi
kill $unit_build 2>/dev/null

step record
if [ -n "${ds_pid:-}" ]; then
  # Real DeepSpeed has had the whole run; what it has not finished by now is left out.
  left=$(( budget - $(elapsed) - 10 )); [ "$left" -gt 0 ] || left=1
  timeout "$left" tail --pid="$ds_pid" -f /dev/null
  kill "$ds_pid" 2>/dev/null; pkill -f ds_memory.py 2>/dev/null
fi
cp "$out/machine.json" "$out/env.json" "$out/fid/" 2>/dev/null
python3 conformance/gpu/fidelity.py record --out "$out/fid" --record "$out/gpu-record.json" > "$out/record.log" 2>&1
tail -60 "$out/record.log"
step done
python3 scripts/gpu-verdict.py "$out"
pack
