// Scale-down: a toy run that reproduces a big target's memory behaviour on a CPU in
// seconds (keep each category's share of device capacity: docs/design/ARCHITECTURE.md, "Contracts").
// With a linear factor s (parameter factor K = s^2): hidden, sequence, vocabulary
// and MLP width shrink by s, heads, layers, micro-batch, accumulation and world size
// stay. Then parameters (~12 L h^2), activations (B S h L (c + a S / h), B S V
// logits) and stage-3 layers all shrink by K; bucket, prefetch, live-parameter and
// reuse-distance sizes are divided by K, the persistence threshold (compared with
// vector-sized parameters) by s, and the capacity by the actual parameter ratio.
// The fidelity table compares each category's share of capacity, target vs toy,
// from the planner; rows off by more than 10% (relative) are warned about.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainer/planner/planner.h"

namespace zrepro {

struct ScaleRequest {
  // The target job: its model, its config resolved for it (its hidden size resolved the
  // "auto"s), world, capacity and activation checkpointing. It runs on GPUs (cpu_device
  // is ignored); the toy gets the same job with the toy's model, config and capacity.
  JobSpec target;
  double scale = 0;  // parameter factor K; 0: auto (toy of at most kAutoToyParams)
};
constexpr int64_t kAutoToyParams = 2000000;

struct ScaleDown {
  ModelSpec target, toy;
  DsConfig toy_cfg;           // the target's config with the size keys scaled
  int64_t toy_capacity = 0;
  double factor = 1;          // actual parameter ratio target / toy
  double linear = 1;          // s
  MemoryPlan target_plan, toy_plan;
  struct Row {
    std::string category;
    double target_share, toy_share;
  };
  std::vector<Row> fidelity;  // share of capacity at the peak, per category and the total
  std::vector<std::string> scaled_keys;  // "reduce_bucket_size 500000000 -> 122070"
  std::vector<std::string> warnings;
  // The target plan against the planner's measured band ([Note: a verdict inside the band],
  // trainer/report/gpu_fidelity.h): BandCall::to_json, set by the run; null without a record.
  nlohmann::json target_band;

  nlohmann::json to_json() const;
  std::string table() const;  // the fidelity table, for humans
};

// Throws ConfigError when the scale cannot be applied (too small a model for K).
ScaleDown scale_down(const ScaleRequest& req);

}  // namespace zrepro
