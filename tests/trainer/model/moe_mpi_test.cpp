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
