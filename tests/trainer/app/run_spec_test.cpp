// `zrepro run` flags into a RunSpec without a process: defaults, every value check
// naming its flag (exit 2 material), the scale-down rules, and --out kept even when a
// later flag is refused (so the failure summary still has a folder).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "device/base/errors.h"
#include "trainer/app/run_spec.h"

using namespace zrepro;

namespace {

RunSpec parse_spec(std::vector<std::string> args) {
  args.insert(args.begin(), "run");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  RunSpec s;
  parse_run_spec(static_cast<int>(argv.size()), argv.data(), s);
  return s;
}

// The ConfigError message of parsing args ("" when it parses).
std::string spec_error_of(std::vector<std::string> args) {
  try {
    parse_spec(std::move(args));
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(RunSpec, DefaultsAndValues) {
  const RunSpec d = parse_spec({"--config", "c.json"});
  EXPECT_EQ(*d.config_path, "c.json");
  EXPECT_EQ(d.model, "tiny");
  EXPECT_EQ(d.train.steps, 50);
  EXPECT_EQ(d.allocator, "tracking");
  EXPECT_FALSE(d.device_memory);
  EXPECT_FALSE(d.ranks);
  EXPECT_DOUBLE_EQ(d.comm_timeout, 1800);
  const RunSpec s = parse_spec({"--config", "c.json", "--ranks", "4", "--steps", "3", "--device-memory", "2GiB",
                           "--inject", "inf-grad:1:2-", "--micro-batch", "2", "--activation-checkpointing",
                           "--dynamic-seq", "8", "--out", "o"});
  EXPECT_EQ(*s.ranks, 4);
  EXPECT_EQ(s.train.steps, 3);
  EXPECT_EQ(*s.device_memory, int64_t{2} << 30);
  ASSERT_EQ(s.train.inject.size(), 1u);
  EXPECT_EQ(s.train.inject[0].rank, 1);
  EXPECT_EQ(s.train.inject[0].from, 2);
  EXPECT_EQ(*s.flags.micro_batch, 2);
  EXPECT_TRUE(s.job.activation_checkpointing);
  EXPECT_EQ(s.train.dynamic_seq_min, 8);
  EXPECT_EQ(s.out_dir, "o");
}

TEST(RunSpec, EveryRefusalNamesItsFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"--steps", "0"}, "--steps"},
      {{"--ranks", "0"}, "--ranks"},
      {{"--threads", "0"}, "--threads"},
      {{"--host-link-gbps", "-1"}, "--host-link-gbps"},
      {{"--host-link-gbps", "5", "--host-link-profile", "a100-pcie4"}, "--host-link-profile"},
      {{"--pageable-ratio", "1.5"}, "--pageable-ratio"},
      {{"--comm-timeout", "0"}, "--comm-timeout"},
      {{"--allocator", "fancy"}, "--allocator"},
      {{"--device-memory", "lots"}, "--device-memory"},
      {{"--allocator", "plain", "--device-memory", "1GB"}, "--device-memory"},
      {{"--inject", "nonsense"}, "--inject"},
      {{"--steps", "many"}, "--steps"},
      {{"--target-model", "gpt2", "--model", "tiny", "--target-device-memory", "1GB"}, "--model and --target-model"},
      {{"--target-model", "gpt2"}, "--target-device-memory"},
      {{"--target-model", "gpt2", "--target-device-memory", "1GB", "--scale", "0.5"}, "--scale"},
  };
  for (const auto& [args, flag] : bad) {
    const std::string e = spec_error_of(args);
    EXPECT_NE(e.find(flag), std::string::npos) << "args " << args.front() << ": \"" << e << "\"";
  }
}

TEST(RunSpec, OutIsKeptWhenALaterFlagIsRefused) {
  RunSpec s;
  std::vector<std::string> args = {"run", "--out", "somewhere", "--steps", "0"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  EXPECT_THROW(parse_run_spec(static_cast<int>(argv.size()), argv.data(), s), ConfigError);
  EXPECT_EQ(s.out_dir, "somewhere");
}

TEST(RunSpec, ScaleDownFlags) {
  const RunSpec s = parse_spec({"--config", "c.json", "--target-model", "gpt2-xl", "--target-device-memory", "40GB",
                           "--target-world-size", "4", "--scale", "16"});
  EXPECT_EQ(*s.target_model, "gpt2-xl");
  EXPECT_EQ(*s.target_device_memory, int64_t{40000000000});
  EXPECT_EQ(*s.target_world_size, 4);
  EXPECT_DOUBLE_EQ(*s.scale, 16);
  EXPECT_FALSE(parse_spec({"--target-model", "gpt2", "--target-device-memory", "1GB"}).scale) << "auto";
}

TEST(RunSpec, CommTimeoutDefaultsToDeepSpeedsAndItsEnvironment) {
  ::setenv("DEEPSPEED_TIMEOUT", "5", 1);
  EXPECT_DOUBLE_EQ(parse_spec({"--config", "c.json"}).comm_timeout, 300);
  EXPECT_DOUBLE_EQ(parse_spec({"--config", "c.json", "--comm-timeout", "7"}).comm_timeout, 7);
  ::setenv("DEEPSPEED_TIMEOUT", "soon", 1);
  EXPECT_NE(spec_error_of({"--config", "c.json"}).find("DEEPSPEED_TIMEOUT"), std::string::npos);
  ::unsetenv("DEEPSPEED_TIMEOUT");
  EXPECT_DOUBLE_EQ(parse_spec({"--config", "c.json"}).comm_timeout, 1800);
}

TEST(RunSpec, LoaderMemlockAndInterconnectFlags) {
  const RunSpec s = parse_spec({"--config", "c.json", "--loader-workers", "4", "--prefetch-factor", "3", "--sample-ms", "2.5",
                           "--loader-pin-memory", "--memlock-limit", "64KiB", "--interconnect-gbps", "0.5",
                           "--device-memory", "a100-40gb"});
  EXPECT_EQ(s.train.loader.workers, 4);
  EXPECT_EQ(s.train.loader.prefetch_factor, 3);
  EXPECT_DOUBLE_EQ(s.train.loader.sample_ms, 2.5);
  EXPECT_TRUE(s.train.loader.pin_memory);
  EXPECT_EQ(*s.memlock_limit, 65536);
  EXPECT_DOUBLE_EQ(s.interconnect_gbps, 0.5);
  EXPECT_EQ(*s.device_memory, 40540LL * 1048576);
  EXPECT_NE(spec_error_of({"--loader-workers", "-1"}).find("--loader-workers"), std::string::npos);
  EXPECT_NE(spec_error_of({"--prefetch-factor", "0"}).find("--prefetch-factor"), std::string::npos);
  EXPECT_NE(spec_error_of({"--interconnect-gbps", "-2"}).find("--interconnect-gbps"), std::string::npos);
  EXPECT_NE(spec_error_of({"--memlock-limit", "lots"}).find("--memlock-limit"), std::string::npos);
}

TEST(RunSpec, VirtualRanksFlags) {
  const RunSpec v = parse_spec({"--world-size", "8", "--as-rank", "7", "--data-rule", "same"});
  EXPECT_EQ(*v.world_size, 8);
  EXPECT_EQ(v.as_rank, 7);
  EXPECT_TRUE(v.train.same_data);
  const RunSpec d = parse_spec({});
  EXPECT_FALSE(d.world_size.has_value());
  EXPECT_EQ(d.as_rank, 0);
  EXPECT_FALSE(d.train.same_data);
  // Each refusal names the flag, the value and what to do.
  EXPECT_NE(spec_error_of({"--as-rank", "1"}).find("needs --world-size"), std::string::npos);
  EXPECT_NE(spec_error_of({"--world-size", "4", "--as-rank", "4"}).find("expected 0..3"), std::string::npos);
  EXPECT_NE(spec_error_of({"--world-size", "0"}).find("--world-size: got 0"), std::string::npos);
  EXPECT_NE(spec_error_of({"--world-size", "100000"}).find("expected 1..512"), std::string::npos);
  EXPECT_NE(spec_error_of({"--world-size", "4", "--ranks", "2"}).find("give one"), std::string::npos);
  EXPECT_NE(spec_error_of({"--data-rule", "shared"}).find("expected distinct or same"), std::string::npos);
  for (const char* inj : {"gas-mismatch:1", "skip-forward:0", "straggler:1:50"})
    EXPECT_NE(spec_error_of({"--world-size", "2", "--inject", inj}).find("--ranks 2 instead of --world-size 2"),
              std::string::npos)
        << inj;
  EXPECT_EQ(spec_error_of({"--world-size", "2", "--inject", "inf-grad:1:0"}), "");  // numerics: fine
  EXPECT_NE(spec_error_of({"--world-size", "2", "--threads", "2"}).find("one intra-op thread"), std::string::npos);
}

TEST(RunSpec, ThreadsAndRanksHaveUpperBounds) {
  EXPECT_NE(spec_error_of({"--threads", "100000"}).find("expected 1..256"), std::string::npos);
  EXPECT_NE(spec_error_of({"--ranks", "100000"}).find("expected 1..512"), std::string::npos);
}

// [Note: the loss of an accumulated step]: a Trainer job's arguments say which token
// normalisation it runs; --loss-normalization given wins; bad names are refused.
TEST(RunSpec, LossNormalisationFollowsTheTrainersArguments) {
  EXPECT_EQ(parse_spec({"--config", "c.json"}).train.loss_normalization, LossNormalization::mean);
  const std::string dir = testing::TempDir();
  std::ofstream(dir + "/ta_true.json") << R"({"per_device_train_batch_size": 2, "average_tokens_across_devices": true})";
  std::ofstream(dir + "/ta_false.json") << R"({"per_device_train_batch_size": 2, "average_tokens_across_devices": false})";
  std::ofstream(dir + "/ta_old.json") << R"({"per_device_train_batch_size": 2})";
  RunSpec s = parse_spec({"--config", "c.json", "--training-args", dir + "/ta_true.json"});
  EXPECT_EQ(s.train.loss_normalization, LossNormalization::token);
  EXPECT_NE(s.loss_normalization_from.find("average_tokens_across_devices=true"), std::string::npos);
  EXPECT_EQ(parse_spec({"--config", "c.json", "--training-args", dir + "/ta_false.json"}).train.loss_normalization,
            LossNormalization::token_per_rank);
  // A release whose arguments do not have the key: nothing is assumed beyond the default.
  EXPECT_EQ(parse_spec({"--config", "c.json", "--training-args", dir + "/ta_old.json"}).train.loss_normalization,
            LossNormalization::mean);
  EXPECT_EQ(parse_spec({"--config", "c.json", "--training-args", dir + "/ta_true.json", "--loss-normalization", "mean"})
                .train.loss_normalization,
            LossNormalization::mean);
  const std::string e = spec_error_of({"--config", "c.json", "--seq-len-dist", "uniform:4", "--loss-normalization", "sum"});
  EXPECT_NE(e.find("--loss-normalization: got \"sum\""), std::string::npos) << e;
}

TEST(RunSpec, EvaluationAndGenerationFlags) {
  const RunSpec e = parse_spec({"--config", "c.json", "--eval-on-rank0", "3"});
  EXPECT_EQ(e.train.rank_work.eval_every, 3);
  EXPECT_TRUE(e.train.rank_work.eval_rank0_only);
  const RunSpec all = parse_spec({"--config", "c.json", "--eval-on-all-ranks", "2"});
  EXPECT_EQ(all.train.rank_work.eval_every, 2);
  EXPECT_FALSE(all.train.rank_work.eval_rank0_only);
  const RunSpec g = parse_spec({"--config", "c.json", "--generate", "8", "--eos-prob", "0.25", "--synced-gpus"});
  EXPECT_EQ(g.train.rank_work.generate_tokens, 8);
  EXPECT_DOUBLE_EQ(g.train.rank_work.eos_prob, 0.25);
  EXPECT_TRUE(g.train.rank_work.synced_gpus);
  EXPECT_FALSE(parse_spec({"--config", "c.json"}).train.rank_work.any());
  for (const auto& [args, fragment] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--eval-on-rank0", "1", "--eval-on-all-ranks", "1"}, "--eval-on-rank0 with --eval-on-all-ranks"},
           {{"--eval-on-rank0", "0"}, "--eval-on-rank0: got 0"},
           {{"--generate", "0"}, "--generate: got 0"},
           {{"--eos-prob", "0.5"}, "--eos-prob without --generate"},
           {{"--synced-gpus"}, "--synced-gpus without --generate"},
           {{"--generate", "4", "--eos-prob", "1.5"}, "--eos-prob: got 1.5"},
           {{"--world-size", "4", "--peers", "stand-in", "--eval-on-rank0", "1"}, "--eval-on-rank0 with --peers stand-in"},
           {{"--world-size", "4", "--peers", "stand-in", "--generate", "2"}, "--generate without --synced-gpus with --peers stand-in"}}) {
    std::vector<std::string> full = {"--config", "c.json"};
    full.insert(full.end(), args.begin(), args.end());
    EXPECT_NE(spec_error_of(full).find(fragment), std::string::npos) << spec_error_of(full);
  }
}
