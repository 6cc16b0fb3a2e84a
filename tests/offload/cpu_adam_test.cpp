// The fused CPU Adam and the LibTorch-op Adam against LibTorch's own AdamW.
#include <gtest/gtest.h>

#include "device/base/errors.h"
#include "offload/cpu_adam.h"
#include "zero/loss_scaler.h"
#include "zero/lr_schedule.h"

using namespace zrepro;

namespace {
// Runs `steps` AdamW steps with LibTorch's optimizer and with `ours`, same grads.
template <class Step>
double max_rel_diff_vs_torch_adamw(int64_t n, int steps, bool adam_w_mode, Step ours) {
  torch::manual_seed(n);
  torch::Tensor p0 = torch::randn({n});
  AdamHyper h{1e-2, 0.9, 0.95, 1e-8, 0.1, adam_w_mode, true};
  torch::Tensor ref = p0.clone().requires_grad_(true);
  std::unique_ptr<torch::optim::Optimizer> opt;
  if (adam_w_mode)
    opt = std::make_unique<torch::optim::AdamW>(
        std::vector<torch::Tensor>{ref},
        torch::optim::AdamWOptions(h.lr).betas({h.beta1, h.beta2}).eps(h.eps).weight_decay(h.weight_decay));
  else
    opt = std::make_unique<torch::optim::Adam>(
        std::vector<torch::Tensor>{ref},
        torch::optim::AdamOptions(h.lr).betas({h.beta1, h.beta2}).eps(h.eps).weight_decay(h.weight_decay));
  torch::Tensor p = p0.clone(), m = torch::zeros({n}), v = torch::zeros({n});
  for (int s = 1; s <= steps; ++s) {
    torch::Tensor g = torch::randn({n});
    ref.mutable_grad() = g.clone();
    opt->step();
    ours(p, g, m, v, h, s);
  }
  return ((p - ref.detach()).abs() / (ref.detach().abs() + 1e-3)).max().item<double>();
}
}  // namespace

TEST(CpuAdam, MatchesLibTorchAdamWOverManyStepsAndOddSizes) {
  for (int64_t n : {1, 7, 8191, 8193, 100003}) {
    EXPECT_LT(max_rel_diff_vs_torch_adamw(n, 50, true, [](auto& p, auto& g, auto& m, auto& v, auto& h, int s) {
                cpu_adam_step(p, g, m, v, h, s);
              }),
              1e-4)
        << "n=" << n;
  }
}

TEST(CpuAdam, L2ModeMatchesLibTorchAdam) {
  EXPECT_LT(max_rel_diff_vs_torch_adamw(4099, 30, false, [](auto& p, auto& g, auto& m, auto& v, auto& h, int s) {
              cpu_adam_step(p, g, m, v, h, s);
            }),
            1e-4);
}

TEST(CpuAdam, TorchOpAdamMatchesToo) {
  EXPECT_LT(max_rel_diff_vs_torch_adamw(1000, 30, true, [](auto& p, auto& g, auto& m, auto& v, auto& h, int s) {
              torch_adam_step(p, g, m, v, h, s);
            }),
            1e-4);
}

TEST(CpuAdam, WritesTheHalfCopyInTheSamePass) {
  torch::Tensor p = torch::randn({9000}), g = torch::randn({9000}), m = torch::zeros({9000}), v = torch::zeros({9000});
  torch::Tensor bf = torch::empty({9000}, torch::kBFloat16), hf = torch::empty({9000}, torch::kHalf);
  cpu_adam_step(p, g, m, v, AdamHyper{}, 1, bf);
  EXPECT_TRUE(torch::equal(bf, p.to(torch::kBFloat16)));
  cpu_adam_step(p, g, m, v, AdamHyper{}, 2, hf);
  EXPECT_TRUE(torch::equal(hf, p.to(torch::kHalf)));
  EXPECT_THROW(cpu_adam_step(p, g, m, v, AdamHyper{}, 3, torch::empty({5}, torch::kHalf)), std::invalid_argument);
}

// [Note: vectorised Adam]: the dispatched kernel (AVX-512 / AVX2 / baseline clone, OpenMP
// tiles) and the scalar reference perform the same IEEE operations, so they agree bit for
// bit, fp32 state and the bf16 copy (NaN included), in AdamW
// and L2 mode, on sizes that are not a multiple of the vector width or the tile.
TEST(CpuAdam, VectorisedEqualsTheScalarReferenceExactly) {
  for (bool adam_w : {true, false})
    for (int64_t n : {int64_t{1}, int64_t{17}, int64_t{8192}, int64_t{8192 * 3 + 5}}) {
      torch::manual_seed(n);
      torch::Tensor p = torch::randn({n}), m = torch::randn({n}).abs() * 0.01, v = torch::rand({n}) * 0.01;
      p[0] = std::nanf("");  // NaN propagates to the bf16 copy as c10 rounds it (0x7FC0)
      torch::Tensor p2 = p.clone(), m2 = m.clone(), v2 = v.clone();
      torch::Tensor b1 = torch::empty({n}, torch::kBFloat16), b2 = torch::empty({n}, torch::kBFloat16);
      AdamHyper h{1e-2, 0.9, 0.95, 1e-8, 0.1, adam_w, true};
      for (int step = 1; step <= 5; ++step) {
        torch::Tensor g = torch::randn({n});
        cpu_adam_step(p, g, m, v, h, step);  // without the copy
        cpu_adam_step_reference(p2, g, m2, v2, h, step);
        cpu_adam_step(p, g, m, v, h, step, b1);
        cpu_adam_step_reference(p2, g, m2, v2, h, step, b2);
      }
      const auto bits = [](const torch::Tensor& t) { return t.view(t.scalar_type() == torch::kFloat ? torch::kInt : torch::kShort); };
      EXPECT_TRUE(torch::equal(bits(p), bits(p2))) << "n=" << n << " adam_w=" << adam_w;
      EXPECT_TRUE(torch::equal(bits(m), bits(m2))) << "n=" << n;
      EXPECT_TRUE(torch::equal(bits(v), bits(v2))) << "n=" << n;
      EXPECT_TRUE(torch::equal(bits(b1), bits(b2))) << "n=" << n;
      EXPECT_TRUE(std::isnan(b1[0].item<float>()));  // (LibTorch's own conversion may keep the NaN's sign)
      EXPECT_TRUE(torch::equal(bits(b1).narrow(0, 1, n - 1), bits(p.to(torch::kBFloat16)).narrow(0, 1, n - 1)))
          << "n=" << n << ": the bf16 copy is LibTorch's rounding";
    }
}
