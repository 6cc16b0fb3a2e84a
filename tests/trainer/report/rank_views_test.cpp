// Every rank's view of a multi-rank failure merged into one summary ([Note: every rank's view]).
#include <gtest/gtest.h>

#include "trainer/report/rank_views.h"

using namespace zrepro;
using json = nlohmann::json;

namespace {
json view(int rank, const std::string& phase, int64_t allocated) {
  return {{"status", "oom"},
          {"world_size", 4},
          {"failure", {{"kind", "oom"}, {"rank", rank}, {"phase", phase}, {"message", "CUDA out of memory"},
                       {"allocated_bytes", allocated}, {"capacity_bytes", 1000}}},
          {"memory", {{"device_capacity_bytes", 1000},
                      {"ranks", {{{"rank", rank}, {"peak_bytes", allocated}}}}}}};
}
}  // namespace

TEST(RankViews, TheLowestRanksViewIsTheBaseAndEveryViewIsListed) {
  // Rank 0 was ended before it wrote (mpirun stops the others), ranks 1 and 3 wrote theirs.
  const json merged = merge_rank_views({nullptr, view(1, "forward", 900), nullptr, view(3, "backward", 950)}, 4);
  EXPECT_EQ(merged["failure"]["rank"], 1);
  EXPECT_EQ(merged["failure"]["ranks_reported"], json({1, 3}));
  EXPECT_EQ(merged["failure"]["ranks_without_a_view"], json({0, 2}));
  ASSERT_EQ(merged["failure"]["ranks"].size(), 2u);
  EXPECT_EQ(merged["failure"]["ranks"][1]["rank"], 3);
  EXPECT_EQ(merged["failure"]["ranks"][1]["phase"], "backward");
  EXPECT_EQ(merged["failure"]["ranks"][1]["allocated_bytes"], 950);
  ASSERT_EQ(merged["memory"]["ranks"].size(), 2u);
  EXPECT_EQ(merged["memory"]["ranks"][0]["rank"], 1);
  EXPECT_EQ(merged["memory"]["ranks"][1]["peak_bytes"], 950);
}

TEST(RankViews, NoViewNoSummary) { EXPECT_TRUE(merge_rank_views({nullptr, nullptr}, 2).is_null()); }
