// Shared by the planner tests: the configs that make activations, buckets and
// stage-3 gathers all matter on `tiny`, and the plan for one of them.
#pragma once
#include <optional>
#include <string>

#include "trainer/config/ds_config.h"
#include "trainer/planner/planner.h"
#include "zero/schedule/buffer_policy.h"

namespace planner_test {

using namespace zrepro;

// Small buckets and a low persistence threshold so that activations, buckets and
// stage-3 gathers all matter on `tiny` (DeepSpeed's 5e8 buckets would dwarf them).
inline std::string sized_config(int stage, bool live_params_bounded) {
  return R"({"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
             "optimizer": {"type": "AdamW", "params": {"lr": 0.001}}, "bf16": {"enabled": "auto"},
             "zero_optimization": {"stage": )" +
         std::to_string(stage) + R"(, "reduce_bucket_size": 20000, "stage3_param_persistence_threshold": 1000,
             "stage3_prefetch_bucket_size": 30000)" +
         (live_params_bounded ? R"(, "stage3_max_reuse_distance": 0, "overlap_comm": false)" : "") + "}}";
}

inline DsConfig make_config(const std::string& json, int64_t micro, int64_t gas, const std::string& precision, int ws = 1) {
  ConfigFlags f;
  f.micro_batch = micro;
  f.grad_accum = gas;
  f.precision = precision;
  f.world_size = ws;
  return parse_ds_config(json, "planner_test.json", f);
}

inline MemoryPlan predict(const DsConfig& cfg, bool ckpt, int ws = 1, int64_t capacity = 0,
                   std::optional<BufferPolicy> buffers = std::nullopt, const ModelSpec& model = resolve_model("tiny")) {
  JobSpec req;
  req.buffers = buffers;
  req.model = model;
  req.cfg = cfg;
  req.world_size = ws;
  req.device_capacity = capacity;
  req.activation_checkpointing = ckpt;
  return plan_memory(req);
}

// A ZeRO-2 bf16 config whose scale-down from gpt2-xl on 40 GB runs out of memory.
inline const char* kZero2Bf16 = R"({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
  "bf16": {"enabled": true}, "optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
  "zero_optimization": {"stage": 2, "overlap_comm": true}})";

}  // namespace planner_test
