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
#include <optional>
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

// [Note: a limit the user gives is the target's] With --target-model, every limit a user
// gives describes the target's machine: --host-memory is rank 0's host of the 8-GPU job,
// --memlock-limit its ulimit -l, --zero-to-fp32-shard the script's shard there. Each is
// compared with the target's plan at the target's scale (the verdict a user reads), and
// the toy runs under the same share of its own need: toy limit = limit x toy need /
// target need. The toy then fails where, and only where, the target would, and its
// message says both figures. A limit whose need is zero at the target (nothing gathered,
// nothing pinned) is divided by the parameter factor, as the model's bytes are.
struct TargetLimit {
  std::string flag;  // "--host-memory"
  std::string need;  // what it bounds, in words: "rank 0's host at a save: the 16-bit model gathered"
  int64_t target_limit = 0, target_need = 0;
  int64_t toy_limit = 0, toy_need = 0;
  bool fits_at_target() const { return target_need <= target_limit; }
  nlohmann::json to_json() const;
  std::string line() const;     // "--host-memory 20 GB is the target's: ..." for the run's header
  std::string at_target() const;  // "at target scale: 24.24 GiB of the 20 GB --host-memory"
};
// The limits a run was given, in the target's units (0 / absent: not given).
struct TargetLimitFlags {
  int64_t host_memory = 0;
  std::optional<int64_t> memlock;
  bool saves = false;          // --save-every: a ZeRO-3 save may gather the 16-bit model
  bool zero_to_fp32 = false;   // --zero-to-fp32
  bool zero_to_fp32_api = false;
  int64_t zero_to_fp32_shard = 0;
};

struct ScaleDown {
  ModelSpec target, toy;
  JobSpec target_job;         // the target as planned (target_plan): what its fixes are planned on
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
  std::vector<TargetLimit> limits;  // [Note: a limit the user gives is the target's]; set by the run

  // The limit given for `flag`, or null when none was.
  const TargetLimit* limit(const std::string& flag) const;
  nlohmann::json to_json() const;
  // "at target scale (llama-2-13b on 80.00 GB per rank) the plan runs out of memory in
  // forward: peak 405.66 GiB" (or "fits: peak ..."), for messages that quote the toy.
  std::string target_verdict() const;
  std::string table() const;  // the fidelity table, for humans
};

// Throws ConfigError when the scale cannot be applied (too small a model for K).
ScaleDown scale_down(const ScaleRequest& req);
// Each limit given, at the target and for the toy ([Note: a limit the user gives is the
// target's]). The plans must have been made with saves_checkpoints where flags.saves.
std::vector<TargetLimit> limits_at_target(const ScaleDown& sd, int zero_stage, const TargetLimitFlags& flags);

}  // namespace zrepro
