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
  EXPECT_NEAR(memory_rank_json(b)["growth_bytes_per_step"]["activations"].get<double>(), 512, 1e-6);
}

}  // namespace
