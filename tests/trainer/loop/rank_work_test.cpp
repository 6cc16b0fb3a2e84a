// The end-of-sequence draws of --generate --eos-prob (trainer/loop/rank_work.h):
// deterministic per (seed, rank, step, token), at the asked frequency, different per rank.
#include <gtest/gtest.h>

#include "trainer/loop/rank_work.h"

using namespace zrepro;

TEST(RankWork, EndOfSequenceDrawsAreSeededAndAtTheAskedRate) {
  for (double p : {0.0, 0.05, 0.3, 0.9, 1.0}) {
    int hits = 0;
    const int n = 20000;
    for (int i = 0; i < n; ++i) hits += draws_eos(1234, i % 8, i / 800, i % 100, p);
    EXPECT_NEAR(static_cast<double>(hits) / n, p, 0.015) << p;
  }
  int same = 0, differ = 0;
  for (int64_t t = 0; t < 1000; ++t) {
    EXPECT_EQ(draws_eos(7, 1, 3, t, 0.3), draws_eos(7, 1, 3, t, 0.3));
    (draws_eos(7, 0, 3, t, 0.3) == draws_eos(7, 1, 3, t, 0.3) ? same : differ) += 1;
  }
  EXPECT_GT(differ, 300) << "ranks draw their own ends";
}
