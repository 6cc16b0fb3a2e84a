// See runtime_info.h.
#include "zero/comm/runtime_info.h"

#include <mpi.h>

#ifdef ZREPRO_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>
#endif

namespace zrepro {

namespace {

#ifdef ZREPRO_HAVE_NCCL
// CUDA encodes 12040 as 12.4; NCCL (since 2.9) 22105 as 2.21.5.
std::string cuda_version(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }
std::string nccl_version(int v) {
  return std::to_string(v / 10000) + "." + std::to_string((v % 10000) / 100) + "." + std::to_string(v % 100);
}

void cuda_info(CommRuntimeInfo& info) {
  info.nccl_built = true;
  int v = 0;
  if (ncclGetVersion(&v) == ncclSuccess) info.nccl = nccl_version(v);
  if (cudaRuntimeGetVersion(&v) == cudaSuccess) info.cuda_runtime = cuda_version(v);
  if (cudaDriverGetVersion(&v) == cudaSuccess && v > 0) info.cuda_driver = cuda_version(v);
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    info.cuda_error = cudaGetErrorString(e);
    cudaGetLastError();  // clear it
    return;
  }
  for (int d = 0; d < n; ++d) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, d) != cudaSuccess) continue;
    info.gpus.push_back({p.name, static_cast<int64_t>(p.totalGlobalMem), p.major, p.minor});
  }
}
#endif

}  // namespace

CommRuntimeInfo comm_runtime_info() {
  CommRuntimeInfo info;
  char mpi[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int len = 0;
  if (MPI_Get_library_version(mpi, &len) == MPI_SUCCESS) {
    info.mpi.assign(mpi, static_cast<size_t>(len));
    const size_t cut = info.mpi.find_first_of(",\n");
    if (cut != std::string::npos) info.mpi.resize(cut);
  }
#ifdef ZREPRO_HAVE_NCCL
  cuda_info(info);
#else
  info.cuda_error = "this build has no NCCL backend (CUDA toolkit or NCCL not found at configure)";
#endif
  return info;
}

}  // namespace zrepro
