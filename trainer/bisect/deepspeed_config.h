// The config a real DeepSpeed release gets in `zrepro bisect`: the user's file as the
// Hugging Face Trainer hands it to deepspeed.initialize.
//
// [Note: the config each release gets] Every "auto" is filled with the value zrepro
// resolved for it (the Trainer's rules: trainer/config/ds_config.cpp), and the batch keys
// (train_micro_batch_size_per_gpu, gradient_accumulation_steps, train_batch_size) are always
// set, so every release trains the batches zrepro exported. Every key the user left unset
// stays unset: each release then applies its own default, which is how a changed default
// (gradient_clipping 1.0 from 0.19.3) shows up in a bisect. zrepro's resolved config itself
// would hide it, as it spells out every default.
//
// [Note: the optimizer the Trainer brings] A config without "optimizer" is a Trainer's
// (LLaMA-Factory's and axolotl's ship so): the Trainer builds torch's AdamW itself, hands
// it to deepspeed.initialize and sets zero_allow_untested_optimizer (transformers
// integrations/deepspeed.py, deepspeed_optim_sched); under an optimizer offload Accelerate
// swaps it for DeepSpeedCPUAdam over the same parameters unless the file sets
// zero_force_ds_cpu_optimizer false (accelerate utils/deepspeed.py,
// map_pytorch_optim_to_deepspeed). DeepSpeed given such a file alone refuses it ("zero
// stage 2 requires an optimizer"), at every release. So the file each release gets carries
// kTrainerOptimizerKey: the optimizer zrepro trained with (AdamW with the resolved lr,
// betas, eps and weight decay on one group, as summary.json's "assumed" says) and, where
// the file has no "scheduler" either, the lr of every step as zrepro's run had it
// (constant, or the Trainer's schedule under --training-args): the Trainer's schedule is
// not DeepSpeed code, so it is replayed, not reimplemented. conformance/ds_run.py takes the
// key out before deepspeed.initialize and builds the client optimizer from it.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace zrepro {

inline constexpr const char* kTrainerOptimizerKey = "zrepro_trainer_optimizer";

// The Trainer's optimizer as the release's driver builds it ([Note: the optimizer the
// Trainer brings]).
struct TrainerOptimizer {
  double lr = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  bool cpu_adam = false;           // DeepSpeedCPUAdam (Accelerate's swap under an offload), else torch AdamW
  std::vector<double> lr_by_step;  // empty: the file's own "scheduler" steps the lr
  nlohmann::json to_json() const;
  static TrainerOptimizer from_resolved(const nlohmann::json& user, const nlohmann::json& resolved);
};

// user: the config file as written; resolved: summary.json's effective_config.resolved;
// lr_by_step: the lr of each step of zrepro's run (used when the file has no "optimizer"
// and no "scheduler").
nlohmann::json config_for_deepspeed(const nlohmann::json& user, const nlohmann::json& resolved,
                                    const std::vector<double>& lr_by_step = {});

}  // namespace zrepro
