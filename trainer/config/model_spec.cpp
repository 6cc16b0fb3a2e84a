// See model_spec.h.
#include "trainer/config/model_spec.h"

#include <algorithm>

#include <fstream>
#include <map>

#include "device/base/errors.h"

namespace zrepro {

using json = nlohmann::json;

namespace {

ModelSpec make(const char* name, int64_t vocab, int64_t seq, int64_t hidden, int64_t layers, int64_t heads) {
  return ModelSpec{name, vocab, seq, hidden, layers, heads, 4 * hidden};
}

const std::vector<ModelSpec>& presets() {
  // tiny/small for runs on a laptop CPU; the GPT-2 / GPT-3 shapes for the planner.
  static const std::vector<ModelSpec> p = {
      make("tiny", 128, 32, 64, 2, 4),          make("small", 1024, 128, 256, 4, 8),
      make("medium", 4096, 256, 512, 8, 8),     make("gpt2", 50257, 1024, 768, 12, 12),
      make("gpt2-medium", 50257, 1024, 1024, 24, 16), make("gpt2-large", 50257, 1024, 1280, 36, 20),
      make("gpt2-xl", 50257, 1024, 1600, 48, 25), make("gpt3-1.3b", 50257, 2048, 2048, 24, 16),
      make("gpt3-2.7b", 50257, 2048, 2560, 32, 32), make("gpt3-6.7b", 50257, 2048, 4096, 32, 32),
      make("gpt3-13b", 50257, 2048, 5120, 40, 40),
  };
  return p;
}

void validate(const ModelSpec& m, const std::string& where) {
  for (auto [key, v] : std::map<std::string, int64_t>{{"vocab", m.vocab}, {"seq", m.seq}, {"hidden", m.hidden},
                                                      {"layers", m.layers}, {"heads", m.heads},
                                                      {"intermediate", m.intermediate}})
    if (v <= 0) throw ConfigError(where + ": " + key + " must be > 0, got " + std::to_string(v));
  if (m.hidden % m.heads != 0)
    throw ConfigError(where + ": hidden size " + std::to_string(m.hidden) + " is not divisible by heads " +
                      std::to_string(m.heads) + "; pick heads that divide the hidden size");
}

}  // namespace

int64_t ModelSpec::block_params() const {
  const int64_t h = hidden, I = intermediate;
  return 4 * h * h + 2 * h * I + 9 * h + I;
}

int64_t ModelSpec::largest_module_params() const {
  const int64_t h = hidden, I = intermediate;
  return std::max({vocab * h, seq * h, 3 * h * h + 3 * h, h * h + h, I * h + I, h * I + h, 2 * h});
}

int64_t ModelSpec::param_count() const {
  return vocab * hidden + seq * hidden + layers * block_params() + 2 * hidden + hidden * vocab;
}

json ModelSpec::to_json() const {
  return {{"name", name},     {"params", param_count()}, {"layers", layers},
          {"hidden", hidden}, {"heads", heads},          {"seq", seq},
          {"vocab", vocab},   {"intermediate", intermediate}};
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const auto& p : presets()) names.push_back(p.name);
  return names;
}

ModelSpec load_hf_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError("--model: cannot read \"" + path + "\"");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::parse_error& e) {
    throw ConfigError("--model " + path + ": malformed JSON (" + std::string(e.what()) + ")");
  }
  // Each field under its Hugging Face name, then the GPT-2 style alias.
  auto field = [&](std::initializer_list<const char*> keys, std::optional<int64_t> def) -> int64_t {
    for (const char* k : keys) {
      if (!j.contains(k) || j[k].is_null()) continue;
      if (!j[k].is_number_integer())
        throw ConfigError("--model " + path + ": " + k + " must be an integer, got " + j[k].dump());
      return j[k].get<int64_t>();
    }
    if (def) return *def;
    throw ConfigError("--model " + path + ": missing " + *keys.begin() +
                      " (a Hugging Face config.json needs hidden_size, num_hidden_layers, "
                      "num_attention_heads, vocab_size)");
  };
  ModelSpec m;
  m.name = path;
  m.hidden = field({"hidden_size", "n_embd", "d_model"}, std::nullopt);
  m.layers = field({"num_hidden_layers", "n_layer", "num_layers"}, std::nullopt);
  m.heads = field({"num_attention_heads", "n_head"}, std::nullopt);
  m.vocab = field({"vocab_size"}, std::nullopt);
  m.intermediate = field({"intermediate_size", "n_inner", "ffn_dim"}, 4 * m.hidden);
  m.seq = field({"max_position_embeddings", "n_positions", "n_ctx"}, int64_t{2048});
  validate(m, "--model " + path);
  return m;
}

ModelSpec resolve_model(const std::string& arg, const ModelOverrides& o) {
  ModelSpec m;
  bool found = false;
  for (const auto& p : presets())
    if (p.name == arg) { m = p; found = true; }
  if (!found) {
    if (arg.size() > 5 && arg.substr(arg.size() - 5) == ".json") {
      m = load_hf_config(arg);
    } else {
      std::string list;
      for (const auto& n : model_preset_names()) list += (list.empty() ? "" : ", ") + n;
      throw ConfigError("--model: \"" + arg + "\" is neither a preset (" + list +
                        ") nor a Hugging Face config.json path");
    }
  }
  if (o.vocab) m.vocab = *o.vocab;
  if (o.seq) m.seq = *o.seq;
  if (o.layers) m.layers = *o.layers;
  if (o.heads) m.heads = *o.heads;
  if (o.hidden) {
    if (!o.intermediate && m.intermediate == 4 * m.hidden) m.intermediate = 4 * *o.hidden;
    m.hidden = *o.hidden;
  }
  if (o.intermediate) m.intermediate = *o.intermediate;
  validate(m, "--model " + arg);
  return m;
}

}  // namespace zrepro
