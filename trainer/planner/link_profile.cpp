// See link_profile.h. Link figures: measured pinned host-link bandwidths (PCIe gen4
// ~25 GB/s, gen5 ~50-55 GB/s pinned); compute: 40% of the dense bf16 peak.
#include "trainer/planner/link_profile.h"

#include <chrono>

#include "device/base/errors.h"

namespace zrepro {

const std::vector<LinkProfile>& link_profiles() {
  static const std::vector<LinkProfile> p = {
      {"a100-pcie4", 0.4 * 312, 25}, {"h100-pcie5", 0.4 * 989, 50}, {"h200-pcie5", 0.4 * 989, 55},
      {"l40s-pcie4", 0.4 * 362, 25}, {"gh200-c2c", 0.4 * 989, 450},
  };
  return p;
}

const LinkProfile& find_link_profile(const std::string& name) {
  std::string known;
  for (const auto& p : link_profiles()) {
    if (p.name == name) return p;
    known += (known.empty() ? "" : ", ") + p.name;
  }
  throw ConfigError("--host-link-profile: unknown profile \"" + name + "\", expected one of " + known +
                    " (or give --host-link-gbps directly)");
}

DerivedLink derive_link(const std::string& name, torch::ScalarType dtype, int64_t m, int64_t k, int64_t n) {
  DerivedLink d;
  d.profile = find_link_profile(name);
  // This machine's matmul throughput in the dtype the model computes in.
  torch::NoGradGuard no_grad;
  torch::Tensor a = torch::rand({m, k}).to(dtype), b = torch::rand({k, n}).to(dtype);
  torch::matmul(a, b);  // warm-up
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 4; ++i) torch::matmul(a, b);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 4);
  }
  d.cpu_gflops = 2.0 * static_cast<double>(m) * k * n / best / 1e9;
  d.link_gbps = d.cpu_gflops * (d.profile.link_gbps / (d.profile.achieved_tflops * 1e3));
  return d;
}

}  // namespace zrepro
