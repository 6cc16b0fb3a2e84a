// DeepSpeed's ZeRO-3 leaf modules and the expert grouping that follows
// (trainer/config/leaf_modules.h): the config block as each release reads it, the
// --z3-leaf-modules classes, which spellings cover a MoE block, and when experts are
// fetched one by one.
#include <gtest/gtest.h>

#include "device/base/errors.h"
#include "trainer/config/ds_config.h"
#include "trainer/config/leaf_modules.h"

using namespace zrepro;

namespace {

DsConfig parse_zero(const std::string& zero, ConfigFlags f = {}) {
  return parse_ds_config(R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {)" + zero + "}}", "test.json",
                         f);
}

ConfigFlags release_flags(const std::string& v) {
  ConfigFlags f;
  f.deepspeed_version = v;
  return f;
}

ZeroConfig stage3(std::vector<std::string> classes = {}) {
  ZeroConfig z;
  z.stage = 3;
  z.stage3_param_persistence_threshold = 0;
  z.leaf_module.classes = std::move(classes);
  return z;
}

bool leaf_warned(const DsConfig& c, const std::string& fragment) {
  for (const auto& w : c.warnings)
    if (w.find(fragment) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST(LeafModules, DeepSpeed018AndLaterMakeHuggingFacesMoeBlocksLeavesByDefault) {
  const DsConfig newest = parse_zero(R"("stage": 3)");
  ASSERT_EQ(newest.zero.leaf_module.classes.size(), 3u);
  EXPECT_EQ(newest.zero.leaf_module.classes[0], "transformers.models.mixtral.modeling_mixtral.MixtralSparseMoeBlock");
  EXPECT_EQ(parse_zero(R"("stage": 3)", release_flags("0.18.0")).zero.leaf_module.classes.size(), 3u);
  EXPECT_TRUE(parse_zero(R"("stage": 3)", release_flags("0.17.6")).zero.leaf_module.classes.empty());
  // Turned off, a string coerced to a list, names and suffixes read.
  EXPECT_TRUE(parse_zero(R"("stage": 3, "leaf_module": {"classes": []})").zero.leaf_module.classes.empty());
  const DsConfig one = parse_zero(R"("stage": 3, "leaf_module": {"classes": "MixtralSparseMoeBlock",
                                 "names": ["model.layers.0.block_sparse_moe"], "name_suffixes": "block_sparse_moe"})");
  EXPECT_EQ(one.zero.leaf_module.classes, std::vector<std::string>{"MixtralSparseMoeBlock"});
  EXPECT_EQ(one.zero.leaf_module.names, std::vector<std::string>{"model.layers.0.block_sparse_moe"});
  EXPECT_EQ(one.zero.leaf_module.name_suffixes, std::vector<std::string>{"block_sparse_moe"});
}

TEST(LeafModules, AReleaseBefore018IgnoresTheBlockAndSaysSo) {
  const DsConfig old = parse_zero(R"("stage": 3, "leaf_module": {"classes": ["MixtralSparseMoeBlock"]})", release_flags("0.17.6"));
  EXPECT_TRUE(old.zero.leaf_module.classes.empty());
  EXPECT_TRUE(leaf_warned(old, "zero_optimization.leaf_module is not a key of DeepSpeed 0.17.6 (added in 0.18.0"));
  // set_z3_leaf_modules (--z3-leaf-modules) works at any release, added to the config's.
  ConfigFlags f = release_flags("0.17.6");
  f.z3_leaf_modules = "MixtralSparseMoeBlock, Qwen2MoeSparseMoeBlock";
  EXPECT_EQ(parse_zero(R"("stage": 3)", f).zero.leaf_module.classes,
            (std::vector<std::string>{"MixtralSparseMoeBlock", "Qwen2MoeSparseMoeBlock"}));
  f.z3_leaf_modules = "A,,B";
  EXPECT_THROW(parse_zero(R"("stage": 3)", f), ConfigError);
}

TEST(LeafModules, ABadValueNamesTheKey) {
  try {
    parse_zero(R"("stage": 3, "leaf_module": {"classes": [3]})");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("zero_optimization.leaf_module.classes: expected a string or a list of "
                                         "strings, got [3]"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(parse_zero(R"("stage": 3, "leaf_module": [1])"), ConfigError);
}

TEST(LeafModules, EverySpellingOfTheBlockOrAModuleAboveItCoversTheExperts) {
  for (const char* type : {"tiny-mixtral", "tiny-qwen2-moe"}) {
    const ModelSpec m = resolve_model(type);
    EXPECT_TRUE(expert_fetch(m, stage3()).one_by_one) << type;
    for (const std::string& c : {moe_block_class(m), moe_block_qualified_class(m)})
      EXPECT_FALSE(expert_fetch(m, stage3({c})).one_by_one) << c;
  }
  const ModelSpec m = resolve_model("tiny-mixtral");
  EXPECT_EQ(moe_block_module(m, 1), "model.layers.1.block_sparse_moe");
  EXPECT_EQ(moe_block_module(resolve_model("tiny-qwen2-moe"), 1), "model.layers.1.mlp");
  EXPECT_FALSE(expert_fetch(m, stage3({"MixtralDecoderLayer"})).one_by_one);  // a leaf above the block
  EXPECT_FALSE(expert_fetch(m, stage3({"ModuleList"})).one_by_one);           // the experts list itself
  ZeroConfig z = stage3();
  z.leaf_module.name_suffixes = {"block_sparse_moe"};
  EXPECT_FALSE(expert_fetch(m, z).one_by_one);
  z = stage3();
  z.leaf_module.names = {"model.layers.0.block_sparse_moe", "model.layers.1.block_sparse_moe"};
  EXPECT_FALSE(expert_fetch(m, z).one_by_one);
  z.leaf_module.names.pop_back();  // one layer a leaf, the other not: refused, naming the key
  EXPECT_THROW(expert_fetch(m, z), ConfigError);
  // A class that holds no experts: not a cover, and reported (DeepSpeed's default classes are not).
  const ExpertFetch f = expert_fetch(m, stage3({"MixtralAttention", moe_block_qualified_class(resolve_model("tiny-qwen2-moe"))}));
  EXPECT_TRUE(f.one_by_one);
  EXPECT_EQ(f.unmatched, std::vector<std::string>{"class MixtralAttention"});
}

TEST(LeafModules, ExpertsAreFetchedOneByOneOnlyWhereZero3GathersThem) {
  const ModelSpec m = resolve_model("tiny-mixtral");  // expert weights 96 x 64 = 6144 elements
  ZeroConfig z = stage3();
  EXPECT_TRUE(expert_fetch(m, z).one_by_one);
  EXPECT_NE(expert_fetch(m, z).why.find("fix: zero_optimization.leaf_module.classes [\"MixtralSparseMoeBlock\"]"),
            std::string::npos);
  z.stage3_param_persistence_threshold = 6145;  // persistent: never gathered
  EXPECT_FALSE(expert_fetch(m, z).one_by_one);
  EXPECT_NE(expert_fetch(m, z).why.find("stage3_param_persistence_threshold"), std::string::npos);
  z.stage3_param_persistence_threshold = 6144;
  EXPECT_TRUE(expert_fetch(m, z).one_by_one);
  for (int stage : {0, 1, 2}) {
    z.stage = stage;
    EXPECT_FALSE(expert_fetch(m, z).one_by_one) << stage;
  }
  EXPECT_FALSE(expert_fetch(resolve_model("tiny-llama"), stage3()).one_by_one);  // dense: nothing to say
  EXPECT_TRUE(expert_fetch(resolve_model("tiny-llama"), stage3()).why.empty());
}

// set_z3_leaf_modules raises ValueError when none of its classes is in the model
// (deepspeed/utils/z3_leaf_module.py): --z3-leaf-modules refuses likewise, at any stage;
// one matching class is enough, and the config's classes are only warned about.
TEST(LeafModules, ApiClassesThatMatchNoModuleAreRefusedAsDeepSpeedRaises) {
  const ModelSpec m = resolve_model("tiny-mixtral");
  ConfigFlags f;
  f.z3_leaf_modules = "MixtralSparseMoEBlock";  // a typo of the class
  for (int stage : {2, 3}) {
    const DsConfig c = parse_zero("\"stage\": " + std::to_string(stage), f);
    try {
      check_leaf_module_classes(m, c.zero);  // check_job's, for run and plan alike
      FAIL() << stage;
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("--z3-leaf-modules: none of the classes ['MixtralSparseMoEBlock'] is a module of"),
                std::string::npos) << what;
      EXPECT_NE(what.find("No modules of type"), std::string::npos) << what;
      EXPECT_NE(what.find("MixtralSparseMoeBlock"), std::string::npos) << what;
    }
  }
  f.z3_leaf_modules = "MixtralSparseMoEBlock,MixtralDecoderLayer";
  EXPECT_NO_THROW(check_leaf_module_classes(m, parse_zero(R"("stage": 3)", f).zero));
  EXPECT_FALSE(expert_fetch(m, parse_zero(R"("stage": 3)", f).zero).one_by_one);
  // The same class in the config: DeepSpeed (apply_zero_leaf_module_config) does not raise.
  EXPECT_NO_THROW(expert_fetch(m, stage3({"MixtralSparseMoEBlock"})));
  // A dense model has no MoE block to check against: nothing is refused.
  f.z3_leaf_modules = "MixtralSparseMoeBlock";
  EXPECT_NO_THROW(expert_fetch(resolve_model("tiny-llama"), parse_zero(R"("stage": 3)", f).zero));
}
