// CheckpointLayout: what each file of DeepSpeed's ZeRO checkpoint is and holds, for one ZeRO
// stage and data-parallel world size (DeepSpeed 0.19.8's layout: engine.py _save_checkpoint,
// _save_zero_checkpoint; stage_1_and_2.py and stage3.py state_dict; ds_to_universal.py).
// Every save, resume, conversion and consolidation asks it instead of comparing stages.
//
// [Note: DeepSpeed's checkpoint files by stage] Stages 1-2 keep one flat of the whole model
// cut into world ranges (the fp32 partition "single_partition_of_fp32_groups", the torch
// optimizer's state under "base_optimizer_state"), and rank 0 alone writes the model
// states, mp_rank_00_model_states.pt, whose module holds the 16-bit values. Stage 3 keeps
// each parameter in world slices ("fp32_flat_groups", "optimizer_state_dict"), every rank
// writes its own zero_pp_rank_R_mp_rank_00_model_states.pt, and the module's tensors are
// empty placeholders (the parameters are partitioned). Stage 1 writes None for the frozen
// parameters' entries, stages 2-3 empty dicts (only when gradients are partitioned does
// DeepSpeed collect them). A resume at stages 1-2 reads every rank's optimizer file (the
// ranges zrepro's per-layer partitions need lie in several), at stage 3 its own. The
// universal form of stages 1-2 wraps each parameter's state as {"param", "cat_dim"} with a
// step.pt beside it; stage 3's is the flat tensor, its step in zero/optimizer_state.pt.
// Stage 0 has no ZeRO checkpoint (DeepSpeed saves the torch optimizer's own state_dict).
#pragma once
#include <string>

namespace zrepro {

// How DeepSpeed's optimizer files partition the model's flat values ([Note: two flat
// layouts], ds_layout.h).
enum class DsPartitionForm { whole_model_ranges, parameter_slices };

struct CheckpointLayout {
  int stage = 1, world = 1;
  DsPartitionForm partition = DsPartitionForm::whole_model_ranges;
  bool per_rank_model_states = false;  // every rank writes its model-states file
  bool module_holds_values = true;     // the model states' module: 16-bit values, or placeholders
  bool frozen_param_entries = true;    // frozen_param_shapes / _fragments: {} (else None)
  const char* torch_optimizer_key = "base_optimizer_state";               // the torch optimizer's state_dict
  const char* fp32_partitions_key = "single_partition_of_fp32_groups";    // the fp32 master partitions
  bool universal_wraps_params = true;  // universal: {"param", "cat_dim"} files and a step.pt
  // ds_to_universal.py asserts the model states carry universal_checkpoint_info (stages 1-2;
  // its --inject_missing_state lets it go on without).
  bool universal_asks_checkpoint_info = true;

  // The model-states file rank `rank` writes or reads.
  std::string model_states_file(int rank) const;
  bool writes_model_states(int rank) const { return per_rank_model_states || rank == 0; }
  // A resume on `rank` reads rank q's optimizer file.
  bool reads_optimizer_file(int q, int rank) const {
    return partition == DsPartitionForm::whole_model_ranges || q == rank;
  }
  // The model-states files' names as a regular expression (the rank, if any, its group).
  std::string model_states_pattern() const;
};

// Stages 1-3: the layout; stage 0: std::invalid_argument (no ZeRO checkpoint).
CheckpointLayout checkpoint_layout(int stage, int world);
// Whether DeepSpeed writes a ZeRO checkpoint at this stage (1-3).
bool has_zero_checkpoint(int stage);
// Rank r's optimizer file (a bf16_ prefix exactly when bf16 is enabled), at every stage.
std::string optim_states_file(int rank, bool bf16);

}  // namespace zrepro
