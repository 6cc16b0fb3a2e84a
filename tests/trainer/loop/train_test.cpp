// The single-rank training loop: the loss falls, accumulation splits are
// equivalent, mixed precision trains, and the fp16 loss scaler skips, halves
// and finally aborts under injected inf gradients.
#include <gtest/gtest.h>

#include <set>

#include "device/base/errors.h"
#include "trainer/config/ds_config.h"
#include "trainer/config/model_spec.h"
#include "trainer/loop/loss_normalization.h"
#include "trainer/model/data.h"
#include "trainer/loop/train.h"
#include "tests/support/train_helpers.h"

using namespace zrepro;

namespace {

DsConfig config(const std::string& json, ConfigFlags f = {}) { return parse_ds_config(json, "test.json", f); }

TrainResult run(const DsConfig& cfg, int64_t steps, std::vector<Injection> inject = {}) {
  return zrepro_test::train_tiny(cfg, steps, std::move(inject));
}

const char* kAdam = R"("optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.01}})";

}  // namespace

TEST(Train, LossFallsOnTiny) {
  TrainResult r = run(config(std::string(R"({"train_micro_batch_size_per_gpu": 8, )") + kAdam + "}"), 200);
  ASSERT_EQ(r.steps.size(), 200u);
  double first = r.steps.front().loss, last = 0;
  for (int i = 190; i < 200; ++i) last += r.steps[i].loss / 10;
  EXPECT_NEAR(first, std::log(128.0), 0.3);
  EXPECT_LT(last, 0.5 * first) << "first " << first << " last " << last;
  EXPECT_EQ(r.skipped_steps, 0);
}

TEST(Train, MicroBatchTimesAccumulationSplitsAreEquivalent) {
  const std::string base = std::string(kAdam) + R"(, "train_batch_size": 4})";
  TrainResult a = run(config(R"({"train_micro_batch_size_per_gpu": 4, )" + base), 15);
  TrainResult b = run(config(R"({"train_micro_batch_size_per_gpu": 1, )" + base), 15);
  TrainResult c = run(config(R"({"train_micro_batch_size_per_gpu": 2, )" + base), 15);
  ASSERT_EQ(a.steps.size(), b.steps.size());
  for (size_t i = 0; i < a.steps.size(); ++i) {
    EXPECT_NEAR(a.steps[i].loss, b.steps[i].loss, 1e-5 * a.steps[i].loss) << "step " << i;
    EXPECT_NEAR(a.steps[i].loss, c.steps[i].loss, 1e-5 * a.steps[i].loss) << "step " << i;
    EXPECT_NEAR(a.steps[i].grad_norm, b.steps[i].grad_norm, 1e-4 * a.steps[i].grad_norm) << "step " << i;
  }
  // Accumulation really happened: gas 4 for b, with a falling loss.
  EXPECT_LT(b.steps.back().loss, b.steps.front().loss);
}

TEST(Train, Bf16TracksFp32WithinBf16Tolerance) {
  const std::string base = std::string(R"({"train_micro_batch_size_per_gpu": 8, )") + kAdam;
  TrainResult f32 = run(config(base + "}"), 30);
  TrainResult b16 = run(config(base + R"(, "bf16": {"enabled": true}})"), 30);
  for (size_t i = 0; i < f32.steps.size(); ++i)
    EXPECT_NEAR(b16.steps[i].loss, f32.steps[i].loss, 0.05 * f32.steps[i].loss) << "step " << i;
  EXPECT_EQ(b16.skipped_steps, 0);
}

TEST(Train, Fp16TrainsWithDynamicLossScale) {
  TrainResult r = run(config(std::string(R"({"train_micro_batch_size_per_gpu": 8, )") + kAdam +
                             R"(, "fp16": {"enabled": true}})"),
                      30);
  EXPECT_EQ(r.steps.front().loss_scale, 65536);
  EXPECT_LT(r.steps.back().loss, r.steps.front().loss - 0.5);
}

TEST(Train, InjectedOverflowSkipsStepsAndHalvesScale) {
  DsConfig cfg = config(std::string(R"({"train_micro_batch_size_per_gpu": 4, )") + kAdam +
                        R"(, "fp16": {"enabled": true, "initial_scale_power": 8, "hysteresis": 2}})");
  TrainResult clean = run(cfg, 6);
  TrainResult r = run(cfg, 6, {parse_injection("inf-grad:0:2-3")});
  EXPECT_FALSE(r.steps[1].skipped);
  EXPECT_TRUE(r.steps[2].skipped);  // hysteresis 2 -> 1, scale kept
  EXPECT_EQ(r.steps[2].loss_scale, 256);
  EXPECT_TRUE(r.steps[3].skipped);  // hysteresis used up: halves
  EXPECT_EQ(r.steps[3].loss_scale, 256);
  EXPECT_EQ(r.steps[4].loss_scale, 128);
  EXPECT_FALSE(r.steps[4].skipped);
  EXPECT_EQ(r.skipped_steps, 2);
  EXPECT_TRUE(std::isnan(r.steps[2].grad_norm));
  // Before the injection both runs are the same run.
  EXPECT_DOUBLE_EQ(r.steps[1].loss, clean.steps[1].loss);
}

TEST(Train, OverflowAtMinimumScaleIsANumericalFailure) {
  DsConfig cfg = config(std::string(R"({"train_micro_batch_size_per_gpu": 2, )") + kAdam +
                        R"(, "fp16": {"enabled": true, "initial_scale_power": 2, "hysteresis": 1}})");
  TrainOptions o;
  o.steps = 10;
  o.inject = {parse_injection("inf-grad:0:1-")};
  TrainResult r;
  EXPECT_THROW(train(zrepro_test::one_rank_job(cfg), o, r), NumericalError);
  // scale 4 -> 2 (step 1), 2 -> 1 (step 2), abort at step 3.
  EXPECT_EQ(r.steps.size(), 3u);
  EXPECT_EQ(r.skipped_steps, 2);
}

TEST(Train, SchedulerDoesNotAdvanceOnSkippedSteps) {
  DsConfig cfg = config(std::string(R"({"train_micro_batch_size_per_gpu": 2, )") + kAdam +
                        R"(, "fp16": {"enabled": true, "hysteresis": 1},
                           "scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": 0.01,
                                         "warmup_num_steps": 10, "warmup_type": "linear"}}})");
  TrainResult r = run(cfg, 5, {parse_injection("inf-grad:0:1")});
  EXPECT_DOUBLE_EQ(r.steps[0].lr, 0.0);    // iteration -1
  EXPECT_DOUBLE_EQ(r.steps[1].lr, 0.0);    // iteration 0, skipped
  EXPECT_DOUBLE_EQ(r.steps[2].lr, 0.0);    // still iteration 0
  EXPECT_DOUBLE_EQ(r.steps[3].lr, 0.001);  // iteration 1
}

TEST(Train, InjectionSpecParsing) {
  Injection a = parse_injection("inf-grad:0:3");
  EXPECT_TRUE(a.covers(3));
  EXPECT_FALSE(a.covers(4));
  Injection b = parse_injection("inf-grad:1:2-");
  EXPECT_EQ(b.rank, 1);
  EXPECT_TRUE(b.covers(100));
  EXPECT_FALSE(b.covers(1));
  EXPECT_THROW(parse_injection("bogus:0"), ConfigError);
  EXPECT_THROW(parse_injection("inf-grad:x"), ConfigError);
  // Issue 14: a reversed range, a number with trailing text or none at all is refused.
  for (const char* bad : {"inf-grad:0:5-3", "inf-grad:0:3x", "inf-grad:1x", "inf-grad:-1", "straggler:0:1e999",
                          "straggler:0:5ms", "loss-spike:0:nan", "skip-forward:0:-2"})
    EXPECT_THROW(parse_injection(bad), ConfigError) << bad;
  try {
    parse_injection("inf-grad:0:5-3");
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("reversed"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("3-5"), std::string::npos) << e.what();
  }
}

// [Note: injections are resolved once per step]: every kind parses from its name, and
// faults_at gives each rank and step exactly what its injections say, no more.
TEST(Train, InjectionsResolveIntoEachStepsFaults) {
  for (const char* spec : {"inf-grad:0", "gas-mismatch:0", "skip-forward:0", "straggler:0:5", "drop-accumulated-grads:0",
                           "loss-spike:0:3"}) {
    const Injection inj = parse_injection(spec);
    EXPECT_EQ(std::string(spec).rfind(inject_kind_name(inj.kind), 0), 0u) << spec;
  }
  const std::vector<Injection> inject = {parse_injection("gas-mismatch:1"), parse_injection("skip-forward:0:2"),
                                         parse_injection("straggler:0:7.5"), parse_injection("loss-spike:1:4"),
                                         parse_injection("inf-grad:0:1-2"), parse_injection("drop-accumulated-grads:0")};
  const StepFaults quiet = faults_at(inject, 0, 0, 4);
  EXPECT_EQ(quiet.gas, 4);
  EXPECT_FALSE(quiet.skip_first);
  EXPECT_DOUBLE_EQ(quiet.straggle_ms, 7.5);  // every step
  EXPECT_DOUBLE_EQ(quiet.grad_factor, 1);    // rank 1's spike is not rank 0's
  EXPECT_FALSE(quiet.inf_grad);
  EXPECT_TRUE(quiet.runs(0));
  const StepFaults s2 = faults_at(inject, 0, 2, 4);
  EXPECT_TRUE(s2.skip_first);
  EXPECT_FALSE(s2.runs(0));
  EXPECT_TRUE(s2.runs(1));
  EXPECT_TRUE(s2.inf_grad);
  EXPECT_FALSE(faults_at(inject, 0, 3, 4).inf_grad);  // the range ends at 2
  const StepFaults r1 = faults_at(inject, 1, 5, 4);
  EXPECT_EQ(r1.gas, 5);
  EXPECT_DOUBLE_EQ(r1.grad_factor, 4);
  EXPECT_DOUBLE_EQ(r1.straggle_ms, 0);
  EXPECT_TRUE(parse_injection("straggler:0:1").changes_collectives());
  EXPECT_FALSE(parse_injection("inf-grad:0").changes_collectives());
}

// Issue 14 [Note: when a run is numerically dead]: non-finite numbers end the run.
TEST(Train, Fp32InfGradientIsANumericalFailureAtThatStep) {
  DsConfig cfg = config(std::string(R"({"train_micro_batch_size_per_gpu": 2, )") + kAdam + "}");
  TrainOptions o;
  o.steps = 5;
  o.inject = {parse_injection("inf-grad:0:3")};
  TrainResult r;
  try {
    train(zrepro_test::one_rank_job(cfg), o, r);
    FAIL() << "an inf gradient went through and the run ended ok";
  } catch (const NumericalError& e) {
    EXPECT_NE(std::string(e.what()).find("gradient norm is not finite at step 4"), std::string::npos) << e.what();
  }
  EXPECT_EQ(r.steps.size(), 3u);  // steps 1-3 completed (counted from 1)
}

TEST(Train, Bf16DivergedLossIsNumericalEvenWhenItsStepsAreSkipped) {
  DsConfig cfg = config(R"({"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": true},
                            "optimizer": {"type": "AdamW", "params": {"lr": 1000000}}})");
  ASSERT_TRUE(cfg.bf16_check_grad_overflow);
  TrainOptions o;
  o.steps = 30;
  TrainResult r;
  EXPECT_THROW(train(zrepro_test::one_rank_job(cfg), o, r), NumericalError);
  EXPECT_LT(r.steps.size(), 30u);
}

TEST(Train, Bf16CheckGradOverflowSkipsAnInfGradientAndGoesOn) {
  DsConfig cfg = config(std::string(R"({"train_micro_batch_size_per_gpu": 2, )") + kAdam +
                        R"(, "bf16": {"enabled": true, "check_grad_overflow": true}})");
  TrainResult r = run(cfg, 4, {parse_injection("inf-grad:0:2")});
  ASSERT_EQ(r.steps.size(), 4u);
  EXPECT_TRUE(r.steps[2].skipped);
  for (const auto& s : r.steps) EXPECT_TRUE(std::isfinite(s.loss));
  // Without the check DeepSpeed applies the inf gradient: the run is dead at that step.
  DsConfig unchecked = config(std::string(R"({"train_micro_batch_size_per_gpu": 2, )") + kAdam +
                              R"(, "bf16": {"enabled": true, "check_grad_overflow": false}})");
  EXPECT_THROW(run(unchecked, 4, {parse_injection("inf-grad:0:2")}), NumericalError);
}

TEST(Train, ActivationCheckpointingKeepsLossesAndCutsActivations) {
  DeviceMemory& mem = DeviceMemory::instance();
  mem.install(0);
  DsConfig cfg = config(std::string(R"({"train_micro_batch_size_per_gpu": 8, )") + kAdam + "}");
  auto run_with = [&](bool ckpt) {
    mem.reset_peaks();
    TrainOptions o;
    o.steps = 4;
    JobSpec job = zrepro_test::one_rank_job(cfg);
    job.activation_checkpointing = ckpt;
    TrainResult r;
    train(job, o, r);
    return std::make_pair(r, mem.snapshot().category_peaks[static_cast<int>(MemCategory::activations)]);
  };
  auto [plain, plain_act] = run_with(false);
  auto [ckpt, ckpt_act] = run_with(true);
  for (size_t i = 0; i < plain.steps.size(); ++i) {
    EXPECT_DOUBLE_EQ(plain.steps[i].loss, ckpt.steps[i].loss) << "step " << i;
    EXPECT_DOUBLE_EQ(plain.steps[i].grad_norm, ckpt.steps[i].grad_norm) << "step " << i;
  }
  EXPECT_LT(ckpt_act, 0.8 * plain_act) << plain_act << " vs " << ckpt_act;
}

// Stage 3 on one rank re-gathers every layer before its backward (reuse distance 0)
// through the self communicator's copy: the saved parameter views must stay valid
// (a regression: the in-place gather used to trip autograd's version check), and
// the losses must equal stage 0's.
TEST(Train, Stage3RegatherOnOneRankMatchesStage0) {
  const std::string base = std::string(kAdam) + R"(, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2)";
  TrainResult s0 = run(config("{" + base + "}"), 6);
  TrainResult s3 = run(config("{" + base + R"(, "zero_optimization": {"stage": 3, "stage3_max_reuse_distance": 0,
      "stage3_param_persistence_threshold": 1000, "stage3_prefetch_bucket_size": 30000}})"), 6);
  ASSERT_EQ(s3.steps.size(), s0.steps.size());
  for (size_t i = 0; i < s0.steps.size(); ++i)
    EXPECT_NEAR(s3.steps[i].loss, s0.steps[i].loss, 1e-5 * s0.steps[i].loss) << "step " << i;
}

// Dynamic padding changes the sequence length from step to step, never within a
// step, so accumulation splits stay equivalent; the lengths are deterministic.
TEST(Train, DynamicSequenceLengthsKeepSplitsEquivalent) {
  const std::string base = std::string(kAdam) + R"(, "train_batch_size": 4})";
  auto run_dyn = [&](int64_t micro) {
    TrainOptions o;
    o.steps = 8;
    o.dynamic_seq_min = 8;
    TrainResult r;
    train(zrepro_test::one_rank_job(config(R"({"train_micro_batch_size_per_gpu": )" + std::to_string(micro) + ", " + base)),
          o, r);
    return r;
  };
  const TrainResult a = run_dyn(4), b = run_dyn(1);
  for (size_t i = 0; i < a.steps.size(); ++i)
    EXPECT_NEAR(a.steps[i].loss, b.steps[i].loss, 1e-5 * a.steps[i].loss) << "step " << i;
  std::set<int64_t> lengths;
  for (int64_t s = 0; s < 50; ++s) {
    const int64_t len = dynamic_seq_len(s, 8, 32);
    EXPECT_GE(len, 8);
    EXPECT_LE(len, 32);
    lengths.insert(len);
  }
  EXPECT_GT(lengths.size(), 10u);
  EXPECT_EQ(dynamic_seq_len(7, 8, 32), dynamic_seq_len(7, 8, 32));
}

namespace {
// Steps of tiny at micro x gas (the same global batch of 8) on padded samples (2..32
// tokens) under a loss normalisation.
TrainResult run_padded(int64_t micro, LossNormalization n, int64_t steps = 6) {
  const std::string cfg = std::string(kAdam) + R"(, "train_batch_size": 8, "train_micro_batch_size_per_gpu": )" +
                          std::to_string(micro) + "}";
  TrainOptions o;
  o.steps = steps;
  o.seq_len_dist = parse_seq_len_dist("uniform:2", 32);
  o.loss_normalization = n;
  TrainResult r;
  train(zrepro_test::one_rank_job(config("{" + cfg)), o, r);
  return r;
}
double max_rel(const TrainResult& a, const TrainResult& b, double StepRecord::*f) {
  double d = 0;
  for (size_t i = 0; i < a.steps.size(); ++i)
    d = std::max(d, std::abs(a.steps[i].*f - b.steps[i].*f) / std::abs(a.steps[i].*f));
  return d;
}
}  // namespace

// [Note: the loss of an accumulated step]: over padded samples, token normalisation gives
// micro 1 x gas 8 the gradients of micro 8 x gas 1; per-micro-batch means do not.
TEST(Train, TokenNormalisationKeepsSplitsOfPaddedBatchesEquivalentAndMeanDoesNot) {
  const TrainResult t8 = run_padded(8, LossNormalization::token), t1 = run_padded(1, LossNormalization::token);
  const TrainResult m8 = run_padded(8, LossNormalization::mean), m1 = run_padded(1, LossNormalization::mean);
  ASSERT_EQ(t8.steps.size(), 6u);
  EXPECT_LT(max_rel(t8, t1, &StepRecord::loss), 1e-5);
  EXPECT_LT(max_rel(t8, t1, &StepRecord::grad_norm), 1e-4);
  // One micro-batch per step: its mean is the token mean, so mean and token agree at gas 1.
  EXPECT_LT(max_rel(t8, m8, &StepRecord::grad_norm), 1e-5);
  // Per-sample means weigh a 2-token sample as much as a 32-token one.
  EXPECT_GT(max_rel(m8, m1, &StepRecord::grad_norm), 0.02);
  EXPECT_GT(max_rel(m8, m1, &StepRecord::loss), 1e-4);
}

TEST(Train, TokenScaledTwiceShrinksTheGradNormByGas) {
  const TrainResult r = run_padded(1, LossNormalization::token_per_rank, 1);
  const TrainResult twice = run_padded(1, LossNormalization::token_scaled_twice, 1);
  EXPECT_NEAR(twice.steps[0].grad_norm * 8, r.steps[0].grad_norm, 1e-5 * r.steps[0].grad_norm);
  EXPECT_DOUBLE_EQ(twice.steps[0].loss, r.steps[0].loss);  // the logged loss was right
}
