// trainer/loop/calibration.h: the calibration kernel timed between steps under its budget,
// and the medians and spreads the summary keeps.
#include "trainer/loop/calibration.h"

#include <gtest/gtest.h>

namespace {

using namespace zrepro;

TEST(Calibration, SpreadIsTheInterquartileRangeOverTheMedian) {
  EXPECT_FALSE(spread_of({}).has_value());
  const Spread s = *spread_of({5, 1, 3, 2, 4});  // q1 2, median 3, q3 4
  EXPECT_DOUBLE_EQ(s.median, 3);
  EXPECT_DOUBLE_EQ(s.rel_spread, 2.0 / 3);
  EXPECT_EQ(s.n, 5);
  EXPECT_DOUBLE_EQ(spread_of({7})->rel_spread, 0);
}

// Step 0 is warm-up; then at least kMinSamples samples, and past them only while the
// samples cost at most kBudget of the steps' time.
TEST(Calibration, SamplesAreTakenUnderTheirBudget) {
  StepCalibration slow_steps, fast_steps;
  for (int64_t step = 0; step < 40; ++step) {
    slow_steps.after_step(step, 10.0);   // a sample (about 20 ms) is always within 10%
    fast_steps.after_step(step, 1e-9);   // never within it
  }
  EXPECT_EQ(slow_steps.samples().size(), 39u);
  EXPECT_EQ(fast_steps.samples().size(), static_cast<size_t>(StepCalibration::kMinSamples));
  for (double t : slow_steps.samples()) EXPECT_GT(t, 0);
  StepCalibration none;
  none.after_step(0, 1.0);
  EXPECT_TRUE(none.samples().empty());
  EXPECT_TRUE(none.to_json({1.0}).is_null());
}

TEST(Calibration, TheSummaryFiguresLeaveTheWarmUpStepOut) {
  StepCalibration c;
  for (int64_t step = 0; step < 6; ++step) c.after_step(step, 10.0);
  const nlohmann::json j = c.to_json({100.0, 0.2, 0.2, 0.2, 0.2, 0.2});
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["steps"], 5);
  EXPECT_DOUBLE_EQ(j["step_s_median"].get<double>(), 0.2);
  EXPECT_DOUBLE_EQ(j["step_spread"].get<double>(), 0);
  EXPECT_EQ(j["samples"], 5);
  EXPECT_NEAR(j["step_over_calibration"].get<double>(), 0.2 / j["median_s"].get<double>(), 1e-9);
  EXPECT_EQ(j["kernel"], calibration_kernel());
}

}  // namespace
