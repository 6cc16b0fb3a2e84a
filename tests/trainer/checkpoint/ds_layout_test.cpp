// DeepSpeed's checkpoint layout of zrepro's model (trainer/checkpoint/ds_layout.h): the
// module names per family, DeepSpeed's whole-model flat partitions at each stage against
// their inverse and DeepSpeed's own figures, zrepro's per-layer owned pieces; and the .pt
// files (pt_file.h): what is written reads back, torch.Size shapes and Python objects too.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "device/base/errors.h"
#include "trainer/checkpoint/ds_layout.h"
#include "trainer/checkpoint/pt_file.h"
#include "zero/schedule/partition.h"

using namespace zrepro;

TEST(CheckpointLayout, ModuleNamesAreDeepSpeedsModelsInZreprosOrder) {
  const std::vector<CheckpointParam> llama = checkpoint_params(resolve_model("tiny-llama"));
  EXPECT_EQ(llama.front().name, "model.embed_tokens.weight");
  EXPECT_EQ(llama[1].name, "model.layers.0.input_layernorm.weight");
  EXPECT_EQ(llama[2].name, "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(llama[7].name, "model.layers.0.mlp.gate_proj.weight");
  EXPECT_EQ(llama[llama.size() - 2].name, "model.norm.weight");
  EXPECT_EQ(llama.back().name, "lm_head.weight");
  const std::vector<CheckpointParam> gpt2 = checkpoint_params(resolve_model("tiny"));
  EXPECT_EQ(gpt2[0].name, "wte.weight");
  EXPECT_EQ(gpt2[1].name, "wpe.weight");
  EXPECT_EQ(gpt2[4].name, "blocks.0.qkv.weight");
  EXPECT_EQ(gpt2[12].name, "blocks.0.fc2.weight");
  EXPECT_EQ(gpt2.back().name, "lm_head.weight");
  ModelSpec mixtral = resolve_model("tiny-mixtral");
  std::vector<CheckpointParam> m = checkpoint_params(mixtral);
  EXPECT_EQ(m[7].name, "model.layers.0.block_sparse_moe.gate.weight");
  EXPECT_EQ(m[8].name, "model.layers.0.block_sparse_moe.experts.0.w1.weight");
  // Experts in their own groups (ZeRO-3 one by one): the same names in the same order.
  mixtral.expert_groups = true;
  const std::vector<CheckpointParam> apart = checkpoint_params(mixtral);
  ASSERT_EQ(apart.size(), m.size());
  for (size_t i = 0; i < m.size(); ++i) EXPECT_EQ(apart[i].name, m[i].name);
  const std::vector<CheckpointParam> qwen = checkpoint_params(resolve_model("tiny-qwen2-moe"));
  EXPECT_EQ(qwen[10].name, "model.layers.0.mlp.gate.weight");
  EXPECT_EQ(qwen[11].name, "model.layers.0.mlp.shared_expert.gate_proj.weight");
  EXPECT_EQ(qwen[4].name, "model.layers.0.self_attn.k_proj.weight");
  ModelSpec tied = resolve_model("tiny-llama");
  tied.tied = true;
  EXPECT_EQ(checkpoint_params(tied).back().name, "model.norm.weight");  // the head is the embedding
  EXPECT_EQ(tied_head_name(tied), "lm_head.weight");
}

// DeepSpeed's figures (docs/lab/DEEPSPEED_CHECKPOINTS.md, from real files): parameters of
// 35, 7, 21 and 3 elements on 2 ranks; stage 3 keeps 18 + 4 + 11 + 2 = 35 per rank, stage
// 1-2 pads the 66 to 68 and gives each rank 34, the second 32 of them real.
TEST(CheckpointLayout, DeepSpeedsPartitionsAtEachStageAndTheirInverse) {
  const std::vector<int64_t> numels = {35, 7, 21, 3};
  const torch::Tensor natural = torch::arange(66, torch::kFloat) + 1;
  EXPECT_EQ(ds_partition(natural, numels, checkpoint_layout(3, 2), 0, true).numel(), 35);
  EXPECT_EQ(ds_partition(natural, numels, checkpoint_layout(2, 2), 0, true).numel(), 34);
  EXPECT_EQ(ds_partition(natural, numels, checkpoint_layout(2, 2), 1, false).numel(), 32);
  EXPECT_EQ(ds_partition(natural, numels, checkpoint_layout(2, 2), 1, true).numel(), 34);
  EXPECT_EQ(ds_partition(natural, numels, checkpoint_layout(2, 2), 1, true)[33].item<float>(), 0.0f);
  // Stage 3's rank 1: the second half of each padded parameter.
  EXPECT_EQ(ds_partition(natural, numels, checkpoint_layout(3, 2), 1, true)[0].item<float>(), 19.0f);
  for (int stage : {1, 2, 3})
    for (int world : {1, 2, 3, 4, 8})
      for (bool padded : {false, true}) {
        std::vector<torch::Tensor> parts;
        for (int r = 0; r < world; ++r) parts.push_back(ds_partition(natural, numels, checkpoint_layout(stage, world), r, padded || stage == 3));
        EXPECT_TRUE(torch::equal(natural_from_ds_partitions(parts, numels, checkpoint_layout(stage, world)), natural))
            << "stage " << stage << " world " << world << (padded ? " padded" : "");
      }
}

TEST(CheckpointLayout, ZreprosOwnedPiecesOfALayerRoundTrip) {
  const std::vector<int64_t> numels = {35, 7, 21, 3};
  const torch::Tensor natural = torch::arange(66, torch::kFloat) + 1;
  for (int stage : {0, 1, 2, 3})
    for (int world : {1, 2, 3}) {
      const LayerLayout l = layer_layout(numels, StagePolicy{stage}, world, 0);
      std::vector<torch::Tensor> owned;
      for (int r = 0; r < world; ++r) {
        owned.push_back(owned_from_natural(l, r, natural));
        EXPECT_EQ(owned.back().numel(), l.owned_numel()) << stage;
      }
      EXPECT_TRUE(torch::equal(natural_from_owned(l, torch::stack(owned)), natural)) << "stage " << stage << " world " << world;
    }
}

TEST(CheckpointFile, WhatIsWrittenReadsBackWithShapesAndObjects) {
  const std::string dir = testing::TempDir() + "/pt_files";
  std::filesystem::create_directories(dir);
  c10::impl::GenericDict d = str_dict();
  d.insert("loss_scaler", python_object("deepspeed.runtime.fp16.loss_scaler.LossScaler", {{"cur_scale", 8.0}, {"dynamic", false}}));
  c10::impl::GenericDict shapes(c10::StringType::get(), c10::ListType::ofInts());
  shapes.insert("w", c10::List<int64_t>({7, 5}));
  d.insert("param_shapes", shapes);
  d.insert("t", torch::arange(6, torch::kBFloat16));
  write_pt(dir + "/a.pt", d, true);
  const c10::IValue back = read_pt(dir + "/a.pt");
  const c10::impl::GenericDict b = back.toGenericDict();
  EXPECT_EQ(object_attr(dict_at(b, "loss_scaler", "a.pt"), "cur_scale").toDouble(), 8.0);
  EXPECT_TRUE(object_attr(dict_at(b, "loss_scaler", "a.pt"), "absent").isNone());
  EXPECT_EQ(dict_at(b, "param_shapes", "a.pt").toGenericDict().at("w").toIntVector(), (std::vector<int64_t>{7, 5}));
  EXPECT_TRUE(torch::equal(dict_at(b, "t", "a.pt").toTensor(), torch::arange(6, torch::kBFloat16)));
  EXPECT_THROW(dict_at(b, "missing", "a.pt"), ConfigError);
  // The pickle names torch.Size, as zero_to_fp32.py needs (it calls .numel() on each shape).
  std::ifstream raw(dir + "/a.pt", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(raw)), {});
  EXPECT_NE(bytes.find("ctorch\nSize\n"), std::string::npos);
  EXPECT_EQ(bytes.find("build_intlist"), std::string::npos);
  // Not a .pt file, or none: bad input naming it (exit 2), not an output that failed.
  std::ofstream(dir + "/b.pt") << "not a zip";
  EXPECT_THROW(read_pt(dir + "/b.pt"), ConfigError);
  EXPECT_THROW(read_pt(dir + "/none.pt"), ConfigError);
}
