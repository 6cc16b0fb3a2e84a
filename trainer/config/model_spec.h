// Dimensions of the toy GPT: from a preset (tiny, small, well-known GPT shapes),
// from a Hugging Face config.json, then adjusted by explicit flags. Also the
// closed-form parameter count the planner and the tests rely on.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace zrepro {

struct ModelSpec {
  std::string name;
  int64_t vocab = 128, seq = 32, hidden = 64, layers = 2, heads = 4, intermediate = 256;

  // Embeddings V*h + S*h; per block 4h^2 + 2hI + 9h + I (qkv, proj, fc, fc2 with
  // biases, two LayerNorms); final LayerNorm 2h; LM head h*V (untied, no bias).
  int64_t param_count() const;
  int64_t block_params() const;
  // DeepSpeed's model_to_params "largest layer": the most parameters one module owns
  // itself (an nn.Embedding or nn.Linear: the word embedding or the LM head for GPT
  // shapes), not a whole block.
  int64_t largest_module_params() const;
  nlohmann::json to_json() const;
};

struct ModelOverrides {
  std::optional<int64_t> vocab, seq, hidden, layers, heads, intermediate;
};

std::vector<std::string> model_preset_names();
// arg: a preset name, or the path of a Hugging Face config.json. Throws ConfigError.
ModelSpec resolve_model(const std::string& arg, const ModelOverrides& overrides = {});
ModelSpec load_hf_config(const std::string& path);

}  // namespace zrepro
