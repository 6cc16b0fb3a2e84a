// See cuda_memory.h. The only file that includes LibTorch's CUDA headers; it uses
// the caching-allocator API that LibTorch 2.x keeps stable (setMemoryFraction,
// getDeviceStats with an AGGREGATE stat at index 0).
#include "device/cuda_memory.h"

#include <algorithm>
#include <mutex>

#include "device/base/errors.h"

#ifdef ZREPRO_TORCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda_runtime_api.h>
#endif

namespace zrepro {

#ifdef ZREPRO_TORCH_CUDA
namespace {
int64_t g_capacity = 0;  // the capacity a run set (0: the whole device)
// [Note: phase peaks] on CUDA. Phase changes come from the watched ledger's thread only.
std::mutex g_mu;
int g_watch_device = -1, g_watch_owner = 0;
Phase g_phase = Phase::init;
PhasePeaks g_phases;                          // peaks of the phases up to the last reset
int64_t g_peak = 0, g_peak_reserved = 0;      // the run's, across resets
}  // namespace

void cuda_init(int device) {
  if (device < 0 && cudaGetDevice(&device) != cudaSuccess) device = 0;
  // One 4-byte tensor: LibTorch's lazy CUDA initialisation, context and allocator.
  torch::empty({1}, torch::TensorOptions().device(torch::kCUDA, static_cast<c10::DeviceIndex>(device)));
}

void cuda_watch_phases(int device, int owner) {
  cuda_init(device);  // getDeviceStats throws "Invalid device argument" before it
  std::lock_guard<std::mutex> lock(g_mu);
  g_watch_device = device;
  g_watch_owner = owner;
  g_phase = Phase::init;
  g_phases = {};
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device));
  g_peak = stats.allocated_bytes[0].peak;
  g_peak_reserved = stats.reserved_bytes[0].peak;
  g_phases.note(Phase::init, g_peak, g_peak_reserved);
}

void cuda_phase_changed(Phase from, Phase to, int owner) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_watch_device < 0 || owner != g_watch_owner) return;
  const auto dev = static_cast<c10::DeviceIndex>(g_watch_device);
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(dev);
  const int64_t peak = stats.allocated_bytes[0].peak, peak_reserved = stats.reserved_bytes[0].peak;
  g_phases.note(from, peak, peak_reserved);
  g_peak = std::max(g_peak, peak);
  g_peak_reserved = std::max(g_peak_reserved, peak_reserved);
  c10::cuda::CUDACachingAllocator::resetPeakStats(dev);
  g_phase = to;
  g_phases.note(to, stats.allocated_bytes[0].current, stats.reserved_bytes[0].current);
}

bool cuda_memory_supported() { return true; }

void cuda_set_capacity(int device, int64_t bytes) {
  cuda_init(device);  // setMemoryFraction throws "Allocator not initialized for device" before it
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
  s.alloc_retries = stats.num_alloc_retries;  // the count DeepSpeed's ZeRO-3 step reads
  std::lock_guard<std::mutex> lock(g_mu);
  if (device == g_watch_device) {
    s.phases = g_phases;
    s.phases.note(g_phase, s.peak, s.peak_reserved);
    s.peak = std::max(s.peak, g_peak);
    s.peak_reserved = std::max(s.peak_reserved, g_peak_reserved);
    s.peak_phase = static_cast<Phase>(
        std::max_element(s.phases.allocated.begin(), s.phases.allocated.end()) - s.phases.allocated.begin());
  }
  return s;
}
#else
bool cuda_memory_supported() { return false; }

void cuda_set_capacity(int, int64_t) {
  throw ConfigError("a capacity on a CUDA device needs zrepro built against a CUDA LibTorch (this build's "
                    "LibTorch is CPU-only); use the CPU-emulated device");
}

MemorySnapshot cuda_memory_snapshot(int) { return {}; }

void cuda_init(int) {}
void cuda_watch_phases(int, int) {}
void cuda_phase_changed(Phase, Phase, int) {}
#endif

MemorySnapshot device_memory_snapshot(const c10::Device& device) {
  if (device.is_cuda()) return cuda_memory_snapshot(device.has_index() ? device.index() : 0);
  return DeviceMemory::instance().snapshot();
}

}  // namespace zrepro
