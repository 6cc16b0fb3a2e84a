// trainer/report/report.h: memory growth per step (a leak is a slope) and its way through
// a rank's packed report.
#include "trainer/report/report.h"

#include <gtest/gtest.h>

namespace {

using namespace zrepro;

std::vector<StepRecord> steps(int n, int64_t activations_per_step) {
  std::vector<StepRecord> s(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    s[i].step = i;
    s[i].memory.by_category[static_cast<int>(MemCategory::params)] = 1000;
    s[i].memory.by_category[static_cast<int>(MemCategory::activations)] =
        (i == 0 ? 50000 : 0) + activations_per_step * i;  // step 0's first allocations: warm-up
    s[i].memory.allocated = 1000 + s[i].memory.by_category[static_cast<int>(MemCategory::activations)];
  }
  return s;
}

TEST(MemoryGrowth, IsTheSlopeOfEachCategoryAfterWarmUp) {
  const auto g = growth_per_step(steps(8, 4096));
  ASSERT_TRUE(g.has_value());
  EXPECT_NEAR((*g)[static_cast<int>(MemCategory::activations)], 4096, 1e-6);
  EXPECT_NEAR((*g)[static_cast<int>(MemCategory::params)], 0, 1e-9);
  EXPECT_NEAR((*g)[kNumMemCategories], 4096, 1e-6) << "the total";
  EXPECT_FALSE(growth_per_step(steps(kGrowthWarmupSteps + kGrowthMinSteps - 1, 4096)).has_value());
  EXPECT_TRUE(growth_per_step(steps(kGrowthWarmupSteps + kGrowthMinSteps, 0)).has_value());
}

TEST(MemoryGrowth, TravelsInTheRanksPackedReport) {
  TrainResult r;
  r.steps = steps(6, 512);
  const RankReport a = rank_report(1, r, MemorySnapshot{});
  const std::vector<double> packed = a.pack();
  ASSERT_EQ(packed.size(), static_cast<size_t>(RankReport::kPacked));
  const RankReport b = RankReport::unpack(packed.data());
  ASSERT_TRUE(b.growth.has_value());
  EXPECT_NEAR((*b.growth)[static_cast<int>(MemCategory::activations)], 512, 1e-6);
  r.steps.resize(2);
  EXPECT_FALSE(RankReport::unpack(rank_report(0, r, MemorySnapshot{}).pack().data()).growth.has_value());
  EXPECT_NEAR(rank_memory(b).growth_bytes_per_step.at("activations"), 512, 1e-6);
}

}  // namespace

// The run's closing memory line: the peak against the capacity, where it came, and the
// three largest categories at that moment, largest first.
TEST(PeakSummary, NamesThePeakItsPhaseStepAndLargestCategories) {
  MemorySnapshot m;
  m.capacity = 8LL << 30;
  m.peak = 2LL << 30;
  m.peak_phase = Phase::backward;
  m.by_category_at_peak[static_cast<int>(MemCategory::params)] = 300LL << 20;
  m.by_category_at_peak[static_cast<int>(MemCategory::activations)] = 1200LL << 20;
  m.by_category_at_peak[static_cast<int>(MemCategory::comm_buffers)] = 200LL << 20;
  m.by_category_at_peak[static_cast<int>(MemCategory::other)] = 1LL << 20;
  EXPECT_EQ(peak_summary(m, 3),
            "peak 2.00 GiB (25% of 8.00 GiB) in backward of step 3: activations 1.17 GiB, params 300.00 MiB, "
            "comm_buffers 200.00 MiB");
  m.capacity = 0;
  EXPECT_EQ(peak_summary(m, 0).rfind("peak 2.00 GiB in backward: activations", 0), 0u) << peak_summary(m, 0);
}
