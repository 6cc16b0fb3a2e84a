// Per-rank config comparison: each differing key named with the odd rank's value and
// the others'.
#include <gtest/gtest.h>

#include "trainer/config/rank_configs.h"

using namespace zrepro;
using json = nlohmann::json;

TEST(RankConfigs, NamesEachDifferingKeyWithBothValues) {
  const json a = {{"train_micro_batch_size_per_gpu", 2}, {"gradient_accumulation_steps", 1},
                  {"zero_optimization", {{"stage", 2}}}};
  json b = a;
  b["gradient_accumulation_steps"] = 2;
  EXPECT_TRUE(config_mismatch({a, a, a}).empty());
  const auto lines = config_mismatch({a, b, a});
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "rank 1: gradient_accumulation_steps=2, others 1");
  json c = a;
  c["zero_optimization"]["stage"] = 3;
  c["fp16"] = {{"enabled", true}};
  const auto more = config_mismatch({a, a, c, c, a});
  ASSERT_EQ(more.size(), 2u);
  EXPECT_EQ(more[0], "rank 2, 3: fp16.enabled=true, others (unset)");
  EXPECT_EQ(more[1], "rank 2, 3: zero_optimization.stage=3, others 2");
}
