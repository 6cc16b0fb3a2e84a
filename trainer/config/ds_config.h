// DeepSpeed config loading with a DeepSpeed release's semantics (the newest profile unless
// --deepspeed-version says another; ds_versions.h): every known key parsed
// into typed settings with its default, deprecated keys mapped, unknown keys
// reported, "auto" values resolved the way the Hugging Face integration does, the
// batch triple derived and checked. Each resolved value remembers where it came from.
#pragma once
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <c10/core/ScalarType.h>
#include <nlohmann/json.hpp>

#include "trainer/config/accelerate_config.h"
#include "zero/zero_config.h"

namespace zrepro {

enum class Source { file, default_, auto_, flag, derived };
const char* source_name(Source s);

// One resolved setting: dotted DeepSpeed path, value, origin and a short note
// (which flag resolved an "auto", how a batch number was derived, ...).
struct ConfigEntry {
  std::string path;
  nlohmann::json value;
  Source source;
  std::string note;
};

// zrepro flags that resolve "auto" values (HF TrainingArguments equivalents) or
// override the file. Unset optionals fall back to the documented defaults below.
struct ConfigFlags {
  std::optional<int64_t> micro_batch;       // --micro-batch  (auto default 8)
  std::optional<int64_t> grad_accum;        // --grad-accum   (auto default 1)
  std::optional<double> lr;                 // --lr           (auto default 1e-3)
  std::optional<double> weight_decay;       // --weight-decay (auto default 0)
  std::optional<double> max_grad_norm;      // --max-grad-norm (auto default 1.0)
  std::optional<double> adam_beta1, adam_beta2, adam_eps;  // 0.9, 0.999, 1e-8
  std::optional<std::string> precision;     // --precision fp32|fp16|bf16 (auto default fp32)
  std::optional<int64_t> warmup_steps;      // --warmup-steps (auto default 0)
  std::optional<int64_t> zero_stage;        // --zero-stage
  std::optional<std::string> z3_leaf_modules;  // --z3-leaf-modules: classes set_z3_leaf_modules is given
  int64_t total_steps = 0;                  // --steps: scheduler total_num_steps "auto"
  int64_t hidden_size = 0;                  // model hidden size for bucket "auto"s
  int world_size = 1;
  bool strict = false;                      // unknown keys are errors
  std::string deepspeed_version;            // --deepspeed-version: resolve as this release ("" = newest)
  // --training-args FILE (training_args.h): the flags it filled, and one line per flag given
  // on the command line that overrode the file's value (said as warnings).
  std::string training_args_file;
  std::set<std::string> from_training_args;
  std::vector<std::string> training_args_notes;
  // --launcher accelerate (with --accelerate-config FILE or without): "auto" as Accelerate
  // fills it ([Note: "auto" as Accelerate fills it], accelerate_config.h); unset: as the
  // Hugging Face Trainer does.
  std::optional<AccelerateConfig> accelerate;
  // --training-args: the Trainer's own lr schedule, run where the file has no "scheduler"
  // ([Note: the Trainer's schedule], zero_config.h; its warmup and total steps are filled
  // when the config resolves). warmup_ratio: the Trainer's warmup as a share of --steps.
  std::optional<SchedulerConfig> trainer_scheduler;
  std::optional<double> warmup_ratio;
  // The Trainer's max_steps: its schedule (and "auto" total_num_steps) spans the job's
  // steps, of which the run takes the first --steps; unset: it spans --steps.
  std::optional<int64_t> trainer_total_steps;
};

// The settings the engine is made of are its base ([Note: what a config gives the engine],
// zero/zero_config.h): precision, zero, optimizer, scheduler, fp16, bf16_check_grad_overflow,
// gradient_clipping.
struct DsConfig : EngineSettings {
  std::string file;  // where it was loaded from ("" for built-in)
  std::string deepspeed_version;  // the release whose semantics resolved it (trainer/config/ds_versions.h)
  int64_t train_batch_size = 0, micro_batch = 0, grad_accum = 0;
  int world_size = 1;
  std::optional<int64_t> steps_per_print;
  std::string communication_data_type;  // resolved: fp32 | fp16 | bf16
  bool managed_gradient_accumulation = true;
  struct {
    bool partition_activations = false, contiguous_memory_optimization = false,
         cpu_checkpointing = false;
    std::optional<int64_t> number_checkpoints;
  } activation_checkpointing;
  bool wall_clock_breakdown = false, memory_breakdown = false;
  bool load_universal = false;  // checkpoint.load_universal

  std::vector<ConfigEntry> entries;   // every resolved value, in load order
  std::vector<std::string> warnings;  // deprecated keys, unknown keys, flag overrides
  // [Note: what the file leaves to the script] A config without "optimizer" or "scheduler"
  // leaves them to the job's script (the Hugging Face Trainer then creates torch AdamW,
  // weight decay off for biases and norm weights, and its own lr schedule, linear decay
  // by default); zrepro runs DeepSpeed's AdamW on every parameter, and a constant lr unless
  // --training-args gives the Trainer's schedule ([Note: the Trainer's schedule],
  // zero_config.h). One line each, said by run ("[zrepro] assumed: ...") and in summary.json.
  std::vector<std::string> assumed;

  // Nested DeepSpeed JSON of the resolved values (feedable back to DeepSpeed).
  nlohmann::json resolved_json() const;
  // {"resolved": ..., "entries": [{key, value, source, note}], "warnings": [...], "assumed": [...]}
  nlohmann::json effective_json() const;
};

// Throws ConfigError (exit 2) on malformed JSON (with line and column), wrong
// types, out-of-range values and inconsistent batch numbers.
DsConfig load_ds_config(const std::string& path, const ConfigFlags& flags);
DsConfig parse_ds_config(const std::string& text, const std::string& name, const ConfigFlags& flags);
// The job's config: --config's file, or under Accelerate the deepspeed_config_file its
// config names, or the config its plugin builds from the YAML's deepspeed_config keys.
// Throws ConfigError when there is none, or --config beside a YAML that builds its own.
DsConfig load_job_config(const std::optional<std::string>& config_path, const ConfigFlags& flags);

// DeepSpeed's batch-triple rules (engine config _set_batch_related_parameters and
// _batch_assertion). Throws ConfigError with DeepSpeed's message.
struct BatchTriple {
  int64_t train_batch_size, micro_batch, grad_accum;
  std::string how;  // which values were derived and from what
};
BatchTriple derive_batch_triple(std::optional<int64_t> tb, std::optional<int64_t> micro,
                                std::optional<int64_t> gas, int world_size);

// The dtype gradients are reduced in (communication_data_type, resolved).
c10::ScalarType comm_dtype_of(const DsConfig& cfg);

// DeepSpeed-style "name ..... value" dump, one line per setting, with its source.
std::string format_config_dump(const DsConfig& cfg);

}  // namespace zrepro
