// See cuda_memory.h. The only file that includes LibTorch's CUDA headers; it uses
// the caching-allocator API that LibTorch 2.x keeps stable (setMemoryFraction,
// getDeviceStats with an AGGREGATE stat at index 0).
#include "device/cuda_memory.h"

#include "device/base/errors.h"

#ifdef ZREPRO_TORCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda_runtime_api.h>
#endif

namespace zrepro {

#ifdef ZREPRO_TORCH_CUDA
namespace {
int64_t g_capacity = 0;  // the capacity a run set (0: the whole device)
}

bool cuda_memory_supported() { return true; }

void cuda_set_capacity(int device, int64_t bytes) {
  size_t free_b = 0, total = 0;
  if (cudaSetDevice(device) != cudaSuccess || cudaMemGetInfo(&free_b, &total) != cudaSuccess)
    throw ConfigError("cannot query cuda:" + std::to_string(device));
  if (bytes > static_cast<int64_t>(total))
    throw ConfigError(format_bytes(bytes) + " is more than cuda:" + std::to_string(device) +
                      " has (" + format_bytes(static_cast<int64_t>(total)) + ")");
  g_capacity = bytes;
  c10::cuda::CUDACachingAllocator::setMemoryFraction(static_cast<double>(bytes) / static_cast<double>(total),
                                                     static_cast<c10::DeviceIndex>(device));
}

MemorySnapshot cuda_memory_snapshot(int device) {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device));
  MemorySnapshot s;
  s.capacity = g_capacity;
  s.allocated = stats.allocated_bytes[0].current;
  s.peak = stats.allocated_bytes[0].peak;
  s.reserved = stats.reserved_bytes[0].current;
  s.peak_reserved = stats.reserved_bytes[0].peak;
  return s;
}
#else
bool cuda_memory_supported() { return false; }

void cuda_set_capacity(int, int64_t) {
  throw ConfigError("a capacity on a CUDA device needs zrepro built against a CUDA LibTorch (this build's "
                    "LibTorch is CPU-only); use the CPU-emulated device");
}

MemorySnapshot cuda_memory_snapshot(int) { return {}; }
#endif

MemorySnapshot device_memory_snapshot(const c10::Device& device) {
  if (device.is_cuda()) return cuda_memory_snapshot(device.has_index() ? device.index() : 0);
  return DeviceMemory::instance().snapshot();
}

}  // namespace zrepro
