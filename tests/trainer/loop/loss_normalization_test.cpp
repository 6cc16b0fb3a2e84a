// The loss normalisations' divisors (trainer/loop/loss_normalization.h), one formula per
// Trainer behaviour, and their names as --loss-normalization reads them.
#include <gtest/gtest.h>

#include "device/base/errors.h"
#include "trainer/loop/loss_normalization.h"

using namespace zrepro;

TEST(LossNormalization, NamesRoundTripAndBadOnesAreRefused) {
  for (LossNormalization n : {LossNormalization::mean, LossNormalization::token, LossNormalization::token_per_rank,
                              LossNormalization::token_scaled_twice}) {
    EXPECT_EQ(parse_loss_normalization(loss_normalization_row(n).name), n);
    EXPECT_NE(std::string(loss_normalization_row(n).transformers).find("transformers"), std::string::npos);
  }
  try {
    parse_loss_normalization("tokens");
    FAIL();
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--loss-normalization"), std::string::npos);
    EXPECT_NE(m.find("\"tokens\""), std::string::npos);
    EXPECT_NE(m.find("token-per-rank"), std::string::npos);
  }
}

TEST(LossNormalization, DivisorsFollowEachTrainerBehaviour) {
  // gas 4 (3 run: skip-forward), 2 ranks, this rank 300 tokens, all ranks 700.
  MicroWeights w = micro_weights(LossNormalization::mean, 4, 3, 2, 300, 700);
  EXPECT_FALSE(w.sum);
  EXPECT_EQ(w.grad_div, 4);    // DeepSpeed's backward: / gas
  EXPECT_EQ(w.report_div, 3);  // the mean of the micro-batches that ran
  EXPECT_EQ(w.forward_div, 1);  // the model's forward returns the mean itself
  w = micro_weights(LossNormalization::token, 4, 3, 2, 300, 700);
  EXPECT_TRUE(w.sum);
  EXPECT_DOUBLE_EQ(w.grad_div, 350);  // sum / 700 x world 2; the ranks' average halves it back
  EXPECT_DOUBLE_EQ(w.report_div, 350);
  EXPECT_DOUBLE_EQ(w.forward_div, 700);  // the forward divides by num_items_in_batch (every rank's)
  w = micro_weights(LossNormalization::token_per_rank, 4, 3, 2, 300, 700);
  EXPECT_TRUE(w.sum);
  EXPECT_DOUBLE_EQ(w.grad_div, 300);
  EXPECT_DOUBLE_EQ(w.report_div, 300);
  EXPECT_DOUBLE_EQ(w.forward_div, 300);
  w = micro_weights(LossNormalization::token_scaled_twice, 4, 3, 2, 300, 700);
  EXPECT_TRUE(w.sum);
  EXPECT_DOUBLE_EQ(w.grad_div, 1200);  // and DeepSpeed's / gas again
  EXPECT_DOUBLE_EQ(w.report_div, 300);  // the logged loss was right
  EXPECT_DOUBLE_EQ(w.forward_div, 300);
}
