// cudaHostAlloc / cudaFreeHost for HostMemory's CUDA backend. Needs only the CUDA
// runtime (built when the toolkit is found, with or without a CUDA LibTorch).
#include "offload/host_memory.h"

#ifdef ZREPRO_HAVE_CUDART
#include <cuda_runtime_api.h>
#endif

namespace zrepro {

#ifdef ZREPRO_HAVE_CUDART
bool cuda_host_alloc(void** ptr, size_t bytes, std::string* error) {
  const cudaError_t e = cudaHostAlloc(ptr, bytes, cudaHostAllocDefault);
  if (e == cudaSuccess) return true;
  if (error) *error = cudaGetErrorString(e);
  return false;
}
void cuda_host_free(void* ptr) { cudaFreeHost(ptr); }
#else
bool cuda_host_alloc(void**, size_t, std::string* error) {
  if (error) *error = "this zrepro build has no CUDA runtime";
  return false;
}
void cuda_host_free(void*) {}
#endif

}  // namespace zrepro
