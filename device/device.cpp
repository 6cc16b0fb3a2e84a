// See device.h.
#include "device/device.h"

#include <chrono>
#include <thread>

#include "device/base/errors.h"
#include "device/cuda_memory.h"

namespace zrepro {

DeviceInfo select_device(const std::string& kind, int local_rank) {
  DeviceInfo info;
  if (kind == "cpu") {
    info.device = torch::kCPU;
    info.description = "cpu (" + std::to_string(std::thread::hardware_concurrency()) + " cores, " +
                       std::to_string(torch::get_num_threads()) + " intra-op thread(s))";
    return info;
  }
  if (kind == "cuda") {
    if (!torch::cuda::is_available())
      throw ConfigError("cuda: no CUDA device is usable (this LibTorch has no CUDA support or no GPU is present). "
                        "Use the cpu device, or build against a CUDA LibTorch on a GPU machine");
    const int n = static_cast<int>(torch::cuda::device_count());
    info.device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank % n));
    info.description = "cuda:" + std::to_string(local_rank % n);
    cuda_watch_phases(local_rank % n, DeviceMemory::owner());  // [Note: phase peaks]
    return info;
  }
  throw ConfigError("got \"" + kind + "\", expected cpu or cuda");
}

void set_compute_threads(int threads) {
  torch::set_num_threads(threads);
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace zrepro
