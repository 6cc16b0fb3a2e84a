// TrainingArgs: the Hugging Face Trainer's arguments a DeepSpeed job ran with, read from
// a JSON file (`trainer.args.to_json_string()`, the training_args.json some recipes save,
// or the few keys a user copies from their script), and turned into what fills the
// config's "auto" values.
//
// [Note: "auto" as the Trainer fills it] transformers' DeepSpeed integration
// (HfTrainerDeepSpeedConfig.trainer_config_process) fills train_micro_batch_size_per_gpu
// from per_device_train_batch_size, gradient_accumulation_steps from its namesake,
// train_batch_size as world x micro x accumulation, gradient_clipping from max_grad_norm,
// the optimizer's lr / betas / eps / weight_decay from learning_rate, adam_beta1,
// adam_beta2, adam_epsilon, weight_decay, fp16.enabled / bf16.enabled from fp16 / bf16
// (neither: fp32) and the scheduler's warmup from warmup_steps (or warmup_ratio). zrepro's flags are the
// same knobs: a flag given on the command line wins over the file (and is said), a key
// the file lacks keeps zrepro's default (and its "auto" warning). gradient_checkpointing
// turns on activation checkpointing; TRL's max_seq_length sets the sequence. Accelerate
// fills "auto" otherwise: [Note: "auto" as Accelerate fills it] (accelerate_config.h).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trainer/config/ds_config.h"

namespace zrepro {

struct TrainingArgs {
  std::string file;
  std::optional<int64_t> per_device_train_batch_size, gradient_accumulation_steps, warmup_steps, max_seq_length;
  std::optional<double> learning_rate, weight_decay, max_grad_norm, adam_beta1, adam_beta2, adam_epsilon;
  std::optional<std::string> precision;  // "bf16" / "fp16" / "fp32", when the file says bf16 or fp16
  bool gradient_checkpointing = false;
  // Present in the TrainingArguments of transformers releases that normalise the loss by
  // num_items_in_batch: true gathers the count over the ranks (trainer/loop/loss_normalization.h).
  std::optional<bool> average_tokens_across_devices;
  // The Trainer's lr schedule (used where the DeepSpeed config has no "scheduler"):
  // lr_scheduler_type (default linear) and its lr_scheduler_kwargs; warmup_steps below 1
  // (transformers 5) or warmup_ratio (4.x) is a share of the training steps.
  SchedulerConfig scheduler;
  std::optional<double> warmup_ratio;
  std::optional<int64_t> max_steps;  // the job's training steps, when the file gives them (> 0)
};

// Throws ConfigError naming the file, the key, the value and what was expected.
TrainingArgs load_training_args(const std::string& path);
// Fills every flag f has unset from t (recorded in f.from_training_args); a flag given on
// the command line that differs from the file wins, with a line in f.training_args_notes.
void apply_training_args(const TrainingArgs& t, ConfigFlags& f);

}  // namespace zrepro
