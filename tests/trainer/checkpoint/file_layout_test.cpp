// What each file of DeepSpeed's ZeRO checkpoint is and holds (trainer/checkpoint/file_layout.h):
// per stage, and the files each rank writes against checkpoints real DeepSpeed 0.19.8 wrote
// (conformance/results/deepspeed-checkpoints: the tiny model on 2 ranks, fp32 ZeRO-2 and bf16
// ZeRO-3; their contents are beyond LibTorch's unpickler, so the keys are held by the
// process tests DeepSpeed reads zrepro's checkpoints in, tests/trainer/checkpoint/).
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <set>
#include <stdexcept>

#include "trainer/checkpoint/file_layout.h"

using namespace zrepro;

namespace {

const std::string kReal = std::string(ZREPRO_SOURCE_DIR).append("/conformance/results/deepspeed-checkpoints");

std::set<std::string> files_in(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

// The files the layout says a 2-rank save writes.
std::set<std::string> layout_files(const CheckpointLayout& l, bool bf16) {
  std::set<std::string> out;
  for (int r = 0; r < l.world; ++r) {
    out.insert(optim_states_file(r, bf16));
    if (l.writes_model_states(r)) out.insert(l.model_states_file(r));
  }
  return out;
}

}  // namespace

TEST(CheckpointFiles, EachStageDecidesItsFilesAndKeysOnce) {
  const CheckpointLayout z1 = checkpoint_layout(1, 4), z2 = checkpoint_layout(2, 4), z3 = checkpoint_layout(3, 4);
  EXPECT_FALSE(z1.frozen_param_entries) << "stage 1 writes None: only partitioned gradients collect frozen entries";
  EXPECT_TRUE(z2.frozen_param_entries);
  EXPECT_TRUE(z3.frozen_param_entries);
  for (const CheckpointLayout& l : {z1, z2}) {
    EXPECT_EQ(l.partition, DsPartitionForm::whole_model_ranges);
    EXPECT_EQ(l.model_states_file(3), "mp_rank_00_model_states.pt");
    EXPECT_TRUE(l.writes_model_states(0));
    EXPECT_FALSE(l.writes_model_states(1));
    EXPECT_TRUE(l.reads_optimizer_file(3, 0)) << "the ranges a rank's layers need lie in every rank's file";
    EXPECT_TRUE(l.universal_wraps_params);
  }
  EXPECT_EQ(z3.partition, DsPartitionForm::parameter_slices);
  EXPECT_EQ(z3.model_states_file(3), "zero_pp_rank_3_mp_rank_00_model_states.pt");
  EXPECT_TRUE(z3.writes_model_states(3));
  EXPECT_FALSE(z3.reads_optimizer_file(3, 0));
  EXPECT_TRUE(z3.reads_optimizer_file(2, 2));
  EXPECT_FALSE(z3.module_holds_values);
  EXPECT_FALSE(z3.universal_wraps_params);
  EXPECT_EQ(optim_states_file(1, true), "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt");
  EXPECT_FALSE(has_zero_checkpoint(0));
  EXPECT_THROW(checkpoint_layout(0, 2), std::invalid_argument);
  // The pattern finds what the name function makes.
  for (const CheckpointLayout& l : {z1, z3})
    EXPECT_TRUE(std::regex_match(l.model_states_file(2), std::regex(l.model_states_pattern()))) << l.stage;
}

TEST(CheckpointFiles, TheLayoutIsWhatRealDeepSpeedWrote) {
  struct Case {
    const char* dir;
    int stage;
    bool bf16;
  };
  for (const Case& c : {Case{"tiny-fp32-stage2", 2, false}, Case{"tiny-bf16-stage3", 3, true}}) {
    const std::string tag = kReal + "/" + c.dir + "/global_step2";
    ASSERT_TRUE(std::filesystem::is_directory(tag)) << tag;
    const CheckpointLayout l = checkpoint_layout(c.stage, 2);
    EXPECT_EQ(files_in(tag), layout_files(l, c.bf16)) << c.dir;
  }
}
