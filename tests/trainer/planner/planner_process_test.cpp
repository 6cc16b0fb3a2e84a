// `zrepro plan` as a user runs it: table, JSON and exit codes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "device/device_memory.h"
#include "tests/support/process.h"
#include "trainer/config/ds_config.h"
#include "trainer/planner/planner.h"
#include "trainer/planner/scale_down.h"
#include "trainer/loop/train.h"

using namespace zrepro;

namespace {

// Small buckets and a low persistence threshold so that activations, buckets and
// stage-3 gathers all matter on `tiny` (DeepSpeed's 5e8 buckets would dwarf them).
std::string sized_config(int stage, bool live_params_bounded) {
  return R"({"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
             "optimizer": {"type": "AdamW", "params": {"lr": 0.001}}, "bf16": {"enabled": "auto"},
             "zero_optimization": {"stage": )" +
         std::to_string(stage) + R"(, "reduce_bucket_size": 20000, "stage3_param_persistence_threshold": 1000,
             "stage3_prefetch_bucket_size": 30000)" +
         (live_params_bounded ? R"(, "stage3_max_reuse_distance": 0, "overlap_comm": false)" : "") + "}}";
}

DsConfig make_config(const std::string& json, int64_t micro, int64_t gas, const std::string& precision, int ws = 1) {
  ConfigFlags f;
  f.micro_batch = micro;
  f.grad_accum = gas;
  f.precision = precision;
  f.world_size = ws;
  return parse_ds_config(json, "planner_test.json", f);
}

struct Measured {
  int64_t peak;
  Phase phase;
};

Measured measure(const DsConfig& cfg, bool ckpt) {
  DeviceMemory& mem = DeviceMemory::instance();
  mem.install(0);
  const int64_t base = mem.snapshot().allocated;
  mem.set_phase(Phase::init);
  mem.reset_peaks();
  TrainOptions o;
  o.steps = 2;
  o.activation_checkpointing = ckpt;
  TrainResult r;
  train(cfg, resolve_model("tiny"), o, r);
  const MemorySnapshot s = mem.snapshot();
  return {s.peak - base, s.peak_phase};
}

MemoryPlan predict(const DsConfig& cfg, bool ckpt, int ws = 1, int64_t capacity = 0) {
  PlanRequest req;
  req.model = resolve_model("tiny");
  req.cfg = cfg;
  req.world_size = ws;
  req.device_capacity = capacity;
  req.activation_checkpointing = ckpt;
  return plan_memory(req);
}

}  // namespace

TEST(Planner, PlanCommandTableJsonAndExitCodes) {
  const std::string cfg = zrepro_test::fresh_dir("plan_cmd") + "/ds.json";
  std::ofstream(cfg) << sized_config(3, false);
  auto r = zrepro_test::zrepro_cmd("plan --config " + cfg + " --model tiny --world-size 2 --micro-batch 2 --json", 60,
                                   false);
  ASSERT_EQ(r.code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  for (const char* key : {"peak_bytes", "by_category", "peak_phase", "verdict", "oom_phase", "phases",
                          "deepspeed_estimates", "model_states"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["verdict"], "fits");
  auto oom = zrepro_test::zrepro_cmd("plan --config " + cfg + " --model small --device-memory 8MB");
  EXPECT_EQ(oom.code, 3) << oom.output;
  EXPECT_NE(oom.output.find("verdict: OOM in phase"), std::string::npos) << oom.output;
  EXPECT_NE(oom.output.find("DeepSpeed's estimator"), std::string::npos);
  auto bad = zrepro_test::zrepro_cmd("plan --config " + cfg + " --world-size 0");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.output.find("--world-size"), std::string::npos) << bad.output;
}
