// Host-link profiles for the offload copy engine (docs/design/ARCHITECTURE.md: emulate ratios; keep the
// ratio of compute to host-link bandwidth of the target). A profile names a GPU and
// its link: dense bf16 throughput a training step achieves there (40% of peak, a
// typical MFU) and the measured pinned host-to-device bandwidth. On the CPU-emulated
// device the modelled link is this machine's measured matmul throughput times the
// target's bytes per flop, so a copy takes the same share of a step as on the target.
// The CPU figure is measured on the model's own MLP matmul ([tokens, h] x [h, I] of
// one micro-batch), the op that dominates its step, in the run's compute dtype.
#pragma once
#include <string>
#include <vector>

#include <torch/torch.h>

namespace zrepro {

struct LinkProfile {
  std::string name;
  double achieved_tflops;  // dense bf16 at ~40% MFU
  double link_gbps;        // pinned H2D
};
const std::vector<LinkProfile>& link_profiles();
const LinkProfile& find_link_profile(const std::string& name);  // throws ConfigError

struct DerivedLink {
  LinkProfile profile;
  double cpu_gflops = 0;   // measured here, in the run's compute dtype
  double link_gbps = 0;    // the modelled link for this machine
};
DerivedLink derive_link(const std::string& profile, torch::ScalarType compute_dtype, int64_t tokens, int64_t hidden,
                        int64_t intermediate);

}  // namespace zrepro
