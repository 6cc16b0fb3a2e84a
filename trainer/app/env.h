// `zrepro env` and `zrepro --version`: what this build and machine are, in one block (as
// DeepSpeed's ds_report): zrepro's version and commit, LibTorch (and whether it has CUDA),
// BLAS, MPI, NCCL, the CUDA runtime and driver, the GPUs, host memory, the memlock limit
// and CAP_IPC_LOCK, the CPU and its vector flags. The same JSON is summary.json's "env",
// so a baseline records what it was measured on and a check after an upgrade names what
// changed.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "trainer/report/environment.h"

namespace zrepro {

Environment environment();  // this build and machine, measured now
std::string version_line();  // "zrepro 0.1.0 (commit 1a2b3c4d5e6f), LibTorch 1.13.1 CPU"
std::string libtorch_kind();  // "CPU", "CUDA", or "CUDA (no GPU visible)": how LibTorch was built and what it sees

std::string blas_library();                 // the libblas.so.3 alternative's target, or "unknown"

// [Note: OpenBLAS on a CPU it does not know] OpenBLAS picks its kernels when LibTorch
// loads it, before main, from a table of CPU models; a model newer than its table gets
// the generic fallback. Debian's OpenBLAS 0.3.21 takes this machine's Xeon (AVX-512 with
// bf16 and fp16) for a Prescott (SSE3): sgemm_kernel_PRESCOTT was 70% of a `small` fp32
// step, and steps ran 3.1x slower than with its Cooperlake kernels (1200 vs 3700
// tokens/s; docs/lab/PERFORMANCE.md). Called first in main for the commands that compute
// (and in the tests' main): when OpenBLAS chose kernels for an older instruction set
// than this CPU's flags allow, this re-executes the binary once (about 0.4 s) with
// OPENBLAS_CORETYPE naming the best set the flags allow (COOPERLAKE, SKYLAKEX, HASWELL
// or SANDYBRIDGE); child processes inherit it. Nothing happens when OPENBLAS_CORETYPE is
// already set (the user's choice, or the re-executed process), when the BLAS is not
// OpenBLAS, or when its choice is as good. `zrepro env` and summary.json's env say what
// was chosen (`blas_kernels`).
void ensure_blas_kernels(char** argv);
std::string blas_core();  // OpenBLAS's kernel set ("Cooperlake"), or "" when the BLAS is not OpenBLAS
std::string best_blas_core();  // the best set this CPU's flags allow ("COOPERLAKE"; "" for SSE only)
// A kernel set's instruction-set level (any case): 0 SSE, 1 AVX, 2 AVX2 + FMA, 3 AVX-512.
int blas_core_level(std::string core);
int64_t meminfo_bytes(const std::string& key);  // /proc/meminfo "MemTotal:" etc.; -1 if absent
// The cores this process may run on (its affinity mask; the machine's count if unknown):
// the slots --ranks fills before it oversubscribes.
int cpu_slots();

// int env_command(int, char**) is in cli.h with the other commands.

}  // namespace zrepro
