// DeepSpeed's universal checkpoint (0.19.8's ds_to_universal.py layout), which a job loads
// at any world size under "checkpoint": {"load_universal": true}: zrepro's converter of a
// ZeRO checkpoint into it, and the reader a resume uses.
//
// [Note: the universal layout] ds_to_universal.py --input_folder DIR/global_stepN
// --output_folder DIR/global_stepN_universal writes, per trainable parameter NAME (the
// model's module names), DIR/global_stepN_universal/zero/NAME/{fp32,exp_avg,exp_avg_sq}.pt:
// the whole parameter's fp32 master and Adam moments, unpartitioned. At stages 1-2 each file
// is {"param": tensor of the parameter's shape, "cat_dim": 0} and step.pt holds the Adam
// step; a module entry with no optimizer state (a tied head) gets fp32.pt = {"param": its
// 16-bit values as fp32}. At stage 3 each file is the flat fp32 tensor itself and the step
// lives in zero/optimizer_state.pt. zero/optimizer_state.pt holds the optimizer's global
// state (loss scaler, param_groups); the model-states files are copied beside zero/; the
// parent folder's latest_universal names the output folder. Nothing in it depends on the
// world size it was saved at, so any world size cuts its own partitions from it.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>
#include <torch/torch.h>

#include "trainer/checkpoint/ds_layout.h"

namespace zrepro {

// Reading a saved ZeRO checkpoint's files, shared by the converter, zero_to_fp32 and
// load_checkpoint (ds_checkpoint.h).
// A file's zero_stage: an int (zrepro's), or DeepSpeed's ZeroStageEnum read back as an object.
int zero_stage_of(const c10::IValue& zero_stage);
// An Adam step as it is saved: an int (DeepSpeed's Adam) or a tensor (torch's).
int64_t adam_step_of(const c10::IValue& step);
// The model-states file's param_shapes: names and shapes, flat order (group -1).
std::vector<CheckpointParam> saved_params(const c10::impl::GenericDict& model_states, const std::string& file);
// One optimizer file's optimizer_state_dict at `stage`: its flat partitions of the fp32
// master and the Adam moments, and the Adam step. One parameter group (ConfigError naming
// the file otherwise: the Hugging Face Trainer's weight-decay split is not read yet).
struct RankStates {
  torch::Tensor master, m, v;
  c10::IValue step;
};
RankStates rank_states(const c10::impl::GenericDict& optimizer, const CheckpointLayout& layout, const std::string& file);

// A ZeRO checkpoint's tag folder (DIR/global_stepN), read whole: what it was saved at, its
// parameters (the model-states file's param_shapes: names and shapes, flat order; group -1)
// and the whole model's flat optimizer states, from every rank's file. `flag` names the
// option that gave the folder in errors (ConfigError for a folder that is no checkpoint).
struct SavedZero {
  int stage = 0, world = 0;
  CheckpointLayout layout;  // of that stage and world
  std::vector<std::string> optim_files, model_files;  // rank order
  c10::impl::GenericDict model_states = c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get());
  std::vector<CheckpointParam> params;
  std::vector<int64_t> numels;
  torch::Tensor master, exp_avg, exp_avg_sq;
  int64_t master_partition_bytes = 0;  // the fp32 partitions as the files hold them (padding included)
  c10::IValue step;                     // rank 0's Adam step
  c10::impl::GenericDict first_optimizer = c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get());
};
// moments false: exp_avg and exp_avg_sq are left undefined (zero_to_fp32 needs only the master).
SavedZero read_saved_zero(const std::string& folder, const std::string& flag, bool moments = true);

// What the converter did.
struct UniversalConversion {
  std::string output_folder;
  int stage = 0, world = 0;     // the saved checkpoint's ZeRO stage and data-parallel world size
  int64_t parameters = 0, numel = 0;
};

// ds_to_universal.py's conversion, done here (no Python needed): reads every rank's files of
// the ZeRO checkpoint `input_folder` (DIR/global_stepN) and writes the universal layout to
// `output_folder`, then DIR/latest_universal. inject_missing_state: as the script's
// --inject_missing_state, without which a stage 1-2 checkpoint whose model states carry no
// universal_checkpoint_info (any model but Megatron-DeepSpeed's) is refused with the
// script's own assertion. Throws ConfigError naming the flag for a folder that is no ZeRO
// checkpoint; IoError when a file cannot be written (each file atomic).
UniversalConversion convert_to_universal(const std::string& input_folder, const std::string& output_folder,
                                         bool inject_missing_state);

// A universal folder's global optimizer state (zero/optimizer_state.pt, and step.pt at
// stages 1-2: `first` is any parameter's name): the Adam step and the loss scaler. Reads
// either stage's form. Throws ConfigError naming `flag` and the missing file.
struct UniversalStates {
  int64_t adam_steps = 0;
  c10::IValue loss_scaler;
};
UniversalStates read_universal_global(const std::string& folder, const std::string& first, const std::string& flag);
// The optimizer states of `params` (one layer's, say) from zero/NAME/: master, exp_avg and
// exp_avg_sq, each the parameters' values back to back. A resume reads one layer at a
// time, as DeepSpeed's loader reads one parameter at a time: a rank never holds the whole
// model's states on its host.
std::array<torch::Tensor, 3> read_universal_params(const std::string& folder,
                                                   const std::vector<CheckpointParam>& params,
                                                   const std::string& flag);

}  // namespace zrepro
