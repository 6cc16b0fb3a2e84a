// Every rank's view of a multi-rank failure merged into one summary ([Note: every rank's view]).
#include <gtest/gtest.h>

#include "trainer/report/rank_views.h"

using namespace zrepro;
using json = nlohmann::json;

namespace {
std::optional<Summary> view(int rank, const std::string& phase, int64_t allocated) {
  return Summary::from_json(
      {{"status", "oom"},
       {"world_size", 4},
       {"failure", {{"kind", "oom"}, {"rank", rank}, {"phase", phase}, {"message", "CUDA out of memory"},
                    {"checkpoint", "oom-phase"}, {"hint", "h"}, {"allocated_bytes", allocated}, {"capacity_bytes", 1000}}},
       {"memory", {{"device_capacity_bytes", 1000},
                   {"ranks", {{{"rank", rank}, {"peak_bytes", allocated}, {"peak_phase", phase}, {"peak_reserved_bytes", 0},
                               {"by_category", json::object()}, {"category_peaks", json::object()},
                               {"model_states", json::object()}, {"phases", json::array()}, {"host_pinned_bytes", 0},
                               {"host_pageable_bytes", 0}, {"comm_wait_s", 0.0}}}}}}});
}
}  // namespace

TEST(RankViews, TheLowestRanksViewIsTheBaseAndEveryViewIsListed) {
  // Rank 0 was ended before it wrote (mpirun stops the others), ranks 1 and 3 wrote theirs.
  const auto merged = merge_rank_views({std::nullopt, view(1, "forward", 900), std::nullopt, view(3, "backward", 950)}, 4);
  ASSERT_TRUE(merged && merged->failure && merged->failure->views);
  EXPECT_EQ(merged->failure->rank, 1);
  const SummaryRankViews& v = *merged->failure->views;
  EXPECT_EQ(v.reported, (std::vector<int>{1, 3}));
  EXPECT_EQ(v.without_a_view, (std::vector<int>{0, 2}));
  ASSERT_EQ(v.ranks.size(), 2u);
  EXPECT_EQ(v.ranks[1].rank, 3);
  EXPECT_EQ(v.ranks[1].phase, "backward");
  EXPECT_EQ(v.ranks[1].allocated_bytes, 950);
  ASSERT_EQ(merged->memory->ranks.size(), 2u);
  EXPECT_EQ(merged->memory->ranks[0].rank, 1);
  EXPECT_EQ(merged->memory->ranks[1].peak_bytes, 950);
  // The file's shape: the views sit beside the failure's own fields, and come back the same.
  const json j = merged->to_json();
  EXPECT_EQ(j["failure"]["ranks_reported"], json({1, 3}));
  EXPECT_EQ(j["failure"]["ranks"][1]["allocated_bytes"], 950);
  EXPECT_EQ(j["failure"]["allocated_bytes"], 900);
  EXPECT_EQ(Summary::from_json(j).to_json(), j);
}

// [Note: the cause is the headline]: rank 0, interrupted because rank 1 vanished, is listed
// with its status; rank 1's own failure (issue 61 item 6: a damaged file only it read) is the
// summary's headline. Every view an interruption: the lowest rank's.
TEST(RankViews, AViewWithoutAFailureIsListedWithItsStatus) {
  auto ok = Summary::from_json({{"status", "interrupted"}});
  const auto merged = merge_rank_views({ok, view(1, "forward", 900)}, 2);
  ASSERT_TRUE(merged && merged->failure && merged->failure->views);
  EXPECT_EQ(merged->status, "oom");
  EXPECT_EQ(merged->failure->rank, 1);
  EXPECT_EQ(merge_rank_views({ok, ok}, 2)->status, "interrupted");
  EXPECT_EQ(merged->failure->views->ranks[0].status, "interrupted");
  EXPECT_FALSE(merged->failure->views->ranks[0].kind);
  const json j = merged->to_json();
  EXPECT_EQ(Summary::from_json(j).to_json(), j);
}

TEST(RankViews, NoViewNoSummary) { EXPECT_FALSE(merge_rank_views({std::nullopt, std::nullopt}, 2)); }
