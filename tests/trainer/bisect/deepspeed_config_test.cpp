// [Note: the config each release gets] (trainer/bisect/deepspeed_config.h): a Hugging Face
// Trainer config with "auto" everywhere, as zrepro resolved it for --micro-batch 8
// --grad-accum 2 on 2 ranks (tiny: hidden 64).
#include <gtest/gtest.h>

#include "trainer/bisect/deepspeed_config.h"

namespace zrepro {
namespace {

using json = nlohmann::json;

TEST(DeepSpeedConfigForARelease, FillsAutoAsTheTrainerDoesAndLeavesUnsetKeysUnset) {
  const json user = json::parse(R"({
    "bf16": {"enabled": "auto"},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto"}},
    "zero_optimization": {"stage": 2, "reduce_bucket_size": "auto", "overlap_comm": true},
    "gradient_accumulation_steps": "auto", "train_micro_batch_size_per_gpu": "auto"})");
  // zrepro's resolution spells out every default, the ones the user left unset too.
  const json resolved = json::parse(R"({
    "bf16": {"enabled": false, "check_grad_overflow": true},
    "optimizer": {"type": "AdamW", "params": {"lr": 0.001, "weight_decay": 0.0, "eps": 1e-08}},
    "zero_optimization": {"stage": 2, "reduce_bucket_size": 4096, "overlap_comm": true, "allgather_bucket_size": 500000000},
    "gradient_accumulation_steps": 2, "train_micro_batch_size_per_gpu": 8, "train_batch_size": 32,
    "gradient_clipping": 1.0})");
  const json ds = config_for_deepspeed(user, resolved);
  EXPECT_EQ(ds["bf16"], json::parse(R"({"enabled": false})"));
  EXPECT_EQ(ds["optimizer"]["params"], json::parse(R"({"lr": 0.001, "weight_decay": 0.0})"));
  EXPECT_EQ(ds["zero_optimization"]["reduce_bucket_size"], 4096);  // hidden^2, the Trainer's rule
  EXPECT_EQ(ds["gradient_accumulation_steps"], 2);
  EXPECT_EQ(ds["train_micro_batch_size_per_gpu"], 8);
  EXPECT_EQ(ds["train_batch_size"], 32);  // the batch keys are always set
  // Unset stays unset: each release applies its own default (gradient_clipping moved in 0.19.3).
  EXPECT_FALSE(ds.contains("gradient_clipping"));
  EXPECT_FALSE(ds["zero_optimization"].contains("allgather_bucket_size"));
  EXPECT_FALSE(ds["optimizer"]["params"].contains("eps"));
  EXPECT_FALSE(ds["bf16"].contains("check_grad_overflow"));
  // A config without "auto" goes as written.
  const json plain = json::parse(R"({"zero_optimization": {"stage": 3}, "train_micro_batch_size_per_gpu": 8,
                                     "gradient_accumulation_steps": 2})");
  json expect = plain;
  expect["train_batch_size"] = 32;
  EXPECT_EQ(config_for_deepspeed(plain, resolved), expect);
}

}  // namespace
}  // namespace zrepro
