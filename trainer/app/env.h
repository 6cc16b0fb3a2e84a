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

namespace zrepro {

nlohmann::json environment_json();
std::string format_environment(const nlohmann::json& env);
std::string version_line();  // "zrepro 0.1.0 (commit 1a2b3c4d5e6f), LibTorch 1.13.1 CPU"
std::string libtorch_kind();  // "CPU", "CUDA", or "CUDA (no GPU visible)": how LibTorch was built and what it sees

std::string blas_library();                 // the libblas.so.3 alternative's target, or "unknown"
int64_t meminfo_bytes(const std::string& key);  // /proc/meminfo "MemTotal:" etc.; -1 if absent
// The cores this process may run on (its affinity mask; the machine's count if unknown):
// the slots --ranks fills before it oversubscribes.
int cpu_slots();

// int env_command(int, char**) is in cli.h with the other commands.

}  // namespace zrepro
