// [Note: "auto" as the Trainer fills it] (trainer/config/training_args.h): a Hugging Face
// Trainer config with "auto" values resolved from the job's TrainingArguments as
// transformers does, a flag given on the command line winning (and said), an explicit
// DeepSpeed value that contradicts the Trainer refused as transformers refuses it, and
// bad files named.
#include <gtest/gtest.h>

#include <fstream>

#include "device/base/errors.h"
#include "trainer/config/training_args.h"
#include "zero/lr_schedule.h"

using namespace zrepro;

namespace {

const char* kHfConfig = R"({"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
    "train_batch_size": "auto", "gradient_clipping": "auto", "bf16": {"enabled": "auto"},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto"}},
    "zero_optimization": {"stage": 2}})";

std::string file(const std::string& name, const std::string& text) {
  const std::string path = testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

// trainer.args.to_json_string() of a typical SFT job (the keys that matter, and others).
const char* kArgs = R"({"output_dir": "out", "per_device_train_batch_size": 2, "gradient_accumulation_steps": 8,
    "learning_rate": 2e-05, "weight_decay": 0.1, "max_grad_norm": 0.3, "bf16": true, "fp16": false,
    "gradient_checkpointing": true, "max_seq_length": 2048, "report_to": ["none"], "deepspeed": "ds.json"})";

// load_training_args refuses `text`, saying `what`.
void refused(const std::string& text, const std::string& what) {
  try {
    load_training_args(file("bad.json", text));
    ADD_FAILURE() << "accepted: " << text;
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(TrainingArgs, AutoIsFilledAsTheTrainerFillsIt) {
  const TrainingArgs t = load_training_args(file("args.json", kArgs));
  EXPECT_EQ(t.per_device_train_batch_size, 2);
  EXPECT_EQ(t.precision, "bf16");
  EXPECT_TRUE(t.gradient_checkpointing);
  EXPECT_EQ(t.max_seq_length, 2048);
  ConfigFlags f;
  f.world_size = 4;
  apply_training_args(t, f);
  const DsConfig c = parse_ds_config(kHfConfig, "ds.json", f);
  EXPECT_EQ(c.micro_batch, 2);
  EXPECT_EQ(c.grad_accum, 8);
  EXPECT_EQ(c.train_batch_size, 64) << "world x micro x accumulation";
  EXPECT_EQ(c.precision, Precision::bf16);
  EXPECT_DOUBLE_EQ(c.gradient_clipping, 0.3);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 2e-05);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.1);
  for (const auto& w : c.warnings) EXPECT_EQ(w.find("zrepro assumed"), std::string::npos) << w;
  bool noted = false;
  for (const auto& e : c.entries)
    if (e.path == "train_micro_batch_size_per_gpu") noted = e.note.find("the Trainer's arguments") != std::string::npos;
  EXPECT_TRUE(noted) << "the effective config says where the value came from";
}

TEST(TrainingArgs, AFlagWinsAndAContradictingConfigIsRefusedAsTransformersDoes) {
  const TrainingArgs t = load_training_args(file("args2.json", kArgs));
  ConfigFlags f;
  f.micro_batch = 4;
  apply_training_args(t, f);
  const DsConfig c = parse_ds_config(kHfConfig, "ds.json", f);
  EXPECT_EQ(c.micro_batch, 4);
  bool said = false;
  for (const auto& w : c.warnings) said = said || w.find("--micro-batch 4 wins over the Trainer's per_device_train_batch_size 2") != std::string::npos;
  EXPECT_TRUE(said);
  ConfigFlags g;
  apply_training_args(t, g);
  try {
    parse_ds_config(R"({"train_micro_batch_size_per_gpu": 16, "gradient_accumulation_steps": "auto"})", "ds.json", g);
    ADD_FAILURE() << "a micro-batch that contradicts the Trainer was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("train_micro_batch_size_per_gpu: is 16 in the file and 2 in the Trainer's arguments"),
              std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("mismatch TrainingArguments values"), std::string::npos) << e.what();
  }
}

TEST(TrainingArgs, ABadFileIsNamedWithTheKeyAndWhatWasExpected) {
  refused(R"({"per_device_train_batch_size": "8"})", "per_device_train_batch_size is \"8\", expected an integer > 0");
  refused(R"({"per_device_train_batch_size": 0})", "expected an integer > 0");
  refused(R"({"bf16": true, "fp16": true})", "bf16 and fp16 are both true");
  refused(R"({"bf16": "yes"})", "bf16 is \"yes\", expected true or false");
  refused("[1, 2]", "not a JSON object");
  EXPECT_THROW(load_training_args(testing::TempDir() + "/no_such_args.json"), ConfigError);
  // A folder is named as one (it ended in an uncaught std::ios_base::failure, exit 134).
  try {
    load_training_args(testing::TempDir());
    ADD_FAILURE() << "a folder was read as TrainingArguments";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--training-args: \"" + testing::TempDir() + "\" is a directory"),
              std::string::npos) << e.what();
  }
}

// [Note: what the file leaves to the script] (ds_config.h): a config without "optimizer" or
// "scheduler" says that the job's script brings them and what zrepro runs instead.
TEST(TrainingArgs, AConfigWithoutOptimizerOrSchedulerSaysWhatZreproRunsInstead) {
  ConfigFlags f;
  f.weight_decay = 0.1;
  const DsConfig c = parse_ds_config(R"({"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2}})",
                                     "ds.json", f);
  ASSERT_EQ(c.assumed.size(), 2u);
  EXPECT_NE(c.assumed[0].find("no \"optimizer\" in the file"), std::string::npos) << c.assumed[0];
  EXPECT_NE(c.assumed[0].find("weight decay off for biases and norm weights"), std::string::npos) << c.assumed[0];
  EXPECT_NE(c.assumed[0].find("biases and norm weights decay too"), std::string::npos) << "weight decay 0.1 differs";
  EXPECT_NE(c.assumed[1].find("no \"scheduler\" in the file"), std::string::npos) << c.assumed[1];
  EXPECT_EQ(c.effective_json()["assumed"].size(), 2u) << "summary.json's effective_config says it too";
  const DsConfig full = parse_ds_config(kHfConfig, "ds.json", ConfigFlags{});
  ASSERT_EQ(full.assumed.size(), 1u) << "the optimizer is the file's";
  EXPECT_NE(full.assumed[0].find("\"scheduler\""), std::string::npos);
  const DsConfig no_decay = parse_ds_config(R"({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 1}})",
                                           "ds.json", ConfigFlags{});
  EXPECT_EQ(no_decay.assumed[0].find("decay too"), std::string::npos) << "no decay, no difference to name";
  // LLaMA-Factory's ZeRO-3 offload config: Accelerate swaps the Trainer's AdamW for DeepSpeedCPUAdam.
  const DsConfig offload = parse_ds_config(R"({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 3,
      "offload_optimizer": {"device": "cpu", "pin_memory": true}}})", "ds.json", ConfigFlags{});
  EXPECT_NE(offload.assumed[0].find("which Accelerate swaps for DeepSpeedCPUAdam under the offload"), std::string::npos)
      << offload.assumed[0];
  EXPECT_EQ(c.assumed[0].find("DeepSpeedCPUAdam"), std::string::npos) << "no offload, no swap";
}

// [Note: the Trainer's schedule] (zero/zero_config.h): a config without "scheduler" run with
// the job's TrainingArguments steps the lr as transformers' get_scheduler does, step for
// step, against transformers' own figures (conformance/results/trainer_schedules.json,
// recorded by conformance/trainer_schedules.py).
TEST(TrainingArgs, WithoutASchedulerTheLrIsTheTrainersOwnScheduleStepForStep) {
  std::ifstream in(std::string(ZREPRO_SOURCE_DIR).append("/conformance/results/trainer_schedules.json"));
  ASSERT_TRUE(in) << "the record of transformers' schedules";
  const nlohmann::json record = nlohmann::json::parse(in);
  ASSERT_GE(record["cases"].size(), 9u);
  for (const auto& c : record["cases"]) {
    const std::string name = c["name"];
    ConfigFlags f;
    f.total_steps = c["steps"];
    apply_training_args(load_training_args(file("sched.json", c["training_args"].dump())), f);
    const DsConfig cfg = parse_ds_config(R"({"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW",
        "params": {"lr": "auto"}}})", "ds.json", f);
    ASSERT_TRUE(cfg.scheduler.trainer) << name;
    EXPECT_EQ(cfg.scheduler.warmup_num_steps, c["warmup_steps"].get<int64_t>()) << name;
    const LrSchedule s(cfg.scheduler, cfg.optimizer.lr);
    const auto& lrs = c["lrs"];
    for (size_t k = 0; k < lrs.size(); ++k)  // step k runs at DeepSpeed's iteration k - 1
      EXPECT_NEAR(s.lr_at(int64_t(k) - 1), lrs[k].get<double>(), 1e-15) << name << " step " << k;
    const double last_lr = c["state_dict_after_2_steps"]["_last_lr"][0];
    EXPECT_NEAR(s.lr_at(1), last_lr, 1e-15) << name << ": the lr a LambdaLR saved after 2 steps holds";
  }
  // With the job's max_steps the schedule spans the job, and the run takes its first steps.
  ConfigFlags g;
  g.total_steps = 4;
  apply_training_args(load_training_args(file("max_steps.json", R"({"max_steps": 100, "warmup_steps": 0.1})")), g);
  const DsConfig m = parse_ds_config(R"({"train_micro_batch_size_per_gpu": 1})", "ds.json", g);
  EXPECT_EQ(m.scheduler.total_num_steps, 100);
  EXPECT_EQ(m.scheduler.warmup_num_steps, 10) << "ceil(100 x 0.1)";
  ASSERT_EQ(m.assumed.size(), 2u);
  EXPECT_NE(m.assumed[1].find("warmup 10 of 100 steps (max_steps; the run takes the first 4)"), std::string::npos)
      << m.assumed[1];
}

// A schedule zrepro does not run, or kwargs it does not take, are refused naming the key.
TEST(TrainingArgs, AScheduleZreproDoesNotRunIsRefusedNamingTheKey) {
  refused(R"({"lr_scheduler_type": "polynomial"})", "lr_scheduler_type is \"polynomial\"; zrepro runs constant, constant_with_warmup, cosine");
  refused(R"({"lr_scheduler_type": "cosine", "lr_scheduler_kwargs": {"power": 2}})", "lr_scheduler_kwargs has power = 2");
  refused(R"({"lr_scheduler_type": "cosine_with_min_lr"})", "needs exactly one of min_lr and min_lr_rate");
  refused(R"({"warmup_steps": 1.5})", "warmup_steps is 1.5, expected an integer >= 0 or a share");
  refused(R"({"warmup_ratio": 1.0})", "warmup_ratio is 1.0, expected [0, 1)");
  // The file's "scheduler" wins over the Trainer's: transformers hands DeepSpeed its own.
  ConfigFlags f;
  f.total_steps = 10;
  apply_training_args(load_training_args(file("sched_ok.json", R"({"lr_scheduler_type": "cosine"})")), f);
  const DsConfig c = parse_ds_config(R"({"train_micro_batch_size_per_gpu": 1, "scheduler": {"type": "WarmupLR",
      "params": {"warmup_num_steps": 2}}})", "ds.json", f);
  EXPECT_FALSE(c.scheduler.trainer);
  EXPECT_EQ(c.scheduler.type, "WarmupLR");
}
