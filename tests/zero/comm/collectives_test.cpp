// Collective accounting: nccl-tests bus-bandwidth factors and the ZeRO byte convention.
#include <gtest/gtest.h>

#include <numeric>

#include "trainer/report/hang.h"
#include "zero/comm/communicator.h"
#include "zero/schedule/partition.h"

using namespace zrepro;

TEST(Collectives, BusBandwidthFactorsFollowNcclTests) {
  EXPECT_DOUBLE_EQ(busbw_factor(CollOp::all_reduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(busbw_factor(CollOp::reduce_scatter, 4), 0.75);
  EXPECT_DOUBLE_EQ(busbw_factor(CollOp::all_gather, 8), 0.875);
  EXPECT_DOUBLE_EQ(busbw_factor(CollOp::broadcast, 8), 1.0);
}

TEST(Collectives, ByteCountsFollowTheZeroConvention) {
  SelfCommunicator c;
  torch::Tensor a = torch::ones({10});
  c.all_reduce(a, "ar")->wait();
  torch::Tensor out = torch::empty({10});
  c.all_gather(out, a, "ag")->wait();
  c.reduce_scatter(out, a, "rs")->wait();
  CommStats s = c.stats();
  EXPECT_EQ(s[CollOp::all_reduce].bytes, 80);  // out and back: 2 x 10 x 4
  EXPECT_EQ(s[CollOp::all_gather].bytes, 40);
  EXPECT_EQ(s[CollOp::reduce_scatter].bytes, 40);
  auto ring = c.recorder().snapshot();
  ASSERT_EQ(ring.size(), 3u);
  EXPECT_EQ(ring[2].seq, 2);
  EXPECT_EQ(ring[2].state, FlightEntry::completed);
  EXPECT_FALSE(c.recorder().oldest_incomplete().has_value());
}
