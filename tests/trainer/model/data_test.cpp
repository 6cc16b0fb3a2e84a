// The synthetic data's sample lengths (--seq-len-dist): fixed lengths keep the tokens they
// always had, padded samples are the fixed ones cut at their length and padded with -100,
// the lengths cover their range deterministically, and target_tokens counts what the loss
// scores.
#include <gtest/gtest.h>

#include <set>

#include "device/base/errors.h"
#include "trainer/model/data.h"

using namespace zrepro;

TEST(SeqLenDist, ParsesTheFormsAndRefusesTheRest) {
  EXPECT_TRUE(parse_seq_len_dist("fixed", 32).fixed());
  const SeqLenDist a = parse_seq_len_dist("uniform:4", 32);
  EXPECT_EQ(a.min, 4);
  EXPECT_EQ(a.max, 32);
  EXPECT_EQ(a.spec(), "uniform:4-32");
  const SeqLenDist b = parse_seq_len_dist("uniform:2-16", 32);
  EXPECT_EQ(b.min, 2);
  EXPECT_EQ(b.max, 16);
  EXPECT_EQ(parse_seq_len_dist(b.spec(), 32).spec(), b.spec());
  for (const char* bad : {"uniform:0", "uniform:8-4", "uniform:4-33", "uniform:", "uniform:x", "normal:4", "4"}) {
    try {
      parse_seq_len_dist(bad, 32);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const ConfigError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("--seq-len-dist"), std::string::npos) << m;
      EXPECT_NE(m.find(bad), std::string::npos) << m;
      EXPECT_NE(m.find("uniform:MIN-MAX"), std::string::npos) << m;
    }
  }
}

TEST(MarkovData, PaddedSamplesAreTheFixedOnesCutAtTheirLength) {
  const int64_t seq = 32;
  const MarkovData fixed(97, seq, 5), padded(97, seq, 5, parse_seq_len_dist("uniform:3-20", seq));
  EXPECT_FALSE(fixed.padded());
  EXPECT_TRUE(padded.padded());
  const torch::Tensor f = fixed.samples(100, 40), p = padded.samples(100, 40);
  EXPECT_EQ((f < 0).sum().item<int64_t>(), 0);
  std::set<int64_t> lengths;
  int64_t scored = 0;
  for (int64_t i = 0; i < 40; ++i) {
    const int64_t len = padded.length(100 + i);
    ASSERT_GE(len, 3);
    ASSERT_LE(len, 20);
    EXPECT_EQ(fixed.length(100 + i), seq);
    lengths.insert(len);
    // len targets: positions 1..len are real tokens, the rest padding.
    EXPECT_TRUE(torch::equal(p[i].narrow(0, 0, len + 1), f[i].narrow(0, 0, len + 1))) << "sample " << i;
    EXPECT_TRUE((p[i].narrow(0, len + 1, seq - len) == kPadLabel).all().item<bool>()) << "sample " << i;
    scored += len;
  }
  EXPECT_GT(lengths.size(), 8u) << "the lengths cover their range";
  EXPECT_EQ(padded.target_tokens(100, 40, seq), scored);
  EXPECT_EQ((p.narrow(1, 1, seq) != kPadLabel).sum().item<int64_t>(), scored);
  EXPECT_EQ(fixed.target_tokens(100, 40, seq), 40 * seq);
  // Cut to a dynamic-padding length of 10: min(len, 10) each.
  EXPECT_EQ(padded.target_tokens(100, 40, 10), (p.narrow(1, 1, 10) != kPadLabel).sum().item<int64_t>());
  // The same sample, whatever slice it is drawn in.
  EXPECT_TRUE(torch::equal(padded.samples(117, 1)[0], p[17]));
}
