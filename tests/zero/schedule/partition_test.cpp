// Sharding arithmetic without a communicator: stage 1/2 flat partitions with
// straddling parameters, stage 3 per-parameter padding, buckets, the stage-3 reuse rule.
#include <gtest/gtest.h>

#include <numeric>

#include "trainer/report/hang.h"
#include "zero/comm/communicator.h"
#include "zero/schedule/partition.h"

using namespace zrepro;

TEST(Partition, FlatIsPaddedToTwiceWorldSizeAndSplitEqually) {
  for (int ws = 1; ws <= 8; ++ws)
    for (int64_t n : {1, 7, 16, 49984, 100003}) {
      FlatPartition p = partition_flat(n, ws);
      EXPECT_EQ(p.padded_numel % (2 * ws), 0);
      EXPECT_GE(p.padded_numel, n);
      EXPECT_LT(p.padded_numel - n, 2 * ws);
      EXPECT_EQ(p.partition_numel * ws, p.padded_numel);
    }
}

TEST(Partition, SegmentsCoverEveryParameterOnceAndMayStraddle) {
  const std::vector<int64_t> numels = {5, 13, 1, 30, 7};  // 56 elements
  for (int ws = 1; ws <= 8; ++ws) {
    FlatPartition p = partition_flat(56, ws);
    std::vector<int64_t> covered(numels.size(), 0);
    int straddling = 0;
    for (int r = 0; r < ws; ++r) {
      int64_t expect_off = 0;
      for (const auto& s : partition_segments(numels, p, r)) {
        EXPECT_GE(s.partition_offset, expect_off);  // in order, no overlap
        expect_off = s.partition_offset + s.numel;
        EXPECT_LE(expect_off, p.partition_numel);
        covered[s.param] += s.numel;
        if (s.param_offset > 0) ++straddling;
      }
    }
    for (size_t i = 0; i < numels.size(); ++i) EXPECT_EQ(covered[i], numels[i]) << "ws " << ws;
    if (ws >= 3) {
      EXPECT_GT(straddling, 0) << "some parameter must straddle partitions at ws " << ws;
    }
  }
  // A concrete case: 56 elements on 4 ranks -> padded 56, partition 14; param 1
  // (offset 5, 13 long) straddles ranks 0 and 1.
  auto r0 = partition_segments(numels, partition_flat(56, 4), 0);
  ASSERT_EQ(r0.size(), 2u);
  EXPECT_EQ(r0[1].param, 1);
  EXPECT_EQ(r0[1].numel, 9);
  auto r1 = partition_segments(numels, partition_flat(56, 4), 1);
  EXPECT_EQ(r1[0].param, 1);
  EXPECT_EQ(r1[0].param_offset, 9);
  EXPECT_EQ(r1[0].numel, 4);
}

TEST(Partition, Stage3PadsEachParameterToWorldSize) {
  const std::vector<int64_t> numels = {5, 8, 1, 30};
  for (int ws = 1; ws <= 8; ++ws) {
    ShardLayout l = partition_params(numels, ws);
    int64_t shard = 0, full = 0;
    for (size_t i = 0; i < numels.size(); ++i) {
      const auto& p = l.params[i];
      EXPECT_EQ(p.padded_numel % ws, 0);
      EXPECT_LT(p.padded_numel - numels[i], ws);
      EXPECT_EQ(p.slice_numel * ws, p.padded_numel);
      EXPECT_EQ(p.shard_offset, shard);
      EXPECT_EQ(p.full_offset, full);
      shard += p.slice_numel;
      full += p.padded_numel;
    }
    EXPECT_EQ(l.shard_numel * ws, l.full_numel);
  }
  EXPECT_EQ(partition_params({5}, 4).params[0].slice_numel, 2);  // 5 -> 8 -> 2 per rank
}

TEST(Partition, BucketsPackUnitsInOrderAndSplitLargeOnes) {
  // Unit slices 10, 3, 25 on 2 ranks, bucket 16 elements -> 8 per rank.
  auto b = make_buckets({10, 3, 25}, 16, 2);
  int64_t total = 0;
  for (const auto& k : b) {
    EXPECT_LE(k.numel_per_rank, 8);
    int64_t sum = 0;
    for (const auto& p : k.pieces) sum += p.numel;
    EXPECT_EQ(sum, k.numel_per_rank);
    total += k.numel_per_rank;
  }
  EXPECT_EQ(total, 38);
  EXPECT_EQ(b.size(), 5u);  // 38 / 8 rounded up
  EXPECT_EQ(b[0].pieces.size(), 1u);
  EXPECT_EQ(b[1].pieces.size(), 3u);  // rest of unit 0 (2), unit 1 (3), start of unit 2 (3)
  EXPECT_EQ(b[1].pieces[2].unit, 2);
  // Default DeepSpeed buckets (5e8) hold a small model in one bucket.
  EXPECT_EQ(make_buckets({10, 3, 25}, 500000000, 4).size(), 1u);
  // A bucket smaller than the world size still makes progress: one element per rank.
  EXPECT_EQ(make_buckets({3}, 1, 4).size(), 3u);
}

TEST(Partition, Stage3ReuseRule) {
  // Trace of a 3-layer model: forward 0 1 2, backward 2 1 0.
  const std::vector<int> trace = {0, 1, 2, 2, 1, 0};
  const std::vector<int64_t> numel = {100, 1000, 100};
  // After layer 2's forward (next position 3), it is used right away again.
  EXPECT_TRUE(reused_within(trace, 3, 2, numel, 1));
  EXPECT_FALSE(reused_within(trace, 3, 2, numel, 0));  // distance 0 releases everything
  // Layer 0 after its forward: used again after 100 + 1000 + 100 + 100 + 1000 elements.
  EXPECT_FALSE(reused_within(trace, 1, 0, numel, 2000));
  EXPECT_TRUE(reused_within(trace, 1, 0, numel, 2301));
  EXPECT_TRUE(reused_within(trace, 1, 0, numel, 1000000000));  // DeepSpeed's default keeps it
  EXPECT_FALSE(reused_within(trace, 6, 0, numel, 1000000000));  // after its last use
}
