// Pure engine pieces: DeepSpeed loss-scaler semantics, lr schedules, the fused
// CPU Adam and the LibTorch-op Adam against LibTorch's own AdamW.
#include <gtest/gtest.h>

#include "device/errors.h"
#include "offload/cpu_adam.h"
#include "zero/loss_scaler.h"
#include "zero/lr_schedule.h"

using namespace zrepro;

TEST(LossScaler, OverflowUsesHysteresisThenHalves) {
  LossScaleConfig c;  // 2^16, hysteresis 2
  LossScaler s(c, true);
  EXPECT_EQ(s.scale(), 65536);
  EXPECT_EQ(s.update(true).kind, LossScaler::Event::hysteresis);
  EXPECT_EQ(s.scale(), 65536);
  auto ev = s.update(true);
  EXPECT_EQ(ev.kind, LossScaler::Event::reduced);
  EXPECT_EQ(ev.old_scale, 65536);
  EXPECT_EQ(s.scale(), 32768);
  EXPECT_EQ(s.update(true).kind, LossScaler::Event::reduced);  // hysteresis stays used up
  EXPECT_EQ(s.scale(), 16384);
}

TEST(LossScaler, GrowsAfterAWindowOfCleanSteps) {
  LossScaleConfig c;
  c.loss_scale_window = 4;
  c.hysteresis = 1;
  LossScaler s(c, true);
  s.update(true);  // iter 0 overflow -> 32768
  for (int i = 0; i < 3; ++i) EXPECT_EQ(s.update(false).kind, LossScaler::Event::none);
  EXPECT_EQ(s.update(false).kind, LossScaler::Event::grew);  // iter 4: 4 clean steps since the overflow
  EXPECT_EQ(s.scale(), 65536);
}

TEST(LossScaler, HysteresisResetsOnlyAtGrowthUnlessConsecutive) {
  LossScaleConfig c;
  c.loss_scale_window = 100;
  LossScaler s(c, true);
  s.update(true);  // hysteresis 2 -> 1
  s.update(false);
  EXPECT_EQ(s.hysteresis_left(), 1);
  c.consecutive_hysteresis = true;
  LossScaler k(c, true);
  k.update(true);
  k.update(false);
  EXPECT_EQ(k.hysteresis_left(), 2);
}

TEST(LossScaler, OverflowAtMinimumIsANumericalError) {
  LossScaleConfig c;
  c.initial_scale_power = 2;
  c.hysteresis = 1;
  c.min_loss_scale = 1;
  LossScaler s(c, true);
  s.update(true);  // 4 -> 2
  s.update(true);  // 2 -> 1
  try {
    s.update(true);
    FAIL();
  } catch (const NumericalError& e) {
    EXPECT_NE(std::string(e.what()).find("Current loss scale already at minimum"), std::string::npos);
  }
}

TEST(LossScaler, StaticAndDisabledScalesNeverChange) {
  LossScaleConfig c;
  c.loss_scale = 128;
  LossScaler st(c, true);
  EXPECT_FALSE(st.dynamic());
  EXPECT_EQ(st.update(true).kind, LossScaler::Event::none);
  EXPECT_EQ(st.scale(), 128);
  LossScaler off(LossScaleConfig{}, false);
  EXPECT_EQ(off.scale(), 1);
}

TEST(LrSchedule, WarmupLogLinearAndDecay) {
  SchedulerConfig c;
  c.type = "WarmupLR";
  c.warmup_min_lr = 0.0;
  c.warmup_max_lr = 1.0;
  c.warmup_num_steps = 10;
  LrSchedule log(c, 5.0);
  EXPECT_DOUBLE_EQ(log.lr(), 0.0);  // iteration -1: warmup_min_lr
  EXPECT_DOUBLE_EQ(log.lr_at(0), 0.0);
  EXPECT_NEAR(log.lr_at(4), std::log(5.0) / std::log(10.0), 1e-12);
  EXPECT_DOUBLE_EQ(log.lr_at(10), 1.0);
  EXPECT_DOUBLE_EQ(log.lr_at(1000), 1.0);
  c.warmup_type = "linear";
  EXPECT_DOUBLE_EQ(LrSchedule(c, 5.0).lr_at(5), 0.5);
  c.type = "WarmupDecayLR";
  c.total_num_steps = 20;
  LrSchedule decay(c, 5.0);
  EXPECT_DOUBLE_EQ(decay.lr_at(15), 0.5);
  EXPECT_DOUBLE_EQ(decay.lr_at(25), 0.0);
  SchedulerConfig none;
  EXPECT_DOUBLE_EQ(LrSchedule(none, 5.0).lr_at(3), 5.0);
}

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
