// The device a rank trains on: the CPU (emulated device) or a CUDA GPU, chosen
// from --device, with a clear error when CUDA is asked for but not present.
#pragma once
#include <string>

#include <torch/torch.h>

namespace zrepro {

struct DeviceInfo {
  torch::Device device = torch::kCPU;
  std::string description;  // "cpu (2 cores, 1 intra-op thread)" or "cuda:0 (NVIDIA H200)"
  bool is_cuda() const { return device.is_cuda(); }
};

// kind: "cpu" | "cuda". local_rank picks the GPU (ranks share GPUs round-robin).
// Throws ConfigError when the kind is unknown or CUDA is unavailable (the message
// names the kind, not a flag: callers add which option gave it).
DeviceInfo select_device(const std::string& kind, int local_rank);

// Seconds since the epoch (wall clock shared by ranks on a node: traces, flight records).
double wall_seconds();

// One intra-op thread per rank when ranks share cores (LibTorch and OpenBLAS).
void set_compute_threads(int threads);

}  // namespace zrepro
