// The memory planner against the tracking allocator: the predicted peak and its
// phase for stages 0-3, with and without activation checkpointing, micro-batch
// 1-8, fp32 and bf16, on one rank in-process and on two ranks through the binary
// (the table is printed; fp32 exact, bf16 within 0.5% with oneDNN off, see measure()). Also: the activation tapes balance,
// the verdict and OOM phase, DeepSpeed's estimator formulas.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <cstdio>
#include <optional>

#include "device/device_memory.h"
#include "tests/support/process.h"
#include "trainer/config/ds_config.h"
#include "trainer/planner/planner.h"
#include "trainer/planner/scale_down.h"
#include "trainer/loop/train.h"
#include "tests/support/train_helpers.h"
#include "tests/trainer/planner/planner_configs.h"
#include "trainer/planner/fixes.h"
#include "trainer/planner/tape_recorder.h"
#include "trainer/model/gpt.h"
#include "zero/schedule/partition.h"
#include "zero/schedule/buffer_policy.h"

using namespace zrepro;
using namespace planner_test;

namespace {

struct Measured {
  int64_t peak;
  Phase phase;
  int64_t comm_buffers_peak;
};

constexpr int kComm = static_cast<int>(MemCategory::comm_buffers);

// [Note: tapes of this LibTorch]: the planner does not plan oneDNN's bf16 GEMM scratch (an
// artefact of the CPU-emulated device, which no GPU has), so the run it is compared with
// turns oneDNN off unless asked: the comparison is then the same on every CPU.
// Planner.OneDnnScratchIsTheBf16GapOnThisCpu measures what the scratch adds where it exists.
// `steps` steps of cfg on one rank, in-process, on the DeviceMemory already installed,
// its peaks reset first.
void train_from_reset_peaks(const DsConfig& cfg, bool ckpt, const ModelSpec& model, int64_t steps, TrainResult& r,
                            std::optional<BufferPolicy> buffers = std::nullopt) {
  DeviceMemory& mem = DeviceMemory::instance();
  mem.set_phase(Phase::init);
  mem.reset_peaks();
  TrainOptions o;
  o.steps = steps;
  JobSpec job = zrepro_test::one_rank_job(cfg, model);
  job.activation_checkpointing = ckpt;
  job.buffers = buffers;
  train(job, o, r);
}

Measured measure(const DsConfig& cfg, bool ckpt, std::optional<BufferPolicy> buffers = std::nullopt,
                 const ModelSpec& model = resolve_model("tiny"), bool onednn = false) {
  std::optional<OneDnnOff> off;
  if (!onednn) off.emplace();
  DeviceMemory& mem = DeviceMemory::instance();
  mem.install(0);
  const MemorySnapshot before = mem.snapshot();
  TrainResult r;
  train_from_reset_peaks(cfg, ckpt, model, 2, r, buffers);
  const MemorySnapshot s = mem.snapshot();
  return {s.peak - before.allocated, s.peak_phase, s.category_peaks[kComm] - before.by_category[kComm]};
}

}  // namespace


TEST(Planner, PeakMatchesTheTrackingAllocatorOnOneRank) {
  std::printf("%-34s %12s %-9s %12s %-9s %8s\n", "case", "measured", "phase", "planned", "phase", "error");
  double worst = 0;
  for (const char* precision : {"fp32", "bf16"})
    for (int stage : {0, 1, 2, 3})
      for (bool bounded : {false, true}) {
        if (bounded && stage != 3) continue;
        for (bool ckpt : {false, true})
          for (int64_t micro : {1, 2, 4, 8}) {
            const DsConfig cfg = make_config(sized_config(stage, bounded), micro, bounded ? 2 : 1, precision);
            const Measured m = measure(cfg, ckpt);
            const MemoryPlan p = predict(cfg, ckpt);
            const double err = static_cast<double>(p.peak_bytes - m.peak) / static_cast<double>(m.peak);
            worst = std::max(worst, std::abs(err));
            char name[64];
            std::snprintf(name, sizeof name, "%s stage %d%s%s micro %lld", precision, stage,
                          bounded ? " live-bounded gas2" : "", ckpt ? " ckpt" : "", static_cast<long long>(micro));
            std::printf("%-34s %12lld %-9s %12lld %-9s %+7.2f%%\n", name, static_cast<long long>(m.peak),
                        phase_name(m.phase), static_cast<long long>(p.peak_bytes), phase_name(p.peak_phase), 100 * err);
            // [Note: tapes of this LibTorch]: fp32 exact, bf16 within 0.5%, on every CPU.
            EXPECT_LE(std::abs(err), std::string(precision) == "fp32" ? 1e-4 : 0.005) << name;
            EXPECT_EQ(phase_name(p.peak_phase), std::string(phase_name(m.phase))) << name;
          }
      }
  std::printf("worst |error| %.2f%%\n", 100 * worst);
}

// [Note: tapes of this LibTorch]: where the CPU's bf16 GEMM goes through oneDNN (AVX512-BF16,
// AMX), the CPU-emulated run's bf16 peak exceeds the plan by oneDNN's transient reorder
// buffers, which the plan leaves out (no GPU has them); fp32 never goes through oneDNN.
// Measured, and bounded: the gap zrepro states beside a bf16 plan of the CPU device.
TEST(Planner, OneDnnScratchIsTheBf16GapOnThisCpu) {
  const int64_t scratch = bf16_matmul_scratch_bytes();
  std::printf("bf16 GEMM scratch on this CPU: %lld bytes\n", static_cast<long long>(scratch));
  double worst = 0;
  for (const char* precision : {"fp32", "bf16"})
    for (int stage : {0, 3})
      for (bool ckpt : {false, true})
        for (int64_t micro : {1, 4}) {
          const DsConfig cfg = make_config(sized_config(stage, false), micro, 1, precision);
          const Measured on = measure(cfg, ckpt, std::nullopt, resolve_model("tiny"), true), off = measure(cfg, ckpt);
          const double gap = static_cast<double>(on.peak - off.peak) / static_cast<double>(off.peak);
          std::printf("%s stage %d%s micro %lld: oneDNN on %lld, off %lld (%+.2f%%)\n", precision, stage,
                      ckpt ? " ckpt" : "", static_cast<long long>(micro), static_cast<long long>(on.peak),
                      static_cast<long long>(off.peak), 100 * gap);
          if (std::string(precision) == "fp32" || scratch == 0) {
            EXPECT_EQ(on.peak, off.peak) << precision << " stage " << stage;
          } else {
            EXPECT_GE(on.peak, off.peak);
            worst = std::max(worst, gap);
          }
        }
  EXPECT_LE(worst, 0.05) << "oneDNN's scratch grew past the gap the docs state";
  std::printf("worst bf16 gap %.2f%%\n", 100 * worst);
}

// The same on the other model variants: a Llama-family toy (eager and sdpa
// attention), a tied LM head (the embed group used twice) on both families.
TEST(Planner, PeakMatchesTheTrackingAllocatorForEveryFamilyAndAttention) {
  std::vector<std::pair<std::string, ModelSpec>> models;
  for (const char* name : {"tiny-llama", "tiny"})
    for (Attention a : {Attention::eager, Attention::sdpa})
      for (bool tied : {false, true}) {
        if (std::string(name) == "tiny" && a == Attention::eager && !tied) continue;  // the test above
        ModelSpec m = resolve_model(name);
        m.attention = a;
        m.tied = tied;
        models.emplace_back(std::string(name) + " " + attention_name(a) + (tied ? " tied" : ""), m);
      }
  double worst = 0;
  for (const auto& [label, model] : models)
    for (const char* precision : {"fp32", "bf16"})
      for (int stage : {0, 2, 3})
        for (bool ckpt : {false, true})
          for (int64_t micro : {1, 4}) {
            const DsConfig cfg = make_config(sized_config(stage, false), micro, 1, precision);
            const Measured m = measure(cfg, ckpt, std::nullopt, model);
            const MemoryPlan p = predict(cfg, ckpt, 1, 0, std::nullopt, model);
            const double err = static_cast<double>(p.peak_bytes - m.peak) / static_cast<double>(m.peak);
            worst = std::max(worst, std::abs(err));
            const std::string name = label + " " + precision + " stage " + std::to_string(stage) +
                                     (ckpt ? " ckpt" : "") + " micro " + std::to_string(micro);
            if (std::abs(err) > 1e-4)
              std::printf("%-44s measured %10lld planned %10lld %+6.2f%%\n", name.c_str(),
                          static_cast<long long>(m.peak), static_cast<long long>(p.peak_bytes), 100 * err);
            EXPECT_LE(std::abs(err), std::string(precision) == "fp32" ? 1e-4 : 0.005) << name;
            EXPECT_EQ(phase_name(p.peak_phase), std::string(phase_name(m.phase))) << name;
          }
  std::printf("worst |error| over %zu models: %.3f%%\n", models.size(), 100 * worst);
}

// [Note: MoE in the planner] (gpt_memory.cpp): a MoE block is planned as the llama
// block's tapes with its MLP standing for the routed experts, plus the routing it saves;
// an approximation, measured here against the run on the MoE toys (stages 0 and 3, with
// and without checkpointing, micro-batches 1-8). The model states are exact; the
// activations are not: the worst gap is stated in docs/guide/plan.md.
TEST(Planner, MoePeakIsWithinItsStatedGapOfTheRun) {
  double worst = 0;
  for (const char* name : {"tiny-mixtral", "tiny-qwen2-moe"})
    for (bool aux : {false, true})
    for (const char* precision : {"fp32", "bf16"})
      for (int stage : {0, 3})
        for (bool ckpt : {false, true})
          for (int64_t micro : {1, 4, 8}) {
            ModelSpec model = resolve_model(name);
            model.router_aux_loss = aux;
            const DsConfig cfg = make_config(sized_config(stage, false), micro, 1, precision);
            const Measured m = measure(cfg, ckpt, std::nullopt, model);
            const MemoryPlan p = predict(cfg, ckpt, 1, 0, std::nullopt, model);
            const double err = static_cast<double>(p.peak_bytes - m.peak) / static_cast<double>(m.peak);
            worst = std::max(worst, std::abs(err));
            const std::string label = std::string(name) + (aux ? " aux" : "") + " " + precision + " stage " + std::to_string(stage) +
                                      (ckpt ? " ckpt" : "") + " micro " + std::to_string(micro);
            std::printf("%-40s measured %10lld planned %10lld %+6.2f%%\n", label.c_str(),
                        static_cast<long long>(m.peak), static_cast<long long>(p.peak_bytes), 100 * err);
            // Measured (plan.md): within 2.5% (the issue's bar is 3%); the largest gaps are with
            // checkpointing at micro-batch 4, where the planner's even share of tokens per
            // expert meets the toy's uneven routing.
            EXPECT_LE(std::abs(err), 0.03) << label;
          }
  std::printf("worst |error| on the MoE toys: %.2f%%\n", 100 * worst);
}

// [Note: one buffer policy for run and plan]: one field of BufferPolicy changed in one
// place (the struct handed to the run and to the plan) moves the measured and the
// planned bytes together, and they still agree: comm buffers exactly (fp32).
TEST(Planner, ABufferPolicyChangeMovesRunAndPlanTogether) {
  for (int stage : {2, 3}) {
    // Buckets larger than the model (one bucket), so that buffer sizing matters.
    std::string json = sized_config(stage, false);
    json.replace(json.find("\"reduce_bucket_size\": 20000"), 27, "\"reduce_bucket_size\": 200000");
    const DsConfig cfg = make_config(json, 2, 2, "fp32");
    ASSERT_EQ(cfg.zero.reduce_bucket_size, 200000);
    const BufferPolicy deepspeed = buffer_policy(cfg.zero);
    std::vector<BufferPolicy> policies(3, deepspeed);
    policies[1].reduce_buffers = 3;               // triple-buffered buckets
    policies[2].full_size_reduce_buffers = false;  // buffers only as large as the largest bucket
    std::vector<int64_t> comm_peaks;
    for (const BufferPolicy& p : policies) {
      const Measured m = measure(cfg, false, p);
      const MemoryPlan plan = predict(cfg, false, 1, 0, p);
      EXPECT_EQ(plan.category_peaks[kComm], m.comm_buffers_peak) << "stage " << stage << " buffers " << p.reduce_buffers;
      // The total within the sweep's fp32 error (a few bytes of scalars the planner leaves out).
      EXPECT_NEAR(plan.peak_bytes, m.peak, 1e-4 * m.peak) << "stage " << stage << " buffers " << p.reduce_buffers;
      comm_peaks.push_back(m.comm_buffers_peak);
    }
    EXPECT_GT(comm_peaks[1], comm_peaks[0]) << "stage " << stage << ": a third buffer costs memory";
    EXPECT_LT(comm_peaks[2], comm_peaks[0]) << "stage " << stage << ": smaller buffers save it";
  }
}

TEST(Planner, ActivationTapesBalanceEveryMicroStep) {
  // After backward every activation is freed: nothing may remain at the step, for
  // every family, attention and head.
  ModelSpec llama_sdpa_tied = resolve_model("tiny-llama");
  llama_sdpa_tied.attention = Attention::sdpa;
  llama_sdpa_tied.tied = true;
  for (const ModelSpec& model : {resolve_model("tiny"), resolve_model("tiny-llama"), llama_sdpa_tied})
  for (const char* precision : {"fp32", "bf16", "fp16"})
    for (int64_t micro : {1, 3})
      for (bool ckpt : {false, true}) {
        const MemoryPlan p = predict(make_config(sized_config(2, false), micro, 2, precision), ckpt, 1, 0,
                                     std::nullopt, model);
        bool seen = false;
        for (const auto& ph : p.phases)
          if (ph.phase == Phase::step) {
            seen = true;
            EXPECT_EQ(ph.by_category[static_cast<int>(MemCategory::activations)], 0)
                << model.name << " " << precision << " micro " << micro << (ckpt ? " ckpt" : "");
          }
        EXPECT_TRUE(seen);
      }
}

TEST(Planner, VerdictNamesThePhaseThatOverflows) {
  const DsConfig cfg = make_config(sized_config(1, false), 4, 1, "fp32");
  const MemoryPlan free_run = predict(cfg, false);
  const int64_t states = free_run.model_states[0] + free_run.model_states[1] + free_run.model_states[2];
  // Room for parameters and gradients but not the optimizer states: "partition".
  const MemoryPlan p1 = predict(cfg, false, 1, free_run.model_states[0] + free_run.model_states[1] + 100000);
  EXPECT_FALSE(p1.fits);
  EXPECT_EQ(p1.oom_phase, Phase::partition);
  // Room for model states and the reduce buffers (stage 1's bucket lives from the first
  // gradient, its reduced partition to the step) but not the activations: forward.
  const int64_t buffers = free_run.category_peaks[static_cast<int>(MemCategory::comm_buffers)];
  const MemoryPlan p2 = predict(cfg, false, 1, states + buffers + 50000);
  EXPECT_FALSE(p2.fits);
  EXPECT_EQ(p2.oom_phase, Phase::forward);
  const MemoryPlan p3 = predict(cfg, false, 1, free_run.peak_bytes);
  EXPECT_TRUE(p3.fits);
  EXPECT_EQ(p3.to_json()["verdict"], "fits");
  EXPECT_EQ(p2.to_json()["verdict"], "oom");
  EXPECT_EQ(p2.to_json()["oom_phase"], "forward");
}

TEST(Planner, ModelStatesFollowTheZeroFormulas) {
  const int64_t psi = resolve_model("tiny").param_count();  // tiny's layers need no padding for N <= 8
  for (int ws : {1, 2, 4}) {
    const auto bytes = [&](int stage) {
      const MemoryPlan p = predict(make_config(sized_config(stage, false), 2, 1, "bf16", ws), false, ws);
      return p.model_states[0] + p.model_states[1] + p.model_states[2];
    };
    EXPECT_EQ(bytes(0), 16 * psi);
    EXPECT_EQ(bytes(1), 4 * psi + 12 * psi / ws);
    // Stage 2: the paper's 2 psi / N of gradients become DeepSpeed's whole-parameter
    // partition of the rank that holds most (zero/schedule/partition.h).
    std::vector<int64_t> numels;
    for (const auto& layer : resolve_model("tiny").layer_shapes())
      for (const auto& p : layer.params) numels.push_back(p.numel());
    int64_t most = 0;
    for (int r = 0; r < ws; ++r) most = std::max(most, whole_param_partition_numel(numels, ws, r));
    EXPECT_EQ(bytes(2), 2 * psi + 12 * psi / ws + 2 * most);
    EXPECT_GE(bytes(2), 2 * psi + 14 * psi / ws);
    // Stage 3 keeps params under the persistence threshold whole on every rank.
    EXPECT_GE(bytes(3), 16 * psi / ws);
  }
}

TEST(Planner, DeepSpeedEstimatorFormulas) {
  // ZeRO-2 without offload: 2 psi + 18 psi / G; with optimizer offload 2 psi on the GPU.
  auto z2 = deepspeed_estimates(7500000000LL, 0, 64, 1, 2);
  ASSERT_EQ(z2.size(), 2u);
  EXPECT_EQ(z2[0].gpu_bytes, static_cast<int64_t>(2 * 7.5e9 + 18 * 7.5e9 / 64));
  EXPECT_EQ(z2[1].gpu_bytes, static_cast<int64_t>(2 * 7.5e9));
  EXPECT_EQ(z2[1].cpu_bytes, static_cast<int64_t>(7.5e9 * 256 * 1.5));
  // ZeRO-3: 4L + 18 psi / G, 4L + 2 psi / G, 4L.
  auto z3 = deepspeed_estimates(1000000, 1000, 4, 1, 3);
  ASSERT_EQ(z3.size(), 3u);
  EXPECT_EQ(z3[0].gpu_bytes, 4000 + 4500000);
  EXPECT_EQ(z3[1].gpu_bytes, 4000 + 500000);
  EXPECT_EQ(z3[2].gpu_bytes, 4000);
  // Two nodes of 2: the GPU column sees 4 GPUs, the CPU column a node's share.
  auto two = deepspeed_estimates(1000000, 1000, 2, 2, 3);
  EXPECT_EQ(two[0].gpu_bytes, z3[0].gpu_bytes);
  EXPECT_EQ(two[0].cpu_bytes, static_cast<int64_t>(1000 * 4 * 2 * 1.5));
  EXPECT_EQ(two[2].cpu_bytes, static_cast<int64_t>(1000000 * 18 * 0.5 * 1.5));
  auto z2two = deepspeed_estimates(1000000, 0, 8, 2, 2);
  EXPECT_EQ(z2two[0].cpu_bytes, static_cast<int64_t>(1000000 * 4 * 8 * 1.5));
}

TEST(Planner, DeepSpeedsLargestLayerIsTheLargestModule) {
  // model_to_params takes the largest module's own parameters: for GPT shapes the
  // word embedding (V x h), not a block.
  const ModelSpec m = resolve_model("gpt3-13b");
  EXPECT_EQ(m.largest_module_params(), m.vocab * m.hidden);
  EXPECT_LT(m.largest_module_params(), m.block_params());
}

namespace {
// A 4-rank ZeRO-2 bf16 job of `model` on `capacity` bytes per rank, to scale down.
ScaleRequest zero2_target(const ModelSpec& model, int64_t capacity, bool checkpointing = false) {
  ScaleRequest req;
  req.target.model = model;
  req.target.world_size = 4;
  req.target.activation_checkpointing = checkpointing;
  ConfigFlags f;
  f.world_size = 4;
  f.hidden_size = model.hidden;
  req.target.cfg = parse_ds_config(kZero2Bf16, "z2.json", f);
  req.target.device_capacity = capacity;
  return req;
}
}  // namespace

TEST(ScaleDown, ToyKeepsEveryCategorysShareOfCapacity) {
  // 32 GB: Hugging Face's GPT-2-XL (micro-batch 4) fits 4 x 40 GB under ZeRO-2 (plan: 36.0 GiB).
  ScaleRequest req = zero2_target(resolve_model("gpt2-xl"), 32000000000);
  const ScaleDown sd = scale_down(req);
  EXPECT_LE(sd.toy.param_count(), kAutoToyParams);
  EXPECT_EQ(sd.toy.layers, req.target.model.layers);
  EXPECT_EQ(sd.toy.heads, req.target.model.heads);
  // The learned position table shrinks with the sequence, as every size does.
  EXPECT_EQ(sd.toy.position_rows(), sd.toy.seq);
  EXPECT_EQ(sd.toy.hidden % sd.toy.heads, 0);
  EXPECT_NEAR(sd.factor, static_cast<double>(req.target.model.param_count()) / sd.toy.param_count(), 1e-9);
  EXPECT_EQ(sd.toy_cfg.zero.reduce_bucket_size, std::llround(5e8 / sd.factor));
  EXPECT_EQ(sd.toy_capacity, std::llround(3.2e10 / sd.factor));
  for (const auto& row : sd.fidelity)
    if (row.target_share > 0.01) {
      EXPECT_NEAR(row.toy_share, row.target_share, 0.05 * row.target_share) << row.category;
    }
  EXPECT_FALSE(sd.target_plan.fits);
  EXPECT_EQ(sd.toy_plan.fits, sd.target_plan.fits);
  EXPECT_EQ(sd.toy_plan.oom_phase, sd.target_plan.oom_phase);
  EXPECT_TRUE(sd.warnings.empty()) << sd.warnings.front();
  // An explicit factor: K = 4096 shrinks hidden by 64.
  req.scale = 4096;
  const ScaleDown k = scale_down(req);
  EXPECT_EQ(k.toy.hidden, 25);  // 1600 / 64, a multiple of the 25 heads
}

// Issue 30: with sdpa the toy kept flash attention's 128-row tile over its 64-token
// sequence (the whole score matrix), so its activations held 34% of its capacity against
// the target's 19%. The tile scales with seq and hidden: every share stays within a point.
TEST(ScaleDown, SdpaKeepsTheShareOfItsTiledAttention) {
  ModelOverrides sdpa;
  sdpa.attention = "sdpa";
  const ScaleDown sd = scale_down(zero2_target(resolve_model("llama-3-8b", sdpa), 80000000000, true));
  EXPECT_EQ(sd.toy.attention_tile, std::llround(128 / sd.linear));
  for (const auto& row : sd.fidelity) EXPECT_NEAR(row.toy_share, row.target_share, 0.01) << row.category;
  EXPECT_TRUE(sd.warnings.empty()) << sd.warnings.front();
}

// Done-when of the memory issue: the toy reproduces the OOM the planner predicts for
// the target, in the same phase, and the fix config removes it.
TEST(Planner, OffloadMovesStatesToTheHostAsMeasured) {
  auto offload_cfg = [](int stage, bool param) {
    std::string z = R"({"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
        "optimizer": {"type": "AdamW", "params": {"lr": 0.001}}, "bf16": {"enabled": "auto"},
        "zero_optimization": {"stage": )" + std::to_string(stage) +
                    R"(, "reduce_bucket_size": 20000, "stage3_param_persistence_threshold": 1000,
        "offload_optimizer": {"device": "cpu", "pin_memory": true})";
    if (param) z += R"(, "offload_param": {"device": "cpu", "pin_memory": true})";
    return z + "}}";
  };
  struct Case {
    int stage;
    bool param;
  };
  for (const Case c : {Case{1, false}, Case{2, false}, Case{3, false}, Case{3, true}})
    for (int64_t gas : {1, 4}) {
      const DsConfig cfg = make_config(offload_cfg(c.stage, c.param), 2, gas, "fp32");
      const Measured m = measure(cfg, false);
      const MemoryPlan p = predict(cfg, false);
      const std::string what = "stage " + std::to_string(c.stage) + (c.param ? " + param" : "") + " gas " +
                               std::to_string(gas);
      // The planner takes the copies of reduced gradients to the host as landed by the end
      // of backward. When the copy thread lags (a loaded machine), up to one bucket output
      // per reduce buffer is still in flight during the next forward: the measured peak may
      // exceed the plan by that much, never more.
      const int64_t in_flight = buffer_policy(cfg.zero).reduce_buffers * cfg.zero.reduce_bucket_size * 4;
      EXPECT_LE(p.peak_bytes, m.peak * 1.05) << what << ": planned " << p.peak_bytes << ", measured " << m.peak;
      EXPECT_LE(m.peak, p.peak_bytes * 1.05 + in_flight) << what << ": planned " << p.peak_bytes << ", measured " << m.peak;
      EXPECT_EQ(p.model_states[static_cast<int>(MemCategory::optimizer_states)], 0) << what;
      // Host bytes as the engine pins them (its preflight uses the same arithmetic).
      TrainOptions o;
      o.steps = 1;
      TrainResult r;
      train(zrepro_test::one_rank_job(cfg), o, r);
      EXPECT_EQ(p.host_pinned_bytes, r.memory.host_pinned) << what;
    }
}

TEST(Planner, OffloadParamBufferCountBoundsTheShardsOnTheirWayUp) {
  auto cfg = [](int buffers) {
    return make_config(R"({"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
        "optimizer": {"type": "AdamW", "params": {"lr": 0.001}}, "bf16": {"enabled": "auto"},
        "zero_optimization": {"stage": 3, "reduce_bucket_size": 20000, "stage3_param_persistence_threshold": 1000,
          "stage3_max_reuse_distance": 0, "offload_optimizer": {"device": "cpu"},
          "offload_param": {"device": "cpu", "buffer_count": )" + std::to_string(buffers) + "}}}",
                       2, 2, "fp32");
  };
  int64_t peak[2];
  for (int i : {0, 1}) {
    const DsConfig c = cfg(i == 0 ? 1 : 5);
    const Measured m = measure(c, false);
    const MemoryPlan p = predict(c, false);
    EXPECT_LE(std::abs(static_cast<double>(p.peak_bytes - m.peak)) / m.peak, 0.05) << "buffer_count " << (i ? 5 : 1);
    peak[i] = m.peak;
  }
  EXPECT_LT(peak[0], peak[1]);  // fewer shards prefetched up at a time
}

namespace {
// configs/scenarios/first-batch-activations on the `small` model and 120 MB: its
// activations overflow; checkpointing and half the micro-batch each fit.
JobSpec first_batch_activations_job() {
  JobSpec req;
  req.model = resolve_model("small");
  req.cfg = load_ds_config(std::string(ZREPRO_SOURCE_DIR).append("/configs/scenarios/first-batch-activations/ds_config.json"),
                           ConfigFlags{});
  req.device_capacity = 120000000;
  return req;
}
}  // namespace

// The fixes the OOM hint and `zrepro plan` propose are planned, not listed: on the
// first-batch-activations scenario (activations overflow 120 MB) checkpointing and a
// smaller micro-batch are predicted to fit and come first; each prediction is the
// plan of the changed run.
TEST(Planner, FixesArePlannedAndTheOnesThatFitComeFirst) {
  JobSpec req = first_batch_activations_job();
  ASSERT_FALSE(plan_memory(req).fits);
  const std::vector<FixPrediction> fixes = predict_fixes(req);
  ASSERT_GE(fixes.size(), 3u);
  EXPECT_EQ(fixes[0].fix, "activation checkpointing");
  EXPECT_TRUE(fixes[0].fits);
  EXPECT_EQ(fixes[1].fix, "micro-batch 4 x gas 2");
  EXPECT_TRUE(fixes[1].fits);
  for (size_t i = 1; i < fixes.size(); ++i)
    EXPECT_TRUE(fixes[i - 1].fits > fixes[i].fits ||
                (fixes[i - 1].fits == fixes[i].fits && fixes[i - 1].peak_bytes <= fixes[i].peak_bytes));
  JobSpec ckpt = req;
  ckpt.activation_checkpointing = true;
  EXPECT_EQ(fixes[0].peak_bytes, plan_memory(ckpt).peak_bytes);
  EXPECT_NE(format_fixes(fixes).find("planner: fits with activation checkpointing (peak 70%)"), std::string::npos)
      << format_fixes(fixes);
  req.device_capacity = 0;
  EXPECT_TRUE(predict_fixes(req).empty()) << "no capacity, no verdict, no fixes";
}

// [Note: fixes a user can apply]: each fix says its cost and its Trainer spelling, the
// recommended one is the cheapest that fits (not the lowest peak), a fix that changes
// nothing is left out, and when none fits alone two together are planned.
TEST(Planner, FixesComeWithTheirCostAPairWhenNoneFitsAloneAndOneRecommendation) {
  JobSpec req = first_batch_activations_job();
  const std::vector<FixPrediction> one = predict_fixes(req);
  const FixPrediction* rec = recommended_fix(one);
  ASSERT_NE(rec, nullptr);
  EXPECT_EQ(rec->fix, "micro-batch 4 x gas 2") << "cheaper than checkpointing, and it fits";
  EXPECT_EQ(rec->trainer_args, "per_device_train_batch_size=4, gradient_accumulation_steps=2");
  EXPECT_NE(format_fixes(one).find("recommended: micro-batch 4 x gas 2 (the same global batch"), std::string::npos)
      << format_fixes(one);
  const std::string details = format_fix_details(one);
  EXPECT_NE(details.find("Hugging Face Trainer: gradient_checkpointing=True"), std::string::npos) << details;
  EXPECT_NE(details.find("ds_config.json merge patch: {\"gradient_accumulation_steps\":2,\"train_micro_batch_size_per_gpu\":4}"), std::string::npos)
      << details;
  for (const auto& f : one) EXPECT_EQ(f.parts, 1) << f.fix << ": a single fix fits, no pairs";
  const int64_t own = plan_memory(req).peak_bytes;
  for (const auto& f : one) EXPECT_TRUE(f.fits || f.peak_bytes != own) << f.fix << " changes nothing";
  // A capacity where no fix fits alone: pairs are planned, and one fits.
  req.device_capacity = 80000000;  // checkpointing alone peaks at 114%, half the micro-batch at 136%
  const std::vector<FixPrediction> pairs = predict_fixes(req);
  EXPECT_TRUE(std::none_of(pairs.begin(), pairs.end(), [](const FixPrediction& f) { return f.fits && f.parts == 1; }));
  ASSERT_FALSE(pairs.empty());
  EXPECT_TRUE(pairs[0].fits) << format_fixes(pairs);
  EXPECT_EQ(pairs[0].parts, 2);
  EXPECT_NE(pairs[0].fix.find(" + "), std::string::npos);
  JobSpec both = req;
  both.activation_checkpointing = true;
  both.cfg.micro_batch /= 2, both.cfg.grad_accum *= 2;
  const auto ckpt_micro = std::find_if(pairs.begin(), pairs.end(), [](const FixPrediction& f) {
    return f.fix == "activation checkpointing + micro-batch 4 x gas 2";
  });
  ASSERT_NE(ckpt_micro, pairs.end());
  EXPECT_EQ(ckpt_micro->peak_bytes, plan_memory(both).peak_bytes) << "the pair is the plan of both changes";
  EXPECT_EQ(ckpt_micro->args, std::vector<std::string>{"--activation-checkpointing"});
  EXPECT_EQ(ckpt_micro->config_patch["gradient_accumulation_steps"], 2);
}

namespace {

struct CachingMeasured {
  int64_t reserved_peak = 0, retries_per_step = 0;
  bool ok = true;
};

// A run on the caching-allocator emulation with a capacity (oneDNN off, as measure()):
// its reserved peak and the cache flushes of its third step (the plan's second step is
// past the first step's optimizer-state creation too).
CachingMeasured measure_caching(const DsConfig& cfg, bool ckpt, int64_t capacity, const ModelSpec& model) {
  OneDnnOff off;
  DeviceMemory& mem = DeviceMemory::instance();
  mem.install(capacity, /*caching=*/true);
  mem.empty_cache();  // nothing cached from an earlier test's run
  TrainResult r;
  CachingMeasured m;
  try {
    train_from_reset_peaks(cfg, ckpt, model, 3, r);
  } catch (const c10::OutOfMemoryError&) {
    m.ok = false;
  }
  const MemorySnapshot s = mem.snapshot();
  m.reserved_peak = s.peak_reserved;
  if (r.steps.size() == 3) m.retries_per_step = r.steps[2].memory.alloc_retries - r.steps[1].memory.alloc_retries;
  mem.empty_cache();
  mem.install(0);
  return m;
}

}  // namespace

// [Note: the plan through the caching allocator]: the plan's allocations replayed through
// the caching-allocator emulation give the run's reserved peak, and at the edge of the
// capacity the run's cache flushes per step and its OOM (the allocator-pressure scenario's
// job: 292-293 MB flush twice a step, 294 MB does not, 291 MB runs out of memory although
// the allocated peak fits). fp32: the allocations are the kernels' own on every CPU.
TEST(Planner, ReservedPeakAndCacheFlushesMatchTheCachingAllocator) {
  const ModelSpec small = resolve_model("small");
  const std::string pressure = zrepro_test::read_text(zrepro_test::scenario_path("allocator-pressure"));
  const DsConfig cfg = make_config(pressure, 16, 1, "fp32");
  for (int64_t mb : {291, 292, 293, 294, 310}) {
    const int64_t cap = mb * 1000 * 1000;
    const CachingMeasured m = measure_caching(cfg, false, cap, small);
    JobSpec req = zrepro_test::one_rank_job(cfg, small);
    req.device_capacity = cap;
    const MemoryPlan p = plan_memory(req);
    std::printf("allocator-pressure at %lld MB: run %s, reserved peak %lld, %lld flushes/step; plan %s, %lld, %lld\n",
                static_cast<long long>(mb), m.ok ? "ok" : "OOM", static_cast<long long>(m.reserved_peak),
                static_cast<long long>(m.retries_per_step), p.reserved_fits ? "fits" : "OOM",
                static_cast<long long>(p.reserved_peak_bytes), static_cast<long long>(p.alloc_retries_per_step));
    EXPECT_EQ(p.reserved_fits, m.ok) << mb << " MB";
    // [Note: the capacity binds where PyTorch's OOM does]: this device accounts exactly, so
    // its verdict binds on allocated bytes; the same job through the caching allocator (a
    // GPU, or run --allocator caching as here) binds on reserved ones, as the run does.
    EXPECT_FALSE(p.binds_on_reserved);
    EXPECT_TRUE(p.fits) << mb << " MB: the allocated peak " << p.peak_bytes << " fits";
    JobSpec caching = req;
    caching.emulated_caching_allocator = true;
    const MemoryPlan c = plan_memory(caching);
    EXPECT_TRUE(c.binds_on_reserved);
    EXPECT_EQ(c.fits, m.ok) << mb << " MB";
    EXPECT_TRUE(c.allocated_fits) << mb << " MB";
    EXPECT_EQ(c.unbounded_reserved_peak_bytes, predict(cfg, false, 1, 0, std::nullopt, small).reserved_peak_bytes);
    if (!c.fits) {
      EXPECT_NE(format_plan(c, caching).find("finds no room for a"), std::string::npos) << format_plan(c, caching);
    }
    if (!m.ok) continue;
    EXPECT_EQ(p.reserved_peak_bytes, m.reserved_peak) << mb << " MB";
    EXPECT_EQ(p.alloc_retries_per_step, m.retries_per_step) << mb << " MB";
  }
  // Without a capacity: the reserved peak across stages and checkpointing (`small`, whose
  // activations take 20 MiB segments; `tiny` fits in two 2 MiB ones).
  for (int stage : {0, 2, 3})
    for (bool ckpt : {false, true}) {
      const DsConfig c = make_config(sized_config(stage, false), 4, 1, "fp32");
      const CachingMeasured m = measure_caching(c, ckpt, 0, small);
      const MemoryPlan p = predict(c, ckpt, 1, 0, std::nullopt, small);
      std::printf("small stage %d%s: run reserved peak %lld, plan %lld\n", stage, ckpt ? " ckpt" : "",
                  static_cast<long long>(m.reserved_peak), static_cast<long long>(p.reserved_peak_bytes));
      EXPECT_EQ(p.reserved_peak_bytes, m.reserved_peak) << "stage " << stage << (ckpt ? " ckpt" : "");
      EXPECT_EQ(p.alloc_retries_per_step, 0);
    }
}

// `run --as-rank most` and a plan without a rank: the rank whose planned peak (device and
// host) is the highest of every rank's plan, the lowest of equals; rank 0 where every rank
// plans alike.
TEST(Planner, TheRankHoldingMostHasTheHighestPlanOfAllRanks) {
  const std::string z2 = R"({"zero_optimization": {"stage": 2, "reduce_bucket_size": 20000}})";
  const std::string z2_off =
      R"({"zero_optimization": {"stage": 2, "reduce_bucket_size": 20000, "offload_optimizer": {"device": "cpu"}}})";
  const std::string z3 = R"({"zero_optimization": {"stage": 3, "reduce_bucket_size": 20000}})";
  for (const std::string& json : {z2, z2_off, z3}) {
    JobSpec req;
    req.model = resolve_model("tiny");
    req.world_size = 8;
    req.cfg = planner_test::make_config(json, 2, 1, "fp32", 8);
    int best = -1;
    int64_t best_bytes = -1;
    for (int r = 0; r < 8; ++r) {
      req.rank = r;
      const MemoryPlan p = plan_memory(req);
      const int64_t bytes = p.peak_bytes + p.host_pinned_bytes + p.host_pageable_bytes;
      if (bytes > best_bytes) best = r, best_bytes = bytes;
    }
    req.rank.reset();
    // Ties allowed: where the peak comes before stage 2's partition exists every rank peaks alike.
    req.rank = rank_holding_most(req);
    const MemoryPlan chosen = plan_memory(req);
    EXPECT_EQ(chosen.peak_bytes + chosen.host_pinned_bytes + chosen.host_pageable_bytes, best_bytes) << json;
    req.rank.reset();
    if (json == z3) {
      EXPECT_EQ(best, 0);
    }
    const MemoryPlan unranked = plan_memory(req);
    EXPECT_EQ(unranked.peak_bytes + unranked.host_pinned_bytes + unranked.host_pageable_bytes, best_bytes) << json;
  }
}

// The save and load phases (trainer/checkpoint/ds_checkpoint.h) against the run: a run that
// saves after every step and one that resumes from its checkpoint, on one rank, each
// phase's peak planned as measured; with ZeRO-3 and stage3_gather_16bit_weights_on_model_save
// the save gathers every group once more ([Note: the 16-bit consolidation at save]).
TEST(Planner, SaveAndLoadPhasesMatchTheRun) {
  const std::string dir = testing::TempDir() + "/planner_ckpt";
  for (const char* precision : {"fp32", "bf16"})
    for (int stage : {1, 2, 3})
      for (bool gather16 : {false, true}) {
        if (gather16 && stage != 3) continue;
        std::string json = sized_config(stage, false);
        if (gather16) json.replace(json.find("\"stage\": 3"), 10, "\"stage\": 3, \"stage3_gather_16bit_weights_on_model_save\": true");
        const DsConfig cfg = make_config(json, 2, 1, precision);
        ASSERT_EQ(cfg.zero.stage3_gather_16bit_weights_on_model_save, gather16);
        const std::string label = std::string(precision) + " stage " + std::to_string(stage) + (gather16 ? " gather16" : "");
        std::filesystem::remove_all(dir);
        OneDnnOff off;
        DeviceMemory& mem = DeviceMemory::instance();
        for (bool resume : {false, true}) {
          mem.install(0);
          mem.set_phase(Phase::init);
          const MemorySnapshot before = mem.snapshot();
          mem.reset_peaks();
          TrainOptions o;
          o.steps = resume ? 2 : 1;
          if (resume) o.resume_dir = dir;
          else o.save_every = 1, o.save_dir = dir;
          JobSpec job = zrepro_test::one_rank_job(cfg, resolve_model("tiny"));
          job.saves_checkpoints = !resume;
          job.resumes = resume;
          TrainResult r;
          train(job, o, r);
          const MemorySnapshot s = mem.snapshot();
          const MemoryPlan p = plan_memory(job);
          const Phase ph = resume ? Phase::load : Phase::save;
          const int64_t measured = s.phases.allocated[static_cast<int>(ph)] - before.allocated;
          int64_t planned = -1;
          for (const auto& x : p.phases)
            if (x.phase == ph) planned = x.peak;
          const double err = static_cast<double>(planned - measured) / static_cast<double>(measured);
          std::printf("%-26s %-4s measured %9lld planned %9lld %+6.2f%%\n", label.c_str(), phase_name(ph),
                      static_cast<long long>(measured), static_cast<long long>(planned), 100 * err);
          EXPECT_LE(std::abs(err), std::string(precision) == "fp32" ? 1e-4 : 0.005) << label << " " << phase_name(ph);
        }
      }
}

// Issue 60: [Note: a limit the user gives is the target's]. A 13B ZeRO-3 job gathering its
// 16-bit model at a save (24 GiB on rank 0) passed `--host-memory 20GB` because the toy
// gathered 6 MB. Each limit is now compared at the target and given to the toy as the same
// share of the toy's own need, so the verdict is the target's either way.
TEST(ScaleDown, EveryLimitIsComparedAtTheTargetAndAppliedToTheToyInProportion) {
  ScaleRequest req = zero2_target(resolve_model("tinyllama-1.1b"), 80000000000);
  req.target.cfg.zero.stage = 3;
  req.target.cfg.zero.stage3_gather_16bit_weights_on_model_save = true;
  req.target.saves_checkpoints = true;
  const ScaleDown sd = scale_down(req);
  const int64_t gathered = 2 * req.target.model.param_count();  // bf16
  ASSERT_EQ(sd.target_plan.save_16bit_host_bytes, gathered);
  for (const int64_t host : {int64_t{2000000000}, int64_t{3000000000}}) {
    TargetLimitFlags f;
    f.host_memory = host, f.saves = true;
    const std::vector<TargetLimit> limits = limits_at_target(sd, 3, f);
    ASSERT_EQ(limits.size(), 1u);
    const TargetLimit& l = limits[0];
    EXPECT_EQ(l.flag, "--host-memory");
    EXPECT_EQ(l.target_need, gathered);
    EXPECT_EQ(l.fits_at_target(), host >= gathered) << host;
    EXPECT_EQ(l.toy_need, sd.toy_plan.save_16bit_host_bytes);
    // The toy's verdict is the target's: the same share of its need.
    EXPECT_EQ(l.toy_need <= l.toy_limit, l.fits_at_target()) << host;
    EXPECT_NEAR(static_cast<double>(l.toy_limit) / l.toy_need, static_cast<double>(host) / gathered, 1e-6);
  }
  // The API's consolidation holds the fp32 model (4 bytes per parameter): the larger need binds.
  TargetLimitFlags api;
  api.host_memory = 3000000000, api.saves = true, api.zero_to_fp32 = true, api.zero_to_fp32_api = true;
  const TargetLimit l = limits_at_target(sd, 3, api).at(0);
  EXPECT_EQ(l.target_need, 4 * req.target.model.param_count());
  EXPECT_FALSE(l.fits_at_target());
  EXPECT_NE(l.need.find("get_fp32_state_dict_from_zero_checkpoint"), std::string::npos) << l.need;
  // The script's shard size is the target's too: divided by the parameter factor.
  TargetLimitFlags script;
  script.zero_to_fp32 = true, script.zero_to_fp32_shard = 1000000000;
  const TargetLimit shard = limits_at_target(sd, 3, script).at(0);
  EXPECT_EQ(shard.flag, "--zero-to-fp32-shard");
  EXPECT_EQ(shard.toy_limit, std::llround(1e9 / sd.factor));
  // No gather at this config: nothing to compare; the limit scales as the model's bytes.
  ScaleRequest z2 = zero2_target(resolve_model("tinyllama-1.1b"), 80000000000);
  z2.target.saves_checkpoints = true;
  const ScaleDown sd2 = scale_down(z2);
  TargetLimitFlags plain;
  plain.host_memory = 1000000000, plain.saves = true;
  const TargetLimit none = limits_at_target(sd2, 2, plain).at(0);
  EXPECT_EQ(none.target_need, 0);
  EXPECT_TRUE(none.fits_at_target());
  EXPECT_EQ(none.toy_limit, std::llround(1e9 / sd2.factor));
}
