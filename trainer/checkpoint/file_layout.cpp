// See file_layout.h.
#include "trainer/checkpoint/file_layout.h"

#include <stdexcept>

#include "zero/schedule/stage_policy.h"

namespace zrepro {

bool has_zero_checkpoint(int stage) { return stage >= 1 && stage <= 3; }

CheckpointLayout checkpoint_layout(int stage, int world) {
  if (!has_zero_checkpoint(stage))
    throw std::invalid_argument("checkpoint_layout: no ZeRO checkpoint at stage " + std::to_string(stage));
  const StagePolicy policy = stage_policy(stage);
  CheckpointLayout l;
  l.stage = stage;
  l.world = world;
  l.frozen_param_entries = policy.shard_grads();
  if (!policy.shard_params()) return l;
  l.partition = DsPartitionForm::parameter_slices;
  l.per_rank_model_states = true;
  l.module_holds_values = false;
  l.torch_optimizer_key = "optimizer_state_dict";
  l.fp32_partitions_key = "fp32_flat_groups";
  l.universal_wraps_params = false;
  l.universal_asks_checkpoint_info = false;
  return l;
}

std::string CheckpointLayout::model_states_file(int rank) const {
  return per_rank_model_states ? "zero_pp_rank_" + std::to_string(rank) + "_mp_rank_00_model_states.pt"
                               : "mp_rank_00_model_states.pt";
}

std::string CheckpointLayout::model_states_pattern() const {
  return per_rank_model_states ? R"(zero_pp_rank_(\d+)_mp_rank_00_model_states\.pt)" : R"(mp_rank_(\d+)_model_states\.pt)";
}

std::string optim_states_file(int rank, bool bf16) {
  return std::string(bf16 ? "bf16_" : "") + "zero_pp_rank_" + std::to_string(rank) + "_mp_rank_00_optim_states.pt";
}

}  // namespace zrepro
