// StagePolicy: what a ZeRO stage shards and when it reduces gradients, decided once
// from the stage number (llm.c's shard_at_stage). The engine, ParamGroup, the
// planner and the reports ask the policy; none of them compares stage numbers.
//
// [Note: which stage shards what]
//   stage  optimizer states  gradients (persistent)            parameters   gradients reduced
//   0      replicated        full layout, replicated           replicated   all-reduce at the boundary
//   1      partitioned       full layout, accumulated locally  replicated   reduce-scatter at the boundary
//   2      partitioned       this rank's partition             replicated   reduce-scatter every micro-step
//   3      partitioned       this rank's shard                 sharded      reduce-scatter every micro-step
// A state is sharded from the first stage that shards it on (first_sharding_stage):
// one comparison, in one place. Everything else below is derived from the three.
#pragma once
#include <stdexcept>
#include <string>

namespace zrepro {

enum class ModelState { optimizer_states, gradients, parameters };

// When the gradients cross ranks (DeepSpeed's stage_1_and_2 / stage3 reduction points).
enum class GradReduction {
  all_reduce_at_boundary,         // stage 0: plain data parallel
  reduce_scatter_at_boundary,     // stage 1: the accumulated full gradient, once per step
  reduce_scatter_per_micro_step,  // stages 2-3: every backward, into the partition
};

struct StagePolicy {
  int stage = 0;

  static constexpr bool valid(int stage) { return stage >= 0 && stage <= 3; }  // the stages DeepSpeed has

  static constexpr int first_sharding_stage(ModelState s) {
    return s == ModelState::optimizer_states ? 1 : s == ModelState::gradients ? 2 : 3;
  }
  bool shards(ModelState s) const { return stage >= first_sharding_stage(s); }

  bool shard_optimizer() const { return shards(ModelState::optimizer_states); }
  bool shard_grads() const { return shards(ModelState::gradients); }
  bool shard_params() const { return shards(ModelState::parameters); }

  GradReduction reduction() const {
    return shard_grads()       ? GradReduction::reduce_scatter_per_micro_step
           : shard_optimizer() ? GradReduction::reduce_scatter_at_boundary
                               : GradReduction::all_reduce_at_boundary;
  }
  // The persistent gradient is the full (padded) layout: stages 0-1.
  bool full_grads() const { return !shard_grads(); }
  // Gradients go through the bucketed reducer (reduce-scatter) at all: stages 1-3.
  bool uses_reducer() const { return shard_optimizer(); }
  // Stages 1-2: every rank updates its partition of a replicated flat buffer, then
  // all-gathers the updated partitions.
  bool gathers_updated_partitions() const { return shard_optimizer() && !shard_params(); }
  // Stage 0: each rank updates the whole flat buffer (no partition of its own).
  bool owns_whole_flat() const { return !shard_optimizer(); }
  // Stages 0-2: every rank holds identical full parameters (replicas to compare).
  bool replicated_params() const { return !shard_params(); }
};

inline StagePolicy stage_policy(int stage) {
  if (!StagePolicy::valid(stage))
    throw std::invalid_argument("ZeRO stage " + std::to_string(stage) + ": expected 0, 1, 2 or 3");
  return StagePolicy{stage};
}

}  // namespace zrepro
