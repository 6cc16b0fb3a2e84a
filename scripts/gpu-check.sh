#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU and a pip torch (CUDA LibTorch):
# builds zrepro against that LibTorch into build-gpu/, then runs the checks that need
# a GPU and writes every output under ${OUT:-gpu-out}/:
#   - stage 0-3 on cuda vs the CPU-emulated device (same losses, fp32, 1e-3 relative)
#   - --device-memory on cuda: the caching allocator's memory fraction gives a real OOM
#     (exit 3) and a fitting run reports allocated / reserved peaks
#   - offload on cuda: cudaHostAlloc pinning, the copy stream, same losses as without
#   - bench copy --device cuda (real pinned vs pageable link), bench adam
# usage: scripts/gpu-check.sh      (results: $OUT/gpu-check.json and the run folders)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
mkdir -p "$out"
prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
echo "[gpu-check] LibTorch: $prefix"
if [ ! -f build-gpu/zrepro ]; then
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DZREPRO_TESTS=OFF \
    -DCMAKE_PREFIX_PATH="$prefix" > "$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
  cmake --build build-gpu -j "$(nproc)" > "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
fi
z=build-gpu/zrepro
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
nvidia-smi > "$out/nvidia-smi.txt" 2>&1
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
run() { local name=$1; shift; timeout 300 "$z" run "$@" --out "$out/$name" > "$out/$name.log" 2>&1; echo $?; }
declare -A rc
for s in 0 1 2 3; do
  rc[cpu$s]=$(run cpu$s --config "$cfg" --zero-stage "$s" --steps 10 --device cpu)
  rc[cuda$s]=$(run cuda$s --config "$cfg" --zero-stage "$s" --steps 10 --device cuda)
done
rc[cuda_oom]=$(run cuda_oom --config "$cfg" --model small --steps 2 --device cuda --device-memory 20MB)
rc[cuda_fit]=$(run cuda_fit --config "$cfg" --model small --steps 2 --device cuda --device-memory 4GB)
rc[cuda_off]=$(run cuda_off --config "$off" --steps 6 --device cuda)
rc[cuda_nooff]=$(run cuda_nooff --config "$cfg" --zero-stage 3 --grad-accum 2 --steps 6 --device cuda)
timeout 300 "$z" bench copy --device cuda --sizes 1M,16M,256M --json > "$out/bench_copy.json" 2> "$out/bench_copy.err"
timeout 300 "$z" bench adam --sizes 1M,10M,100M --json > "$out/bench_adam.json" 2> "$out/bench_adam.err"
for k in "${!rc[@]}"; do echo "$k ${rc[$k]}"; done > "$out/exit_codes.txt"
python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
def summary(name):
    p = f"{out}/{name}/summary.json"
    return json.load(open(p)) if os.path.exists(p) else None
def worst(a, b):
    if not a or not b or a["status"] != "ok" or b["status"] != "ok": return None
    return max(abs(x["loss"] - y["loss"]) / abs(x["loss"]) for x, y in zip(a["steps"], b["steps"]))
res = {"exit_codes": dict(l.split() for l in open(f"{out}/exit_codes.txt"))}
res["cuda_vs_cpu_loss_rel"] = {f"stage{s}": worst(summary(f"cpu{s}"), summary(f"cuda{s}")) for s in range(4)}
res["offload_vs_none_loss_rel"] = worst(summary("cuda_nooff"), summary("cuda_off"))
for name in ("cuda_oom", "cuda_fit", "cuda_off"):
    s = summary(name)
    res[name] = s and {"status": s["status"], "failure": s["failure"], "memory": s["memory"], "offload": s.get("offload")}
json.dump(res, open(f"{out}/gpu-check.json", "w"), indent=1)
ok = all(v is not None and v < 1e-3 for v in res["cuda_vs_cpu_loss_rel"].values()) and \
     res["exit_codes"].get("cuda_oom") == "3" and res["exit_codes"].get("cuda_fit") == "0" and \
     res["offload_vs_none_loss_rel"] is not None and res["offload_vs_none_loss_rel"] < 1e-4
print(json.dumps(res["cuda_vs_cpu_loss_rel"]), res["offload_vs_none_loss_rel"], res["exit_codes"])
print("[gpu-check]", "PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY
