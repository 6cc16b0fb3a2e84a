// The MoE toy under ZeRO-3 on two ranks (trainer/config/leaf_modules.h, [Note: which
// experts a rank fetches]): with the same batches on both ranks the routing agrees, so
// fetching the experts one by one trains exactly as fetching the block as a leaf, and
// as stage 0 (the experts no token picked are skipped: gpt_test.cpp checks their gradients).
#include <gtest/gtest.h>

#include "tests/support/process.h"

using namespace zrepro_test;

namespace {

std::string moe_config(int stage, const std::string& leaf) {
  return R"({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 2,
    "optimizer": {"type": "AdamW", "params": {"lr": 0.003}}, "zero_optimization": {"stage": )" +
         std::to_string(stage) + R"(, "stage3_param_persistence_threshold": 0, "leaf_module": {"classes": )" + leaf +
         "}}}";
}

double all_gathers(const RunResult& r) { return r.summary["comm"]["ops"]["all_gather"]["calls_per_step"]; }

}  // namespace

TEST(MoeZero3, ExpertsFetchedOneByOneTrainAsTheLeafAndStage0WhenRoutingAgrees) {
  const std::string args = "--ranks 2 --model tiny-mixtral --seq 4 --steps 3 --data-rule same";
  const RunResult one = zrepro_run("moe_one", moe_config(3, "[]"), args);
  const RunResult leaf = zrepro_run("moe_leaf", moe_config(3, R"(["MixtralSparseMoeBlock"])"), args);
  const RunResult stage0 = zrepro_run("moe_s0", moe_config(0, "[]"), args);
  ASSERT_EQ(one.code, 0) << one.output;
  EXPECT_EQ(one.summary["model"]["experts"]["fetched"], "expert by expert");
  EXPECT_EQ(leaf.summary["model"]["experts"]["fetched"], "with their block");
  expect_same_losses(leaf, one, 1e-6, "one by one vs leaf");
  expect_same_losses(stage0, one, 1e-5, "one by one vs stage 0");
  // The fetch units differ, so do the all-gathers: one per parameter of what is fetched
  // (the leaf's whole block, kept gathered from forward to backward while the trace
  // holds; one by one, only the picked experts, each micro-step's routing its own trace).
  EXPECT_NE(all_gathers(one), all_gathers(leaf));
}

TEST(MoeZero3, LeafNamesThatCoverSomeBlocksAreRefusedWithASummary) {
  // zrepro groups every block alike: names covering layer 0's block and not layer 1's are
  // refused (exit 2) naming the key, and the run still leaves its config_error summary.
  const RunResult r = zrepro_run("moe_names", R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3,
    "stage3_param_persistence_threshold": 0, "leaf_module": {"classes": [], "names": ["model.layers.0.block_sparse_moe"]}}})",
                                 "--model tiny-mixtral --seq 4 --steps 1");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("zero_optimization.leaf_module"), std::string::npos) << r.output;
  ASSERT_TRUE(r.summary.is_object()) << r.output;
  EXPECT_EQ(r.summary["status"], "config_error");
}

// --output-router-logits: the router's aux loss under ZeRO-3, experts fetched one by one,
// trains as stage 0 and as with checkpointed blocks, and moves the losses (coef 0.1).
TEST(MoeZero3, TheRoutersAuxLossTrainsAlikeAtEveryStageAndWithCheckpointing) {
  const std::string args = "--ranks 2 --model tiny-mixtral --seq 4 --steps 3 --data-rule same --router-aux-loss-coef 0.1";
  const RunResult plain = zrepro_run("aux_off", moe_config(3, "[]"), args);
  const RunResult one = zrepro_run("aux_one", moe_config(3, "[]"), args + " --output-router-logits");
  const RunResult stage0 = zrepro_run("aux_s0", moe_config(0, "[]"), args + " --output-router-logits");
  const RunResult ckpt = zrepro_run("aux_ckpt", moe_config(3, "[]"), args + " --output-router-logits --activation-checkpointing");
  ASSERT_EQ(one.code, 0) << one.output;
  EXPECT_NE(one.output.find("[zrepro] router aux loss: on, router_aux_loss_coef 0.1"), std::string::npos) << one.output;
  EXPECT_NE(plain.output.find("[zrepro] router aux loss: off"), std::string::npos) << plain.output;
  EXPECT_DOUBLE_EQ(one.summary["model"]["experts"]["router_aux_loss_coef"].get<double>(), 0.1);
  expect_same_losses(stage0, one, 1e-5, "aux: one by one vs stage 0");
  expect_same_losses(ckpt, one, 1e-5, "aux: checkpointed vs not");
  // coef x aux, aux in [k, E] = [2, 8]: the first loss is 0.2 .. 0.8 above the plain run's.
  const double gap = one.summary["steps"][0]["loss"].get<double>() - plain.summary["steps"][0]["loss"].get<double>();
  EXPECT_GE(gap, 0.2 - 1e-4);
  EXPECT_LE(gap, 0.8);
}
