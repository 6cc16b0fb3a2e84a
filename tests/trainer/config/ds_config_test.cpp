// DeepSpeed config loading: defaults, batch-triple derivation and its errors,
// "auto" resolution, flag overrides, deprecated and unknown keys, bad input.
#include <gtest/gtest.h>

#include <algorithm>

#include "device/base/errors.h"
#include "trainer/config/ds_config.h"

using namespace zrepro;

namespace {

DsConfig parse(const std::string& text, ConfigFlags f = {}) { return parse_ds_config(text, "test.json", f); }

const ConfigEntry& entry(const DsConfig& c, const std::string& path) {
  for (const auto& e : c.entries)
    if (e.path == path) return e;
  throw std::runtime_error("no entry " + path);
}

// Expects a ConfigError whose message contains every fragment.
void expect_error(const std::string& text, std::initializer_list<std::string> fragments, ConfigFlags f = {}) {
  try {
    parse(text, f);
    FAIL() << "no error for " << text;
  } catch (const ConfigError& e) {
    for (const auto& frag : fragments) EXPECT_NE(std::string(e.what()).find(frag), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(Config, DefaultsMatchDeepSpeed0196) {
  DsConfig c = parse(R"({"train_micro_batch_size_per_gpu": 2})");
  EXPECT_EQ(c.zero.stage, 0);
  EXPECT_TRUE(c.zero.contiguous_gradients);
  EXPECT_TRUE(c.zero.reduce_scatter);
  EXPECT_EQ(c.zero.reduce_bucket_size, 500000000);
  EXPECT_EQ(c.zero.allgather_bucket_size, 500000000);
  EXPECT_FALSE(c.zero.overlap_comm);  // only stage 3 defaults to true
  EXPECT_EQ(c.zero.sub_group_size, 1000000000);
  EXPECT_EQ(c.zero.stage3_prefetch_bucket_size, 50000000);
  EXPECT_EQ(c.zero.stage3_param_persistence_threshold, 100000);
  EXPECT_EQ(c.zero.stage3_max_live_parameters, 1000000000);
  EXPECT_TRUE(c.zero.offload_optimizer.pin_memory);  // true since 0.19.5
  EXPECT_TRUE(c.zero.offload_param.pin_memory);
  EXPECT_EQ(c.zero.offload_param.buffer_count, 5);
  EXPECT_EQ(c.zero.offload_optimizer.buffer_count, 4);
  EXPECT_EQ(c.fp16.initial_scale_power, 16);
  EXPECT_EQ(c.fp16.loss_scale_window, 1000);
  EXPECT_EQ(c.fp16.hysteresis, 2);
  EXPECT_EQ(c.fp16.min_loss_scale, 1);
  EXPECT_TRUE(c.bf16_check_grad_overflow);
  EXPECT_DOUBLE_EQ(c.gradient_clipping, 1.0);  // 1.0 since 0.19.3
  EXPECT_FALSE(c.steps_per_print.has_value());
  EXPECT_EQ(c.communication_data_type, "fp32");
  EXPECT_TRUE(c.managed_gradient_accumulation);
  EXPECT_EQ(c.precision, Precision::fp32);
  EXPECT_EQ(entry(c, "zero_optimization.stage").source, Source::default_);
  EXPECT_TRUE(c.warnings.empty());
}

TEST(Config, Stage3TurnsOverlapCommOn) {
  EXPECT_TRUE(parse(R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3}})").zero.overlap_comm);
}

TEST(Config, CommunicationDtypeFollowsPrecision) {
  EXPECT_EQ(parse(R"({"train_micro_batch_size_per_gpu": 1, "fp16": {"enabled": true}})").communication_data_type, "fp16");
  EXPECT_EQ(parse(R"({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true}})").communication_data_type, "bf16");
}

TEST(BatchTriple, EveryCombination) {
  // {tb, micro, gas} given -> derived, world size 4.
  auto d = [](std::optional<int64_t> tb, std::optional<int64_t> mb, std::optional<int64_t> gas) {
    return derive_batch_triple(tb, mb, gas, 4);
  };
  auto eq = [](const BatchTriple& b, int64_t tb, int64_t mb, int64_t gas) {
    EXPECT_EQ(b.train_batch_size, tb);
    EXPECT_EQ(b.micro_batch, mb);
    EXPECT_EQ(b.grad_accum, gas);
  };
  eq(d(32, 2, 4), 32, 2, 4);
  eq(d(32, 2, std::nullopt), 32, 2, 4);
  eq(d(32, std::nullopt, 2), 32, 4, 2);
  eq(d(std::nullopt, 2, 3), 24, 2, 3);
  eq(d(32, std::nullopt, std::nullopt), 32, 8, 1);
  eq(d(std::nullopt, 2, std::nullopt), 8, 2, 1);
  EXPECT_THROW(d(std::nullopt, std::nullopt, 2), ConfigError);
  EXPECT_THROW(d(std::nullopt, std::nullopt, std::nullopt), ConfigError);
}

TEST(BatchTriple, MismatchNamesTheThreeNumbersAndWorldSize) {
  try {
    derive_batch_triple(32, 2, 2, 4);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * "
                                         "world_size 32 != 2 * 2 * 4"),
              std::string::npos)
        << e.what();
  }
  // Integer division can derive 0, which DeepSpeed rejects by name.
  expect_error(R"({"train_batch_size": 4, "train_micro_batch_size_per_gpu": 8})",
               {"Gradient accumulation steps: 0 has to be greater than 0"});
  expect_error(R"({"gradient_accumulation_steps": 2})", {"Either train_batch_size or train_micro_batch_size_per_gpu"});
  // The same config that worked on 1 GPU breaks on 3: the error says so.
  ConfigFlags f;
  f.world_size = 3;
  expect_error(R"({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4})",
               {"16 != 4 * 4 * 3", "world size 3"}, f);
}

TEST(Config, NonPositiveBatchNumbers) {
  expect_error(R"({"train_micro_batch_size_per_gpu": 0})", {"train_micro_batch_size_per_gpu", "positive"});
  expect_error(R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": -1})",
               {"gradient_accumulation_steps", "-1"});
}

TEST(Config, HfAutoValuesResolveFromFlagsAndDefaults) {
  const std::string text = R"({
    "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
    "fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
    "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                  "warmup_num_steps": "auto", "total_num_steps": "auto"}},
    "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
                          "stage3_param_persistence_threshold": "auto", "sub_group_size": "auto"}})";
  ConfigFlags f;
  f.world_size = 2;
  f.micro_batch = 3;
  f.grad_accum = 4;
  f.lr = 2e-4;
  f.precision = "bf16";
  f.warmup_steps = 7;
  f.total_steps = 99;
  f.hidden_size = 64;
  DsConfig c = parse(text, f);
  EXPECT_EQ(c.micro_batch, 3);
  EXPECT_EQ(c.grad_accum, 4);
  EXPECT_EQ(c.train_batch_size, 24);
  EXPECT_EQ(entry(c, "train_batch_size").source, Source::auto_);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 2e-4);
  EXPECT_DOUBLE_EQ(c.optimizer.beta1, 0.9);
  EXPECT_DOUBLE_EQ(c.optimizer.beta2, 0.999);
  EXPECT_DOUBLE_EQ(c.optimizer.eps, 1e-8);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.0);
  EXPECT_DOUBLE_EQ(c.gradient_clipping, 1.0);
  EXPECT_EQ(c.precision, Precision::bf16);
  EXPECT_DOUBLE_EQ(c.scheduler.warmup_max_lr, 2e-4);
  EXPECT_EQ(c.scheduler.warmup_num_steps, 7);
  EXPECT_EQ(c.scheduler.total_num_steps, 99);
  EXPECT_EQ(c.zero.reduce_bucket_size, 64 * 64);
  EXPECT_EQ(c.zero.stage3_prefetch_bucket_size, static_cast<int64_t>(0.9 * 64 * 64));
  EXPECT_EQ(c.zero.stage3_param_persistence_threshold, 640);
  // An "auto" the HF integration does not fill falls back to DeepSpeed's default.
  EXPECT_EQ(c.zero.sub_group_size, 1000000000);
  EXPECT_EQ(entry(c, "zero_optimization.sub_group_size").source, Source::auto_);
  EXPECT_EQ(entry(c, "optimizer.params.lr").source, Source::auto_);
  EXPECT_EQ(entry(c, "optimizer.params.lr").note, "from --lr");
}

TEST(Config, AutoWithoutFlagsUsesDocumentedDefaults) {
  DsConfig c = parse(R"({"train_micro_batch_size_per_gpu": "auto", "optimizer": {"type": "Adam", "params": {"lr": "auto"}}})");
  EXPECT_EQ(c.micro_batch, 8);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 1e-3);
  EXPECT_EQ(entry(c, "optimizer.params.lr").note, "default of --lr");
  EXPECT_TRUE(c.optimizer.adam_w_mode);  // DeepSpeed's "Adam" is AdamW unless adam_w_mode is false
}

TEST(Config, FlagsOverrideFileValuesWithAWarning) {
  ConfigFlags f;
  f.micro_batch = 2;
  f.zero_stage = 1;
  DsConfig c = parse(R"({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2}})", f);
  EXPECT_EQ(c.micro_batch, 2);
  EXPECT_EQ(c.grad_accum, 4);  // derived again from the overridden micro-batch
  EXPECT_EQ(c.zero.stage, 1);
  EXPECT_EQ(entry(c, "zero_optimization.stage").source, Source::flag);
  EXPECT_EQ(entry(c, "gradient_accumulation_steps").source, Source::derived);
  ASSERT_FALSE(c.warnings.empty());
  EXPECT_NE(c.warnings[0].find("--zero-stage"), std::string::npos);
}

TEST(Config, DeprecatedKeysAreMappedWithAWarning) {
  DsConfig c = parse(R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3,
      "cpu_offload": true, "cpu_offload_param": true, "cpu_offload_use_pin_memory": false,
      "stage3_gather_fp16_weights_on_model_save": true}})");
  EXPECT_EQ(c.zero.offload_optimizer.device, "cpu");
  EXPECT_EQ(c.zero.offload_param.device, "cpu");
  // cpu_offload_use_pin_memory has no effect in DeepSpeed (a warning): the default applies.
  EXPECT_TRUE(c.zero.offload_optimizer.pin_memory);
  EXPECT_TRUE(c.zero.offload_param.pin_memory);
  EXPECT_TRUE(c.zero.stage3_gather_16bit_weights_on_model_save);
  EXPECT_EQ(c.warnings.size(), 4u);
  EXPECT_NE(c.warnings[0].find("deprecated"), std::string::npos);
  // Both spellings of one stage-3 setting: DeepSpeed refuses the unprefixed one.
  expect_error(R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3,
      "max_live_parameters": 5, "stage3_max_live_parameters": 6}})", {"max_live_parameters", "Extra inputs are not permitted"});
}

TEST(Config, RealWorldSpellingsDeepSpeedAccepts) {
  // axolotl's zero3_bf16_cpuoffload_all.json: sub_group_size 0 and the pydantic
  // field names max_live_parameters / max_reuse_distance (conformance/configs/).
  DsConfig c = parse(R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3,
      "sub_group_size": 0, "max_live_parameters": 0, "max_reuse_distance": 0,
      "gather_16bit_weights_on_model_save": true}})");
  EXPECT_EQ(c.zero.sub_group_size, 0);
  EXPECT_EQ(c.zero.stage3_max_live_parameters, 0);
  EXPECT_EQ(c.zero.stage3_max_reuse_distance, 0);
  EXPECT_TRUE(c.zero.stage3_gather_16bit_weights_on_model_save);
  EXPECT_TRUE(c.warnings.empty()) << c.warnings.at(0);
  // Both spellings are refused (DeepSpeed's pydantic model: Config.DeprecatedKeysAreMappedWithAWarning).
  // DeepSpeedExamples' WarmupCosineLR.
  DsConfig cos = parse(R"({"train_micro_batch_size_per_gpu": 1, "scheduler": {"type": "WarmupCosineLR",
      "params": {"total_num_steps": 1000, "warmup_min_ratio": 0, "warmup_num_steps": 100, "cos_min_ratio": 0.001,
      "warmup_type": "linear"}}})");
  EXPECT_EQ(cos.scheduler.type, "WarmupCosineLR");
  EXPECT_EQ(cos.scheduler.total_num_steps, 1000);
  EXPECT_DOUBLE_EQ(cos.scheduler.cos_min_ratio, 0.001);
  expect_error(R"({"train_micro_batch_size_per_gpu": 1, "scheduler": {"type": "WarmupCosineLR",
      "params": {"total_num_steps": 10, "warmup_num_steps": 0}}})", {"warmup_num_steps", "positive integer"});
  expect_error(R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"sub_group_size": -1}})",
               {"sub_group_size", ">= 0"});
}

TEST(Config, UnknownKeysWarnOrFailUnderStrict) {
  const std::string text = R"({"train_micro_batch_size_per_gpu": 1, "zero_optimisation": {"stage": 2},
                               "fp16": {"enabled": false, "loss_scael": 0}})";
  // DeepSpeed >= 0.17.1 validates the fp16 block itself: the typo is refused as it would be.
  expect_error(text, {"fp16.loss_scael", "Extra inputs are not permitted", "0.17.1"});
  ConfigFlags older;
  older.deepspeed_version = "0.17.0";  // before that, ignored; zrepro warns
  DsConfig c = parse(text, older);
  ASSERT_EQ(c.warnings.size(), 2u);
  EXPECT_NE(c.warnings[0].find("fp16.loss_scael"), std::string::npos);
  EXPECT_NE(c.warnings[1].find("zero_optimisation"), std::string::npos);
  ConfigFlags strict = older;
  strict.strict = true;
  expect_error(text, {"loss_scael", "--strict"}, strict);
  // Keys DeepSpeed knows but zrepro does not emulate are noted, never errors.
  DsConfig k = parse(R"({"train_micro_batch_size_per_gpu": 1, "zero_allow_untested_optimizer": true})", strict);
  EXPECT_NE(k.warnings.at(0).find("does not emulate"), std::string::npos);
}

TEST(Config, MalformedJsonGivesLineAndColumn) {
  expect_error("{\n  \"train_micro_batch_size_per_gpu\": 1,\n}\n", {"test.json", "malformed JSON at line 3, column 1"});
}

TEST(Config, WrongTypesNameKeyValueAndExpectation) {
  expect_error(R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": "two"}})",
               {"zero_optimization.stage", "expected an integer", "\"two\""});
  expect_error(R"({"train_micro_batch_size_per_gpu": 1, "fp16": {"enabled": "yes"}})", {"fp16.enabled", "true or false"});
  expect_error(R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": 2})", {"zero_optimization", "expected an object"});
  expect_error(R"({"train_micro_batch_size_per_gpu": 1.5})", {"train_micro_batch_size_per_gpu", "integer"});
  expect_error(R"([1, 2])", {"top level"});
}

TEST(Config, IntegralFloatsAreAcceptedForSizes) {
  EXPECT_EQ(parse(R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"reduce_bucket_size": 5e7}})")
                .zero.reduce_bucket_size,
            50000000);
}

TEST(Config, OutOfRangeValues) {
  const std::string mb = R"("train_micro_batch_size_per_gpu": 1, )";
  expect_error("{" + mb + R"("zero_optimization": {"stage": 4}})", {"zero_optimization.stage", "got 4", "0, 1, 2 or 3"});
  expect_error("{" + mb + R"("zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}})",
               {"offload_param", "stage 3"});
  expect_error("{" + mb + R"("zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "ratio": 0.5}}})",
               {"Partial offloading only supported for ZeRO Stage 3"});
  expect_error("{" + mb + R"("optimizer": {"type": "Lamb"}})", {"optimizer.type", "Lamb", "Adam"});
  expect_error("{" + mb + R"("zero_optimization": {"offload_optimizer": {"device": "gpu"}}})",
               {"offload_optimizer.device", "none, cpu, nvme"});
  expect_error("{" + mb + R"("fp16": {"enabled": true}, "bf16": {"enabled": true}})", {"both enabled"});
  expect_error("{" + mb + R"("scheduler": {"type": "WarmupDecayLR", "params": {}}})", {"total_num_steps", "required"});
  expect_error("{" + mb + R"("zero_optimization": {"reduce_bucket_size": 0}})", {"reduce_bucket_size", "> 0"});
}

TEST(Config, ResolvedJsonRoundTrips) {
  ConfigFlags f;
  f.world_size = 2;
  DsConfig c = parse(R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
                         "zero_optimization": {"stage": 2, "reduce_bucket_size": 1000}})", f);
  DsConfig again = parse(c.resolved_json().dump(), f);
  EXPECT_EQ(again.train_batch_size, 8);
  EXPECT_EQ(again.zero.stage, 2);
  EXPECT_EQ(again.zero.reduce_bucket_size, 1000);
  for (const auto& e : again.entries)
    if (!e.value.is_null() && e.path != "communication_data_type") {
      EXPECT_EQ(e.source, Source::file) << e.path;
    }
}

// Issue 14: DeepSpeed refuses a key given twice in one object; so does zrepro, strict or not.
TEST(Config, DuplicateKeysAreRefusedAsDeepSpeedDoes) {
  expect_error(R"({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 2, "stage": 3}})",
               {"Duplicate keys in DeepSpeed config", "\"stage\""});
  expect_error(R"({"train_micro_batch_size_per_gpu": 2, "train_micro_batch_size_per_gpu": 4})",
               {"Duplicate keys", "train_micro_batch_size_per_gpu"});
  // The same key in two different objects is no duplicate.
  EXPECT_NO_THROW(parse(R"({"train_micro_batch_size_per_gpu": 2, "fp16": {"enabled": false},
                           "bf16": {"enabled": false}})"));
}

// Found by scripts/fuzz.sh: a number past a double escaped the parser as out_of_range.
TEST(Config, ANumberPastADoubleIsABadConfigNotACrash) {
  expect_error(R"({"train_micro_batch_size_per_gpu": 1e9777777777777777777777})", {"number overflow", "fit a double"});
}

TEST(Config, ADirectoryAsConfigIsNamedAsOne) {
  try {
    load_ds_config(testing::TempDir(), ConfigFlags{});
    FAIL() << "a directory was loaded";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos) << e.what();
  }
}

// [Note: "auto" filled by zrepro is said]: a Hugging Face Trainer config whose micro-batch,
// accumulation and precision are "auto" gets one warning each when zrepro fills them with
// its own defaults, naming the flag and the Trainer argument; none when the flags are given.
TEST(Config, AutoFilledByZreprosDefaultIsAWarningNamingTheFlag) {
  const std::string hf = R"({"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
      "train_batch_size": "auto", "bf16": {"enabled": "auto"}, "fp16": {"enabled": "auto"},
      "optimizer": {"type": "AdamW", "params": {"lr": "auto"}}})";
  const DsConfig quiet = parse(hf);
  auto said = [](const DsConfig& c, const std::string& what) {
    return std::count_if(c.warnings.begin(), c.warnings.end(),
                         [&](const std::string& w) { return w.find(what) != std::string::npos; });
  };
  EXPECT_EQ(said(quiet, "train_micro_batch_size_per_gpu is \"auto\" and no --micro-batch was given: zrepro assumed 8"), 1);
  EXPECT_EQ(said(quiet, "fills it from per_device_train_batch_size"), 1);
  EXPECT_EQ(said(quiet, "no --grad-accum was given: zrepro assumed 1"), 1);
  EXPECT_EQ(said(quiet, "no --precision was given: zrepro assumed fp32"), 1) << "one warning for bf16 and fp16";
  ConfigFlags f;
  f.micro_batch = 2, f.grad_accum = 4, f.precision = "bf16";
  const DsConfig given = parse(hf, f);
  EXPECT_EQ(said(given, "is \"auto\" and no"), 0);
  EXPECT_EQ(given.micro_batch, 2);
  EXPECT_EQ(given.precision, Precision::bf16);
}
