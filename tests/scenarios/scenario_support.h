// Shared by the scenario tests: a scenario folder's config text, `zrepro run` of a
// config in a fresh folder, and the fragmentation scenario's precondition on this CPU.
#pragma once
#include <string>

#include "device/device_memory.h"
#include "tests/support/process.h"

namespace scenario_test {

using zrepro_test::expect_same_losses;
using zrepro_test::RunResult;

inline std::string scenario(const std::string& name, const std::string& file = "ds_config.json") {
  return zrepro_test::read_text(std::string(ZREPRO_SOURCE_DIR) + "/configs/scenarios/" + name + "/" + file);
}
inline RunResult run(const std::string& name, const std::string& cfg, const std::string& args) {
  return zrepro_test::zrepro_run(name, cfg, args);
}

// Bytes a bf16 matmul of the scenario's shape allocates beyond its own output on this
// CPU. Where LibTorch's bf16 GEMM goes through oneDNN it allocates reorder buffers
// whose sizes follow the (dynamic) sequence length; those small, varying blocks are
// what strands reserved memory in the caching emulation. Without native bf16 (e.g.
// no AVX512-BF16) the GEMM allocates nothing extra and the scenario cannot happen.
inline int64_t bf16_matmul_scratch_bytes() {
  zrepro::DeviceMemory& mem = zrepro::DeviceMemory::instance();
  mem.install(0);
  const torch::Tensor a = torch::ones({8 * 100, 256}, torch::kBFloat16), b = torch::ones({256, 1024}, torch::kBFloat16);
  mem.reset_peaks();
  const int64_t base = mem.snapshot().allocated;
  const torch::Tensor c = torch::matmul(a, b);
  return mem.snapshot().peak - base - static_cast<int64_t>(c.numel() * c.element_size());
}


}  // namespace scenario_test
