// [Note: "auto" as Accelerate fills it] (trainer/config/accelerate_config.h): accelerate
// configs as users launch with them (TRL's, configs/examples/accelerate/) read from YAML;
// "auto" filled as Accelerate's plugin and prepare() fill it, each value with its source, and
// differently from the Trainer for the same file; Accelerate's refusals quoted; a Trainer
// script under `accelerate launch` keeps the Trainer's rules and its mismatch check.
#include <gtest/gtest.h>

#include <fstream>

#include "device/base/errors.h"
#include "trainer/config/accelerate_config.h"
#include "trainer/config/ds_config.h"
#include "trainer/config/training_args.h"

using namespace zrepro;

namespace {

const std::string kDir = std::string(ZREPRO_SOURCE_DIR).append("/configs/examples/accelerate/");

std::string acc_file(const std::string& name, const std::string& text) {
  const std::string path = testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

const ConfigEntry* acc_entry(const DsConfig& c, const std::string& path) {
  for (const auto& e : c.entries)
    if (e.path == path) return &e;
  return nullptr;
}

std::string acc_refusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(accepted)";
}

ConfigFlags accelerate_flags(const std::string& yaml, int world = 1) {
  ConfigFlags f;
  f.world_size = world;
  f.total_steps = 10;
  f.hidden_size = 64;
  f.accelerate = load_accelerate_config(yaml);
  return f;
}

// The Hugging Face Trainer's usual "auto" config (configs/examples/hf_auto_zero2.json's shape).
const char* kAutoConfig = R"({"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
    "train_batch_size": "auto", "gradient_clipping": "auto", "bf16": {"enabled": "auto"},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto", "betas": [0.9, 0.95]}},
    "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                  "warmup_num_steps": "auto", "total_num_steps": "auto"}},
    "zero_optimization": {"stage": "auto", "reduce_bucket_size": "auto"}})";

}  // namespace

// Every test below reads YAML: a build without yaml-cpp reads JSON only (and says so).
#define REQUIRE_YAML() \
  if (!accelerate_yaml_supported()) GTEST_SKIP() << "built without yaml-cpp (apt-get install libyaml-cpp-dev)"

TEST(AccelerateConfig, ReadsTrlsYamlAsAccelerateDoes) {
  REQUIRE_YAML();
  const AccelerateConfig a = load_accelerate_config(kDir + "trl_deepspeed_zero3.yaml");
  EXPECT_EQ(a.distributed_type, "DEEPSPEED");
  EXPECT_EQ(a.zero_stage, 3);
  EXPECT_EQ(a.gradient_accumulation_steps, 1);
  EXPECT_EQ(a.mixed_precision, "bf16");
  EXPECT_EQ(a.offload_optimizer_device, "none");
  EXPECT_EQ(a.num_processes, 8);
  EXPECT_FALSE(a.deepspeed_config_file);
  const AccelerateConfig z2 = load_accelerate_config(kDir + "trl_deepspeed_zero2.yaml");
  EXPECT_FALSE(z2.gradient_accumulation_steps);
  EXPECT_FALSE(z2.gradient_clipping);
  // YAML 1.1: an unquoted `no` is false, Accelerate's mixed_precision "no".
  EXPECT_EQ(load_accelerate_config(acc_file("no.yaml", "distributed_type: DEEPSPEED\nmixed_precision: no\n")).mixed_precision,
            "no");
  // The JSON form reads too.
  EXPECT_EQ(load_accelerate_config(acc_file("a.json", R"({"distributed_type": "DEEPSPEED", "deepspeed_config": {"zero_stage": 1}})"))
                .zero_stage,
            1);
}

TEST(AccelerateConfig, TheInlineConfigIsFilledFromTheYamlWithEachSource) {
  REQUIRE_YAML();
  ConfigFlags f = accelerate_flags(kDir + "trl_deepspeed_zero3.yaml");
  f.micro_batch = 4;
  const DsConfig c = load_job_config(std::nullopt, f);
  EXPECT_EQ(c.zero.stage, 3);
  EXPECT_EQ(c.precision, Precision::bf16);
  EXPECT_EQ(c.micro_batch, 4);
  EXPECT_EQ(c.grad_accum, 1);
  EXPECT_EQ(c.train_batch_size, 4);
  EXPECT_DOUBLE_EQ(c.gradient_clipping, 1.0) << "the plugin's \"auto\" clipping, filled by prepare()";
  EXPECT_NE(acc_entry(c, "zero_optimization.stage")->note.find("trl_deepspeed_zero3.yaml's deepspeed_config.zero_stage"),
            std::string::npos);
  EXPECT_NE(acc_entry(c, "bf16.enabled")->note.find("mixed_precision"), std::string::npos);
  EXPECT_NE(acc_entry(c, "train_micro_batch_size_per_gpu")->note.find("DataLoader"), std::string::npos);
  EXPECT_NE(acc_entry(c, "gradient_clipping")->note.find("prepare() default"), std::string::npos);
  bool said = false;
  for (const auto& w : c.warnings) said = said || w.find("num_processes 8") != std::string::npos;
  EXPECT_TRUE(said) << "the YAML launches 8 processes, this run 1";
  // Without the DataLoader's batch size there is nothing to fill the micro-batch with.
  f.micro_batch.reset();
  const std::string m = acc_refusal([&] { load_job_config(std::nullopt, f); });
  EXPECT_NE(m.find("train_micro_batch_size_per_gpu"), std::string::npos) << m;
  EXPECT_NE(m.find("--micro-batch"), std::string::npos) << m;
  // The inline YAML builds its own config: a --config beside it is refused.
  f.micro_batch = 4;
  EXPECT_NE(acc_refusal([&] { load_job_config(std::string("x.json"), f); }).find("has no deepspeed_config_file"),
            std::string::npos);
}

TEST(AccelerateConfig, TheSameFileResolvesOtherwiseUnderTheTrainer) {
  REQUIRE_YAML();
  ConfigFlags acc = accelerate_flags(acc_file("z1.yaml", "distributed_type: DEEPSPEED\n"), 4);
  acc.micro_batch = 2;
  ConfigFlags trainer;
  trainer.world_size = 4;
  trainer.total_steps = 10;
  trainer.hidden_size = 64;
  trainer.micro_batch = 2;
  const DsConfig a = parse_ds_config(kAutoConfig, "ds.json", acc), t = parse_ds_config(kAutoConfig, "ds.json", trainer);
  // Accelerate's plugin fills the stage (2 by default); the Trainer leaves it to DeepSpeed.
  EXPECT_EQ(a.zero.stage, 2);
  EXPECT_NE(acc_entry(a, "zero_optimization.stage")->note.find("Accelerate's default"), std::string::npos);
  EXPECT_NE(acc_entry(t, "zero_optimization.stage")->note, acc_entry(a, "zero_optimization.stage")->note);
  // DummyScheduler's total_num_steps is divided by the processes; the Trainer's is the steps.
  EXPECT_EQ(a.scheduler.total_num_steps, 3);  // ceil(10 / 4)
  EXPECT_EQ(t.scheduler.total_num_steps, 10);
  // mixed_precision "no" by default: bf16 off; DummyOptim's lr 0.001.
  EXPECT_EQ(a.precision, Precision::fp32);
  EXPECT_DOUBLE_EQ(a.optimizer.lr, 1e-3);
  EXPECT_EQ(a.train_batch_size, 8);  // micro 2 x gas 1 x 4 processes
  EXPECT_EQ(a.zero.reduce_bucket_size, 64 * 64);
}

TEST(AccelerateConfig, AccelerateRefusesWhatItRefusesInItsOwnWords) {
  REQUIRE_YAML();
  // An "auto" Accelerate has nothing for (betas, eps): fill_match's error.
  ConfigFlags f = accelerate_flags(kDir + "deepspeed_config_file.yaml");
  f.micro_batch = 2;
  std::string m = acc_refusal([&] { load_job_config(std::nullopt, f); });
  EXPECT_NE(m.find("hf_auto_zero2.json"), std::string::npos) << "the YAML's deepspeed_config_file, found beside it: " << m;
  EXPECT_NE(m.find("`optimizer.params.betas` not found in kwargs. Please specify `optimizer.params.betas` without "
                   "`auto`"),
            std::string::npos)
      << m;
  // deepspeed_config_file beside the keys that would fill it.
  m = acc_refusal([&] {
    load_accelerate_config(acc_file("both.yaml", "distributed_type: DEEPSPEED\nmixed_precision: bf16\ndeepspeed_config:\n"
                                             "  deepspeed_config_file: ds.json\n  zero_stage: 3\n"));
  });
  EXPECT_NE(m.find("zero_stage, mixed_precision"), std::string::npos) << m;
  EXPECT_NE(m.find("When using `deepspeed_config_file`, the following accelerate config variables will be ignored"),
            std::string::npos)
      << m;
  // Not a DeepSpeed launch.
  m = acc_refusal([&] { load_accelerate_config(acc_file("ddp.yaml", "distributed_type: MULTI_GPU\n")); });
  EXPECT_NE(m.find("distributed_type is \"MULTI_GPU\", expected DEEPSPEED"), std::string::npos) << m;
  // mixed_precision against the other half precision enabled in the file.
  ConfigFlags b = accelerate_flags(acc_file("bf.yaml", "distributed_type: DEEPSPEED\nmixed_precision: bf16\n"));
  b.micro_batch = 2;
  m = acc_refusal([&] { parse_ds_config(R"({"fp16": {"enabled": true}, "zero_optimization": {"stage": 1}})", "ds.json", b); });
  EXPECT_NE(m.find("`--mixed_precision` arg cannot be set to `bf16` when `fp16` is set in the DeepSpeed config file."),
            std::string::npos)
      << m;
  // A config without zero_optimization.
  m = acc_refusal([&] { parse_ds_config(R"({"train_micro_batch_size_per_gpu": 2})", "ds.json", b); });
  EXPECT_NE(m.find("Please specify the ZeRO optimization config in the DeepSpeed config."), std::string::npos) << m;
  // Bad values name the file, the key and what was expected.
  m = acc_refusal([&] { load_accelerate_config(acc_file("bad.yaml", "deepspeed_config:\n  zero_stage: 4\n")); });
  EXPECT_NE(m.find("deepspeed_config.zero_stage is 4, expected an integer in 0..3"), std::string::npos) << m;
}

TEST(AccelerateConfig, ATrainerScriptUnderAccelerateLaunchKeepsTheTrainersRules) {
  REQUIRE_YAML();
  // TRL's ZeRO-3 YAML (gradient_accumulation_steps 1) with a Trainer asking for 8: the plugin
  // puts 1 in the config, and the Trainer refuses the mismatch as transformers does.
  const std::string args = acc_file("args.json", R"({"per_device_train_batch_size": 4, "gradient_accumulation_steps": 8,
      "learning_rate": 2e-5, "bf16": true})");
  ConfigFlags f = accelerate_flags(kDir + "trl_deepspeed_zero3.yaml");
  apply_training_args(load_training_args(args), f);
  const std::string m = acc_refusal([&] { load_job_config(std::nullopt, f); });
  EXPECT_NE(m.find("gradient_accumulation_steps: is 1 in the file and 8 in the Trainer's arguments"), std::string::npos)
      << m;
  // The ZeRO-2 YAML has no gradient_accumulation_steps: the Trainer fills it, the plugin the stage.
  ConfigFlags g = accelerate_flags(kDir + "trl_deepspeed_zero2.yaml");
  apply_training_args(load_training_args(args), g);
  const DsConfig c = load_job_config(std::nullopt, g);
  EXPECT_EQ(c.grad_accum, 8);
  EXPECT_EQ(c.micro_batch, 4);
  EXPECT_EQ(c.zero.stage, 2);
  EXPECT_EQ(c.precision, Precision::bf16);
  EXPECT_NE(acc_entry(c, "train_micro_batch_size_per_gpu")->note.find("Trainer"), std::string::npos);
}

// Issue 61 item 5, [Note: a user's file is bounded]: YAML whose aliases expand past any
// config (a "billion laughs": 9 levels of 9 aliases, 387 million values) or name
// themselves (an endless walk, once SIGSEGV), and JSON nested 100,000 deep, are refused
// naming the file, at once and in bounded memory.
TEST(AccelerateConfig, AHostileFileIsRefusedNotExpanded) {
  if (!accelerate_yaml_supported()) GTEST_SKIP() << "built without yaml-cpp";
  std::string laughs = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  std::string prev = "a";
  for (const char* n : {"b", "c", "d", "e", "f", "g", "h", "i"}) {
    laughs += std::string(n) + ": &" + n + " [*" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev +
              ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + "]\n";
    prev = n;
  }
  laughs += "distributed_type: DEEPSPEED\ndeepspeed_config: *i\n";
  const std::string e1 = acc_refusal([&] { load_accelerate_config(acc_file("laughs.yaml", laughs)); });
  EXPECT_NE(e1.find("laughs.yaml: nested deeper than 64 levels or more than 10000 values"), std::string::npos) << e1;
  const std::string self = "distributed_type: DEEPSPEED\ndeepspeed_config: &x\n  zero_stage: 2\n  again: *x\n";
  const std::string e2 = acc_refusal([&] { load_accelerate_config(acc_file("self.yaml", self)); });
  EXPECT_NE(e2.find("self.yaml: nested deeper than"), std::string::npos) << e2;
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string e3 = acc_refusal([&] { load_accelerate_config(acc_file("deep.json", "{\"a\": " + deep + "}")); });
  EXPECT_NE(e3.find("deep.json: nested deeper than"), std::string::npos) << e3;
  const std::string e4 = acc_refusal([&] {
    load_ds_config(acc_file("deep_ds.json", "{\"train_micro_batch_size_per_gpu\": 1, \"x\": " + deep + "}"), ConfigFlags{});
  });
  EXPECT_NE(e4.find("deep_ds.json: nested deeper than"), std::string::npos) << e4;
  // Bytes that are not UTF-8 (yaml-cpp passes them; JSON's parser would not) are refused
  // with a message, never an escaped exception (the fuzzer's find: exit 134).
  const std::string e5 = acc_refusal([&] { load_accelerate_config(acc_file("latin1.yaml", "- caf\xe9\n- \xa5\xa4\n")); });
  EXPECT_NE(e5.find("latin1.yaml: expected a mapping of accelerate config keys"), std::string::npos) << e5;
  const std::string e6 = acc_refusal([&] {
    load_accelerate_config(acc_file("latin1_key.yaml", "distributed_type: DEEPSPEED\nmixed_precision: caf\xe9\n"));
  });
  EXPECT_NE(e6.find("mixed_precision is \"caf\xef\xbf\xbd\""), std::string::npos) << e6;
  // A config as deep as a real one reads.
  EXPECT_EQ(acc_refusal([&] { load_accelerate_config(kDir + "trl_deepspeed_zero2.yaml"); }), "(accepted)");
}
