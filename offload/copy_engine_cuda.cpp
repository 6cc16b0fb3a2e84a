// The CUDA runtime side of CopyEngine: a dedicated non-blocking stream, an event
// recorded on the compute stream (LibTorch computes on the legacy default stream)
// that the copy stream waits for, async copies on pinned memory, synchronous ones
// on pageable memory. Needs only the CUDA runtime; without it every call throws.
#include <stdexcept>
#include <string>

#include "offload/copy_engine.h"

#ifdef ZREPRO_HAVE_CUDART
#include <cuda_runtime_api.h>
#endif

namespace zrepro {

#ifdef ZREPRO_HAVE_CUDART
namespace {
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("CopyEngine: ") + what + ": " + cudaGetErrorString(e));
}
cudaMemcpyKind kind_of(int kind) { return kind == 0 ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice; }
}  // namespace

void* cuda_copy_stream_create() {
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  return s;
}
void cuda_copy_stream_destroy(void* stream) { cudaStreamDestroy(static_cast<cudaStream_t>(stream)); }
void* cuda_record_compute_event() {
  cudaEvent_t e = nullptr;
  check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  check(cudaEventRecord(e, cudaStreamLegacy), "cudaEventRecord");
  return e;
}
void cuda_copy_async(void* stream, void* ready, void* dst, const void* src, size_t bytes, int kind) {
  auto s = static_cast<cudaStream_t>(stream);
  if (ready) {
    check(cudaStreamWaitEvent(s, static_cast<cudaEvent_t>(ready), 0), "cudaStreamWaitEvent");
    cudaEventDestroy(static_cast<cudaEvent_t>(ready));
  }
  check(cudaMemcpyAsync(dst, src, bytes, kind_of(kind), s), "cudaMemcpyAsync");
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
}
void cuda_copy_sync(void* dst, const void* src, size_t bytes, int kind) {
  check(cudaMemcpy(dst, src, bytes, kind_of(kind)), "cudaMemcpy");
}
#else
namespace {
[[noreturn]] void none() { throw std::runtime_error("CopyEngine: this zrepro build has no CUDA runtime"); }
}  // namespace
void* cuda_copy_stream_create() { none(); }
void cuda_copy_stream_destroy(void*) {}
void* cuda_record_compute_event() { none(); }
void cuda_copy_async(void*, void*, void*, const void*, size_t, int) { none(); }
void cuda_copy_sync(void*, const void*, size_t, int) { none(); }
#endif

}  // namespace zrepro
