// Plain, typed settings the engine reads: the ZeRO, precision, optimizer and
// scheduler sections of a DeepSpeed config after loading and validation
// (trainer/ds_config.cpp fills them; nothing here knows about JSON).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "zero/schedule/stage_policy.h"

namespace zrepro {

enum class Precision { fp32, fp16, bf16 };
const char* precision_name(Precision p);

struct OffloadConfig {
  std::string device = "none";  // none | cpu | nvme
  std::string nvme_path;
  int64_t buffer_count = 4;     // 5 for offload_param
  int64_t buffer_size = 100000000;
  int64_t max_in_cpu = 1000000000;
  bool pin_memory = true;       // true since DeepSpeed 0.19.5 (false before)
  bool pipeline_read = false, pipeline_write = false, fast_init = false;
  double ratio = 1.0;
  bool enabled() const { return device != "none"; }
};

struct ZeroConfig {
  int stage = 0;
  bool contiguous_gradients = true;
  bool reduce_scatter = true;
  int64_t reduce_bucket_size = 500000000;
  bool allgather_partitions = true;
  int64_t allgather_bucket_size = 500000000;
  bool overlap_comm = false;  // unset in DeepSpeed: true only for stage 3
  int64_t sub_group_size = 1000000000;
  int64_t stage3_prefetch_bucket_size = 50000000;
  int64_t stage3_param_persistence_threshold = 100000;
  int64_t stage3_max_live_parameters = 1000000000;
  int64_t stage3_max_reuse_distance = 1000000000;
  bool stage3_gather_16bit_weights_on_model_save = false;
  bool round_robin_gradients = false;
  bool use_multi_rank_bucket_allreduce = true;  // see bucket_reduce_scatters
  bool ignore_unused_parameters = true;
  OffloadConfig offload_param;
  OffloadConfig offload_optimizer;
  // zero_optimization.leaf_module (DeepSpeed >= 0.18.0; set_z3_leaf_modules, or zrepro's
  // --z3-leaf-modules, at any release): modules ZeRO-3 fetches as one unit with every
  // parameter under them. classes: a class name, short or module-qualified; names: a
  // module's full name; name_suffixes: the end of one. DeepSpeed 0.18.0 and later default
  // classes to Hugging Face's MoE blocks (trainer/config/leaf_modules.h).
  struct LeafModules {
    std::vector<std::string> classes, names, name_suffixes;
    // The classes the script hands set_z3_leaf_modules (--z3-leaf-modules), also in
    // classes: DeepSpeed raises when none of them is a module of the model.
    std::vector<std::string> api_classes;
  } leaf_module;
};

// [Note: the bucket collective] Which collective reduces a gradient bucket, as
// DeepSpeed 0.19 does (measured: docs/design/CONFORMANCE.md). Stages 1-2
// (stage_1_and_2.py average_tensor) all-reduce the whole bucket and each rank keeps
// its slice: use_multi_rank_bucket_allreduce is on by default, and reduce_scatter
// false all-reduces too. With use_multi_rank_bucket_allreduce off they reduce each
// slice to its owner, the bytes of a reduce-scatter. Stage 3 reduce-scatters
// unless reduce_scatter is false. False: all-reduce.
inline bool bucket_reduce_scatters(const ZeroConfig& z) {
  if (StagePolicy{z.stage}.shard_params()) return z.reduce_scatter;
  return z.reduce_scatter && !z.use_multi_rank_bucket_allreduce;
}

// fp16.loss_scale == 0 means dynamic loss scaling.
struct LossScaleConfig {
  double loss_scale = 0;
  int initial_scale_power = 16;
  int64_t loss_scale_window = 1000;
  int hysteresis = 2;
  bool consecutive_hysteresis = false;
  double min_loss_scale = 1;
};

struct OptimizerConfig {
  std::string type = "AdamW";  // Adam | AdamW (DeepSpeed's Adam is AdamW unless adam_w_mode false)
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool adam_w_mode = true;
  bool bias_correction = true;
};

// [Note: the Trainer's schedule] A DeepSpeed config without "scheduler" run by the Hugging
// Face Trainer trains under the Trainer's own schedule (transformers' get_scheduler from the
// job's lr_scheduler_type, default linear; warmup from warmup_steps, or a ratio of the
// steps), a LambdaLR: the lr is the optimizer's lr times lambda(s), s the number of steps
// applied so far, so the first step runs at lambda(0) (0 under a warmup). With the file's
// "optimizer" the Trainer hands the scheduler to DeepSpeed (which steps it and saves its
// state_dict in the checkpoint); without, the Trainer steps it itself after each applied
// step and saves it beside DeepSpeed's checkpoint (DeepSpeed's lr_scheduler is None).
struct SchedulerConfig {
  // empty: constant lr | WarmupLR | WarmupDecayLR | WarmupCosineLR (DeepSpeed's), or with
  // trainer: linear | cosine | constant | constant_with_warmup | cosine_with_min_lr.
  std::string type;
  bool trainer = false;            // the Trainer's schedule (type is its lr_scheduler_type)
  bool in_deepspeed_state = false; // trainer: DeepSpeed steps and saves it (the file has "optimizer")
  double num_cycles = 0.5;         // trainer cosine: lr_scheduler_kwargs num_cycles
  double min_lr_rate = 0.0;        // trainer cosine_with_min_lr: min_lr_rate, or min_lr / lr
  double min_lr = -1.0;            // trainer cosine_with_min_lr: min_lr when given (else < 0)
  double warmup_min_lr = 0.0;
  double warmup_max_lr = 0.001;
  int64_t warmup_num_steps = 1000;
  std::string warmup_type = "log";  // log | linear
  int64_t total_num_steps = 0;      // WarmupDecayLR, WarmupCosineLR
  // WarmupCosineLR: ratios of the optimizer's lr (warmup from warmup_min_ratio to 1,
  // then cosine down to cos_min_ratio).
  double warmup_min_ratio = 0.0;
  double cos_min_ratio = 0.0001;
};

// [Note: what a config gives the engine] The settings of a DeepSpeed config the engine is
// made of. The config loader parses straight into them (DsConfig, trainer/config/
// ds_config.h, is an EngineSettings with the rest of the file beside), and the engine's
// configuration is one (EngineConfig, engine.h, adds what the run decides): no field is
// copied from the config into the engine one by one.
// [Note: a release's own behaviour] What the DeepSpeed release a config is resolved as
// (--deepspeed-version) does unlike the releases around it, bugs included, so zrepro trains as
// that release did. Decided once, where the config is resolved (trainer/config/ds_config.cpp,
// from configs/deepspeed_versions.json's "behaviour" entries); the engine only reads it.
struct ReleaseBehaviour {
  // DeepSpeed 0.17.6-0.18.2 at ZeRO-2 without optimizer offload (issue #7718): the
  // gradient epilogue (stage_1_and_2.py independent_gradient_partition_epilogue@v0.17.6)
  // takes its "first micro-step" branch at every micro-step, since averaged_gradients is
  // only set at the boundary and is reset after each step, so each micro-step's gradients
  // replace the previous ones: only the boundary micro-step's gradients reach the step.
  bool boundary_micro_step_grads_only = false;
};

struct EngineSettings {
  Precision precision = Precision::fp32;
  ReleaseBehaviour release;
  ZeroConfig zero;
  OptimizerConfig optimizer;
  SchedulerConfig scheduler;
  LossScaleConfig fp16;  // the loss scaler's (used under fp16 only)
  bool bf16_check_grad_overflow = true;
  double gradient_clipping = 1.0;
};

}  // namespace zrepro
