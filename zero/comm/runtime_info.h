// What the communication stack this build links says about the machine, for `zrepro env`
// and summary.json "env" (DeepSpeed's ds_report counterpart): the MPI library, and with
// the NCCL backend (CUDA toolkit and NCCL found at configure) the NCCL version, the CUDA
// runtime and driver versions and each GPU's name, memory and compute capability. A
// build without the backend, or a machine without a driver, says so instead of failing.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace zrepro {

struct GpuInfo {
  std::string name;
  int64_t total_bytes = 0;
  int cc_major = 0, cc_minor = 0;
};

struct CommRuntimeInfo {
  std::string mpi;                    // MPI_Get_library_version's first line
  bool nccl_built = false;            // the NCCL backend is compiled in
  std::string nccl, cuda_runtime, cuda_driver;  // "2.21.5", "12.4", "12.6" or "" when absent
  std::string cuda_error;             // why no GPU is listed (no driver, no device), "" otherwise
  std::vector<GpuInfo> gpus;
};

// Safe before MPI_Init and without a GPU.
CommRuntimeInfo comm_runtime_info();

}  // namespace zrepro
