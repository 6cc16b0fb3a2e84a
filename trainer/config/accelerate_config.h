// AccelerateConfig: the `accelerate launch` config file a DeepSpeed job ran with (the YAML
// `accelerate config` writes, ~/.cache/huggingface/accelerate/default_config.yaml, or its
// JSON form), read for what fills the DeepSpeed config's "auto" values under Accelerate.
//
// [Note: "auto" as Accelerate fills it] Read in accelerate 1.15.0.dev0 (commit 16cb6eb8:
// utils/dataclasses.py DeepSpeedPlugin, accelerator.py _prepare_deepspeed, utils/launch.py)
// and unlike the Trainer's rules ([Note: "auto" as the Trainer fills it], training_args.h):
// - the plugin fills zero_optimization.stage (the YAML's zero_stage, default 2), the
//   offload devices (default "none"), gradient_accumulation_steps (the YAML's, else the
//   Accelerator's, 1; a config file without the key gets 1) and gradient_clipping (the
//   YAML's, else 1.0 at prepare());
// - fp16/bf16 "enabled" follow mixed_precision (the YAML's or --mixed_precision; "no": both
//   off); a file that enables the other half precision is refused;
// - train_micro_batch_size_per_gpu comes from the DataLoader given to prepare() (zrepro:
//   --micro-batch, refused when not given), train_batch_size = micro x gas x processes;
// - the optimizer's lr and weight_decay come from a DummyOptim (defaults 0.001 and 0), the
//   scheduler's from a DummyScheduler (warmup 0, total_num_steps divided by the processes);
//   every other "auto" (betas, eps, ...) is refused: Accelerate has nothing to fill it with;
// - an explicit value in the file is never checked against the launcher's: the file wins
//   (the Trainer refuses the mismatch);
// - a deepspeed_config_file beside the YAML keys that would fill it is refused.
// The messages are Accelerate's own, quoted.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace zrepro {

struct AccelerateConfig {
  std::string file;  // "" when --launcher accelerate came without a file: Accelerate's defaults
  std::string distributed_type = "DEEPSPEED";
  std::optional<std::string> deepspeed_config_file;
  std::optional<int64_t> gradient_accumulation_steps, zero_stage, num_processes, num_machines;
  std::optional<double> gradient_clipping;
  std::optional<std::string> offload_optimizer_device, offload_param_device, mixed_precision;
  // The keys given that Accelerate's plugin refuses beside a deepspeed_config_file
  // (deepspeed_config.* and a top-level mixed_precision), in file order.
  std::vector<std::string> plugin_fields;

  // "the accelerate config FILE's KEY" (or "Accelerate's default" without a file).
  std::string source(const std::string& key) const;
  // Checks a config file beside plugin fields (Accelerate's ValueError, verbatim):
  // throws ConfigError.
  void check_config_file_fields() const;
  // Without deepspeed_config_file: the DeepSpeed config the plugin builds from the keys.
  // For a script on Accelerate alone every plugin key is "auto" (resolving it says where the
  // value came from); under the Trainer (`accelerate launch` of a Trainer script) the
  // plugin's values and its mixed-precision sections are in place before the Trainer fills
  // the rest and checks them against its arguments.
  nlohmann::json inline_ds_config(bool trainer) const;
};

// Throws ConfigError naming --accelerate-config, the key, the value and what was expected.
// YAML needs yaml-cpp in the build; JSON always reads.
AccelerateConfig load_accelerate_config(const std::string& path);
// The same on the file's text (PATH names it in messages): what load_accelerate_config does
// after reading the file, and what fuzz/yaml_fuzz.cpp drives.
AccelerateConfig parse_accelerate_config(const std::string& path, const std::string& text);
// Whether this build reads YAML (yaml-cpp found at configure time).
bool accelerate_yaml_supported();

}  // namespace zrepro
