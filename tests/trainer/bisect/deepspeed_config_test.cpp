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
                                     "gradient_accumulation_steps": 2, "optimizer": {"type": "Adam"}})");
  json expect = plain;
  expect["train_batch_size"] = 32;
  EXPECT_EQ(config_for_deepspeed(plain, resolved), expect);
}

// [Note: the optimizer the Trainer brings]: LLaMA-Factory's ds_z2_config.json has no
// "optimizer" and no "scheduler"; DeepSpeed alone refuses it at every release. Each release
// gets the optimizer zrepro trained with and zrepro's lr of each step; a file with its own
// "scheduler" keeps it; an optimizer offload gets DeepSpeedCPUAdam unless the file forbids it.
TEST(DeepSpeedConfigForARelease, AConfigWithoutAnOptimizerGetsTheTrainersAsZreproTrainedIt) {
  const json user = json::parse(R"({"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
                                    "zero_optimization": {"stage": 2}})");
  const json resolved = json::parse(R"({
    "optimizer": {"type": "AdamW", "params": {"lr": 0.001, "betas": [0.9, 0.95], "eps": 1e-08, "weight_decay": 0.1}},
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "none"}},
    "gradient_accumulation_steps": 1, "train_micro_batch_size_per_gpu": 2, "train_batch_size": 4})");
  const json ds = config_for_deepspeed(user, resolved, {0.001, 0.0005});
  EXPECT_FALSE(ds.contains("optimizer"));  // DeepSpeed's own optimizer would be another code path
  EXPECT_EQ(ds["zero_allow_untested_optimizer"], true);
  EXPECT_EQ(ds[kTrainerOptimizerKey], json::parse(R"({"type": "AdamW", "lr": 0.001, "betas": [0.9, 0.95], "eps": 1e-08,
                                                      "weight_decay": 0.1, "lr_by_step": [0.001, 0.0005]})"));
  json scheduled = user;
  scheduled["scheduler"] = {{"type", "WarmupLR"}};
  EXPECT_EQ(config_for_deepspeed(scheduled, resolved, {0.001, 0.0005})[kTrainerOptimizerKey]["lr_by_step"], json::array());
  json offload = resolved;
  offload["zero_optimization"]["offload_optimizer"]["device"] = "cpu";
  EXPECT_EQ(config_for_deepspeed(user, offload)[kTrainerOptimizerKey]["type"], "DeepSpeedCPUAdam");
  json forbid = user;
  forbid["zero_force_ds_cpu_optimizer"] = false;
  EXPECT_EQ(config_for_deepspeed(forbid, offload)[kTrainerOptimizerKey]["type"], "AdamW");
}

}  // namespace
}  // namespace zrepro
