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
#pragma once
#include <nlohmann/json.hpp>

namespace zrepro {

// user: the config file as written; resolved: summary.json's effective_config.resolved.
nlohmann::json config_for_deepspeed(const nlohmann::json& user, const nlohmann::json& resolved);

}  // namespace zrepro
