// DeepSpeed's loss-scaler semantics and the lr schedules, without a device.
#include <gtest/gtest.h>

#include "device/base/errors.h"
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

TEST(LrSchedule, WarmupCosineIsARatioOfTheOptimizersLr) {
  // DeepSpeed's WarmupCosineLR: 0 before the first step, warmup from
  // warmup_min_ratio to 1 over warmup_num_steps, then cosine down to cos_min_ratio
  // at total_num_steps, and it stays there.
  SchedulerConfig c;
  c.type = "WarmupCosineLR";
  c.warmup_num_steps = 10;
  c.warmup_type = "linear";
  c.warmup_min_ratio = 0.0;
  c.cos_min_ratio = 0.001;
  c.total_num_steps = 110;
  LrSchedule s(c, 2.0);
  EXPECT_DOUBLE_EQ(s.lr(), 0.0);
  EXPECT_DOUBLE_EQ(s.lr_at(5), 2.0 * 0.5);
  EXPECT_DOUBLE_EQ(s.lr_at(9), 2.0 * 0.9);
  EXPECT_NEAR(s.lr_at(59), 2.0 * (0.001 + 0.999 * 0.5), 1e-12);  // halfway through the cosine
  EXPECT_NEAR(s.lr_at(109), 2.0 * 0.001, 1e-12);
  EXPECT_NEAR(s.lr_at(500), 2.0 * 0.001, 1e-12);
}
