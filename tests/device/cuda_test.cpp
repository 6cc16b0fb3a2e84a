// What needs a GPU, in-process: the caching allocator's memory fraction gives
// PyTorch's own OOM and reports the figures, pinned offload buffers are page-locked
// by cudaHostAlloc, and a copy between them and the device lands. Without a GPU each
// test skips and says why (a CPU LibTorch, or no device visible):
// scripts/gpu-check.sh runs them on a GPU machine.
#include <gtest/gtest.h>

#include "device/cuda_memory.h"
#include "offload/host_memory.h"

using namespace zrepro;

namespace {
// Empty when a GPU can run the test, else why not.
std::string no_gpu() {
  if (!cuda_memory_supported()) return "needs a GPU: this build's LibTorch is CPU-only (scripts/cuda-build.sh)";
  if (!torch::cuda::is_available()) return "needs a GPU: CUDA LibTorch, but no device is visible (scripts/gpu-check.sh)";
  return "";
}
}  // namespace

TEST(Cuda, CapacityGivesPyTorchsOwnOutOfMemory) {
  if (const std::string why = no_gpu(); !why.empty()) GTEST_SKIP() << why;
  const int64_t cap = int64_t{256} << 20;
  cuda_set_capacity(0, cap);
  torch::Tensor fits = torch::empty({cap / 8}, torch::TensorOptions().dtype(torch::kFloat).device(torch::kCUDA));
  const MemorySnapshot s = cuda_memory_snapshot(0);
  EXPECT_EQ(s.capacity, cap);
  EXPECT_GE(s.allocated, cap / 2);
  EXPECT_GE(s.peak, s.allocated);
  EXPECT_GE(s.reserved, s.allocated);
  bool oom = false;
  try {
    torch::Tensor too_big = torch::empty({cap / 2}, torch::TensorOptions().dtype(torch::kFloat).device(torch::kCUDA));
  } catch (const c10::Error& e) {
    oom = std::string(e.what()).find("out of memory") != std::string::npos;
  }
  EXPECT_TRUE(oom) << "an allocation over the capacity must fail with CUDA's out-of-memory error";
}

TEST(Cuda, PinnedOffloadBuffersArePageLockedAndCopyBothWays) {
  if (const std::string why = no_gpu(); !why.empty()) GTEST_SKIP() << why;
  HostMemory& hm = HostMemory::instance();
  const PinBackend before = hm.backend();
  hm.set_backend(PinBackend::cuda);
  torch::Tensor host = hm.empty(1 << 20, torch::kFloat, /*pinned=*/true, "test buffer");
  hm.set_backend(before);
  EXPECT_TRUE(host.is_pinned()) << "cudaHostAlloc memory must be page-locked as CUDA sees it";
  host.copy_(torch::arange(1 << 20, torch::kFloat));
  torch::Tensor dev = host.to(torch::kCUDA, /*non_blocking=*/true);
  torch::Tensor back = torch::empty_like(host);
  back.copy_(dev);
  torch::cuda::synchronize();
  EXPECT_TRUE(torch::equal(back, host));
}
