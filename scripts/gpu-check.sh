#!/usr/bin/env bash
# The GPU check, self-contained for a GPU machine lent for minutes (16 cores): finds or
# makes a CUDA torch (scripts/cuda-build.sh), builds zrepro against it into build-gpu/
# with every core, runs the checks that need a GPU and writes one verdict,
# ${OUT:-gpu-out}/gpu-check.json, plus every run folder and log beside it. Steps run
# cheapest-first and the verdict is rewritten after each, so a time-out still leaves
# what was gathered ("reached" names the last step started). Aim: 8 minutes in all.
#   1 env      nvidia-smi, torch, which LibTorch / CUDA runtime / NCCL were linked
#   2 build    build-gpu/ (zrepro and the unit tests; incremental on a rerun)
#   3 unit     the unit tests that need a GPU (Cuda.*: memory fraction OOM, pinned buffers)
#   4 stages   ZeRO 0-3 on cuda vs the CPU-emulated device: same losses (fp32, 1e-3 relative)
#   5 memory   --device-memory on cuda: the caching allocator's fraction gives a real OOM
#              (exit 3); a fitting run reports allocated / reserved peaks
#   6 offload  ZeRO-3 optimizer + parameter offload on cuda (cudaHostAlloc, the copy
#              stream): same losses as without offload
#   7 comm     NCCL (1 rank per GPU: mpirun -np <GPUs>) and 2 ranks sharing one GPU
#              (NCCL refuses a shared GPU: MPI staging through host memory), losses vs
#              the same ranks on the CPU
#   8 virtual  --world-size 4 with the subject rank on the GPU and the other three on the
#              CPU: same losses as the CPU-only virtual run (1e-3 relative); ZeRO-2
#   9 bench    bench copy --device cuda (pinned vs pageable), bench adam
# usage: scripts/gpu-check.sh            (GPU_CHECK_DRY=1: stop before the first GPU step)
# Env: OUT (results folder), ZREPRO_CUDA_VENV (venv for torch if python3 has none),
#      ZREPRO_CUDA_BUILD_DIR (default build-gpu), ZREPRO_BUILD_TYPE (default Release).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
mkdir -p "$out"
: > "$out/steps.txt"
step() { echo "[gpu-check] $(date +%T) step $*"; echo "$*" >> "$out/steps.txt"; python3 scripts/gpu-verdict.py "$out" >/dev/null; }
export ZREPRO_CUDA_BUILD_DIR=${ZREPRO_CUDA_BUILD_DIR:-build-gpu}
export ZREPRO_BUILD_TYPE=${ZREPRO_BUILD_TYPE:-Release}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

step env
nvidia-smi > "$out/nvidia-smi.txt" 2>&1
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
echo "${gpus:-0}" > "$out/gpus.txt"
# A python3 that already has a CUDA torch is used as it is; otherwise cuda-build.sh
# makes (or reuses) the venv.
if python3 -c 'import torch, sys; sys.exit(0 if torch.version.cuda else 1)' 2>/dev/null; then
  export ZREPRO_TORCH_PYTHON=python3
fi

step build
ZREPRO_BUILD_TARGETS="zrepro zrepro_unit_tests" scripts/cuda-build.sh --build-only > "$out/build.log" 2>&1
echo $? > "$out/build.rc"
grep '^-- zrepro:' "$out/build.log" > "$out/linked.txt"
z=$ZREPRO_CUDA_BUILD_DIR/zrepro
[ -x "$z" ] || { step failed-build; tail -30 "$out/build.log"; exit 1; }
"$z" env --json > "$out/env.json" 2> "$out/env.err"
if [ -n "${GPU_CHECK_DRY:-}" ]; then
  step dry-run-stop
  echo "[gpu-check] dry run: stopped before the first step that needs a GPU"; cat "$out/linked.txt"; exit 0
fi

step unit
timeout 120 "$ZREPRO_CUDA_BUILD_DIR/zrepro_unit_tests" --gtest_filter='Cuda.*' --gtest_output="json:$out/unit.json" \
  > "$out/unit.log" 2>&1

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

step stages
for s in 0 1 2 3; do
  run cpu$s --config "$cfg" --zero-stage "$s" --steps 10 --device cpu
  run cuda$s --config "$cfg" --zero-stage "$s" --steps 10 --device cuda
done

step memory
run cuda_oom --config "$cfg" --model small --steps 2 --device cuda --device-memory 20MB
run cuda_fit --config "$cfg" --model small --steps 2 --device cuda --device-memory 4GB

step offload
run cuda_off --config "$off" --steps 6 --device cuda
run cuda_nooff --config "$cfg" --zero-stage 3 --grad-accum 2 --steps 6 --device cuda

step comm
n=$(cat "$out/gpus.txt"); [ "$n" -ge 1 ] 2>/dev/null || n=1
mrun nccl_cuda "$n" --config "$cfg" --zero-stage 2 --steps 6 --device cuda
mrun nccl_cpu "$n" --config "$cfg" --zero-stage 2 --steps 6 --device cpu
mrun shared_cuda $((n + 1)) --config "$cfg" --zero-stage 3 --steps 6 --device cuda
mrun shared_cpu $((n + 1)) --config "$cfg" --zero-stage 3 --steps 6 --device cpu

step virtual
run virtual_cuda --config "$cfg" --zero-stage 2 --steps 6 --device cuda --world-size 4 --as-rank 1
run virtual_cpu --config "$cfg" --zero-stage 2 --steps 6 --device cpu --world-size 4 --as-rank 1

step bench
timeout 120 "$z" bench copy --device cuda --sizes 1M,16M,256M --json > "$out/bench_copy.json" 2> "$out/bench_copy.err"
timeout 120 "$z" bench adam --sizes 1M,10M,100M --json > "$out/bench_adam.json" 2> "$out/bench_adam.err"

step done
python3 scripts/gpu-verdict.py "$out"
