// Toy GPT and data: parameter count against the closed form, Hugging Face
// config.json loading, presets, data determinism across batch splits.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "device/base/errors.h"
#include "trainer/model/data.h"
#include "trainer/model/gpt.h"
#include "trainer/config/model_spec.h"

using namespace zrepro;

TEST(Model, ParamCountMatchesClosedFormForSeveralDims) {
  for (auto [V, S, h, L, a, I] : std::vector<std::array<int64_t, 6>>{
           {128, 32, 64, 2, 4, 256}, {1000, 16, 48, 3, 6, 100}, {97, 7, 32, 1, 2, 128}}) {
    ModelSpec m{"t", V, S, h, L, a, I};
    auto layers = gpt_layers(m);
    auto init = gpt_init(m, 1);
    int64_t n = 0;
    for (size_t l = 0; l < layers.size(); ++l) {
      int64_t ln = 0;
      for (const auto& p : layers[l].params) ln += p.numel();
      EXPECT_EQ(init[l].numel(), ln);
      n += ln;
    }
    EXPECT_EQ(n, m.param_count());
    EXPECT_EQ(n, V * h + S * h + L * (4 * h * h + 2 * h * I + 9 * h + I) + 2 * h + h * V);
    EXPECT_EQ(layers.size(), static_cast<size_t>(L + 2));  // embed, blocks, head
  }
}

TEST(Model, TinyPresetHasTheDesignDims) {
  ModelSpec t = resolve_model("tiny");
  EXPECT_EQ(t.layers, 2);
  EXPECT_EQ(t.hidden, 64);
  EXPECT_EQ(t.heads, 4);
  EXPECT_EQ(t.seq, 32);
  EXPECT_EQ(t.vocab, 128);
  // GPT-2 small with an untied head: 124.4M + 38.6M head.
  EXPECT_EQ(resolve_model("gpt2").param_count(), 163037184);
  EXPECT_THROW(resolve_model("nonsense"), ConfigError);
}

TEST(Model, FlagOverridesAndValidation) {
  ModelOverrides o;
  o.hidden = 96;
  o.heads = 3;
  ModelSpec m = resolve_model("tiny", o);
  EXPECT_EQ(m.hidden, 96);
  EXPECT_EQ(m.intermediate, 4 * 96);
  o.heads = 5;
  EXPECT_THROW(resolve_model("tiny", o), ConfigError);  // 96 % 5 != 0
}

TEST(Model, LoadsHuggingFaceConfigJson) {
  const std::string path = testing::TempDir() + "/hf_config.json";
  std::ofstream(path) << R"({"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 3,
    "num_attention_heads": 8, "intermediate_size": 688, "vocab_size": 1000, "max_position_embeddings": 64})";
  ModelSpec m = resolve_model(path);
  EXPECT_EQ(m.hidden, 256);
  EXPECT_EQ(m.layers, 3);
  EXPECT_EQ(m.heads, 8);
  EXPECT_EQ(m.intermediate, 688);
  EXPECT_EQ(m.vocab, 1000);
  EXPECT_EQ(m.seq, 64);
  // GPT-2 spelling, intermediate defaults to 4h.
  std::ofstream(path) << R"({"n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 50, "n_positions": 16})";
  ModelSpec g = resolve_model(path);
  EXPECT_EQ(g.intermediate, 256);
  EXPECT_EQ(g.seq, 16);
  std::ofstream(path) << R"({"hidden_size": 64})";
  EXPECT_THROW(resolve_model(path), ConfigError);
  std::remove(path.c_str());
}

TEST(Model, LossStartsNearUniform) {
  ModelSpec m = resolve_model("tiny");
  SelfCommunicator comm;
  ZeroEngine engine(gpt_layers(m), gpt_init(m, 7), EngineConfig{}, comm);
  Gpt g(m, torch::kFloat, torch::kCPU);
  MarkovData d(m.vocab, m.seq, 7);
  torch::Tensor b = d.samples(0, 4);
  double loss = g.loss(b.narrow(1, 0, m.seq), b.narrow(1, 1, m.seq), engine).item<double>();
  EXPECT_NEAR(loss, std::log(128.0), 0.3);
}

TEST(Data, SamplesAreAddressedByGlobalIndex) {
  MarkovData d(128, 32, 5);
  torch::Tensor all = d.samples(10, 8);
  EXPECT_TRUE(torch::equal(all.narrow(0, 3, 5), d.samples(13, 5)));
  EXPECT_FALSE(torch::equal(d.samples(0, 1), d.samples(1, 1)));
  // Every split of a step's global batch covers the same samples.
  for (auto [world, micro, gas] : std::vector<std::array<int64_t, 3>>{{1, 4, 1}, {1, 1, 4}, {2, 2, 1}, {4, 1, 1}, {2, 1, 2}}) {
    std::vector<int64_t> firsts;
    for (int64_t t = 0; t < gas; ++t)
      for (int r = 0; r < world; ++r)
        for (int64_t i = 0; i < micro; ++i)
          firsts.push_back(MarkovData::first_sample(3, t, r, static_cast<int>(world), micro, gas) + i);
    std::sort(firsts.begin(), firsts.end());
    for (size_t i = 0; i < firsts.size(); ++i) EXPECT_EQ(firsts[i], 12 + static_cast<int64_t>(i));
  }
}
