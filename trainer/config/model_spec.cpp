// See model_spec.h.
#include "trainer/config/model_spec.h"

#include <cmath>

#include <algorithm>
#include <fstream>
#include <map>
#include <tuple>

#include "device/base/errors.h"
#include "trainer/config/user_file.h"

namespace zrepro {

using json = nlohmann::json;

const char* family_name(Family f) { return f == Family::llama ? "llama" : "gpt2"; }
const char* attention_name(Attention a) { return a == Attention::sdpa ? "sdpa" : "eager"; }

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::gelu: return "gelu";
    case Activation::gelu_new: return "gelu_new";
    case Activation::gelu_tanh: return "gelu_pytorch_tanh";
  }
  return "?";
}


namespace {

// A GPT-2-family preset. A published model's learned position table keeps its size
// (`seq` rows) when a run trains shorter sequences; a toy's follows --seq.
ModelSpec gpt(const char* name, int64_t vocab, int64_t seq, int64_t hidden, int64_t layers, int64_t heads,
              bool tied, bool published = true) {
  ModelSpec m{name, vocab, seq, hidden, layers, heads, 4 * hidden};
  m.tied = tied;
  if (published) {  // Hugging Face's GPT-2 modules ([Note: what Hugging Face's modules keep])
    m.positions = seq;
    m.activation = Activation::gelu_new;
    m.softmax_fp32 = false;
  }
  return m;
}

// A Llama-family preset: no biases unless `qkv_bias` (qwen2), untied LM head.
ModelSpec llama(const char* name, const char* type, int64_t vocab, int64_t seq, int64_t hidden, int64_t layers,
                int64_t heads, int64_t kv_heads, int64_t intermediate, double eps, double theta,
                bool qkv_bias = false) {
  ModelSpec m{name, vocab, seq, hidden, layers, heads, intermediate};
  m.family = Family::llama;
  m.model_type = type;
  m.kv_heads = kv_heads;
  m.qkv_bias = qkv_bias;
  m.o_bias = m.mlp_bias = false;
  m.norm_eps = eps;
  m.rope_theta = theta;
  return m;
}

// A mixture-of-experts preset ([Note: MoE blocks]): llama blocks with routed experts.
ModelSpec moe(ModelSpec m, int64_t experts, int64_t per_tok, int64_t expert_width, int64_t shared_width,
              bool norm_topk, double aux_coef = 0.001) {
  m.experts = experts, m.experts_per_tok = per_tok, m.moe_intermediate = expert_width;
  m.shared_intermediate = shared_width, m.norm_topk_prob = norm_topk, m.router_aux_loss_coef = aux_coef;
  return m;
}

const std::vector<ModelSpec>& presets() {
  // tiny/small/medium: toys for a laptop CPU (untied LM head). gpt2*: Hugging Face's
  // GPT-2 configs (tied). gpt3-*: the GPT-3 paper's shapes with an untied LM head.
  // tiny-llama/small-llama: Llama-family toys (grouped-query attention, 2 query heads
  // per key/value head; tiny-llama-tied ties the LM head). Llama family: the published configs, trained at 4096 tokens
  // here (--seq to change).
  static const std::vector<ModelSpec> p = [] {
    std::vector<ModelSpec> v = {
        gpt("tiny", 128, 32, 64, 2, 4, false, false),   gpt("small", 1024, 128, 256, 4, 8, false, false),
        gpt("medium", 4096, 256, 512, 8, 8, false, false),     gpt("gpt2", 50257, 1024, 768, 12, 12, true),
        gpt("gpt2-medium", 50257, 1024, 1024, 24, 16, true), gpt("gpt2-large", 50257, 1024, 1280, 36, 20, true),
        gpt("gpt2-xl", 50257, 1024, 1600, 48, 25, true), gpt("gpt3-1.3b", 50257, 2048, 2048, 24, 16, false),
        gpt("gpt3-2.7b", 50257, 2048, 2560, 32, 32, false), gpt("gpt3-6.7b", 50257, 2048, 4096, 32, 32, false),
        gpt("gpt3-13b", 50257, 2048, 5120, 40, 40, false),
        llama("tiny-llama", "llama", 128, 32, 64, 2, 4, 2, 160, 1e-5, 10000),
        [] {  // the same with the LM head tied to the embedding (conformance's tied Llama)
          ModelSpec m = llama("tiny-llama-tied", "llama", 128, 32, 64, 2, 4, 2, 160, 1e-5, 10000);
          m.tied = true;
          return m;
        }(),
        llama("small-llama", "llama", 1024, 128, 256, 4, 8, 4, 688, 1e-5, 10000),
        llama("tinyllama-1.1b", "llama", 32000, 4096, 2048, 22, 32, 4, 5632, 1e-5, 10000),
        llama("llama-2-7b", "llama", 32000, 4096, 4096, 32, 32, 32, 11008, 1e-5, 10000),
        llama("llama-2-13b", "llama", 32000, 4096, 5120, 40, 40, 40, 13824, 1e-5, 10000),
        llama("llama-3-8b", "llama", 128256, 4096, 4096, 32, 32, 8, 14336, 1e-5, 500000),
        llama("mistral-7b", "mistral", 32000, 4096, 4096, 32, 32, 8, 14336, 1e-5, 10000),
        llama("qwen2.5-7b", "qwen2", 152064, 4096, 3584, 28, 28, 4, 18944, 1e-6, 1000000, true),
        // Mixture of experts: the toys (8 experts, 2 per token; tiny-qwen2-moe with a
        // shared expert and no renormalisation, as Qwen2-MoE), Mixtral-8x7B and
        // Qwen1.5-MoE-A2.7B as their config.json files on the Hub say.
        moe(llama("tiny-mixtral", "mixtral", 128, 32, 64, 2, 4, 2, 96, 1e-5, 1000000), 8, 2, 96, 0, true),
        moe(llama("tiny-qwen2-moe", "qwen2_moe", 128, 32, 64, 2, 4, 2, 160, 1e-6, 1000000, true), 8, 2, 32, 64,
            false),
        moe(llama("mixtral-8x7b", "mixtral", 32000, 32768, 4096, 32, 32, 8, 14336, 1e-5, 1000000), 8, 2, 14336, 0,
            true, 0.02),
        moe(llama("qwen1.5-moe-a2.7b", "qwen2_moe", 151936, 8192, 2048, 24, 16, 16, 5632, 1e-6, 1000000, true), 60, 4,
            1408, 5632, false),
    };
    return v;
  }();
  return p;
}

// Other spellings users type for a preset.
const std::map<std::string, std::string>& preset_aliases() {
  static const std::map<std::string, std::string> a = {
      {"llama2-7b", "llama-2-7b"}, {"llama2-13b", "llama-2-13b"}, {"llama3-8b", "llama-3-8b"},
      {"qwen2.5-7B", "qwen2.5-7b"}, {"TinyLlama-1.1B", "tinyllama-1.1b"}, {"mistral-7b-v0.1", "mistral-7b"},
      {"Mixtral-8x7B", "mixtral-8x7b"}, {"mixtral-8x7b-v0.1", "mixtral-8x7b"}, {"Qwen1.5-MoE-A2.7B", "qwen1.5-moe-a2.7b"}};
  return a;
}

// Every size above zero and below the bounds zrepro plans within.
void validate_sizes(const ModelSpec& m, const std::string& where) {
  for (auto [key, v] : std::map<std::string, int64_t>{{"vocab", m.vocab}, {"seq", m.seq}, {"hidden", m.hidden},
                                                      {"layers", m.layers}, {"heads", m.heads},
                                                      {"intermediate", m.intermediate}})
    if (v <= 0) throw ConfigError(where + ": " + key + " must be > 0, got " + std::to_string(v));
  if (m.vocab > kMaxVocab)
    throw ConfigError(where + ": vocab " + std::to_string(m.vocab) + " is above " + std::to_string(kMaxVocab) +
                      " (token ids are 32-bit); real vocabularies are below a million");
  // Bounds on every size a model file can set (issue 33: num_hidden_layers 1e9 or
  // hidden_size 2^40 made plan run without end): far above any published model, low
  // enough that byte counts stay within 64 bits and the planner's work stays bounded.
  for (auto [key, v, limit, real] : {std::tuple<const char*, int64_t, int64_t, const char*>{
                                         "layers", m.layers, kMaxLayers, "the deepest published models have ~200"},
                                     {"hidden", m.hidden, kMaxHidden, "the widest have ~25,000"},
                                     {"heads", m.heads, kMaxHeads, "the most have ~128"},
                                     {"intermediate", m.intermediate, kMaxIntermediate, "the widest MLPs have ~100,000"},
                                     {"seq", m.seq, kMaxSeq, "long-context training runs use up to ~1,000,000"}})
    if (v > limit)
      throw ConfigError(where + ": " + key + " " + std::to_string(v) + " is above " + std::to_string(limit) + " (" +
                        real + "); check the model file or flag that set it");
}

// The shapes the architecture needs: positions, heads, rotary, the norm.
void validate_shapes(const ModelSpec& m, const std::string& where) {
  if (m.family == Family::gpt2 && m.positions > 0 && m.seq > m.positions)
    throw ConfigError(where + ": seq " + std::to_string(m.seq) + " is past the model's learned position table (" +
                      std::to_string(m.positions) + " positions, n_positions): Hugging Face fails there with an "
                      "index error; train at most " + std::to_string(m.positions) + " tokens (--seq " +
                      std::to_string(m.positions) + ")");
  if (m.hidden % m.heads != 0)
    throw ConfigError(where + ": hidden size " + std::to_string(m.hidden) + " is not divisible by heads " +
                      std::to_string(m.heads) + "; pick heads that divide the hidden size");
  if (m.kv_heads < 0 || (m.kv_heads > 0 && m.heads % m.kv_heads != 0))
    throw ConfigError(where + ": num_key_value_heads " + std::to_string(m.kv_heads) +
                      " must divide num_attention_heads " + std::to_string(m.heads));
  if (m.family == Family::llama && m.head_dim() % 2 != 0)
    throw ConfigError(where + ": rotary embeddings need an even head dimension, got hidden " +
                      std::to_string(m.hidden) + " / heads " + std::to_string(m.heads) + " = " +
                      std::to_string(m.head_dim()));
  if (!(m.norm_eps > 0)) throw ConfigError(where + ": the norm epsilon must be > 0");
}

// A mixture of experts: its block, expert count, routing and widths.
void validate_experts(const ModelSpec& m, const std::string& where) {
  if (m.family != Family::llama)
    throw ConfigError(where + ": experts need a llama-family block (mixtral, qwen2_moe)");
  if (m.experts > 4096) throw ConfigError(where + ": " + std::to_string(m.experts) + " experts is above 4096 (the "
                                          "most in published models is ~512); check num_local_experts / num_experts");
  if (m.experts_per_tok < 1 || m.experts_per_tok > m.experts)
    throw ConfigError(where + ": num_experts_per_tok " + std::to_string(m.experts_per_tok) + " must be in [1, " +
                      std::to_string(m.experts) + "] (the number of experts)");
  if (m.moe_intermediate <= 0 || m.moe_intermediate > kMaxIntermediate || m.shared_intermediate < 0 ||
      m.shared_intermediate > kMaxIntermediate)
    throw ConfigError(where + ": expert width " + std::to_string(m.moe_intermediate) + " / shared expert width " +
                      std::to_string(m.shared_intermediate) + " must be in (0, " + std::to_string(kMaxIntermediate) +
                      "] / [0, " + std::to_string(kMaxIntermediate) + "]");
  if (!(m.router_aux_loss_coef >= 0) || !std::isfinite(m.router_aux_loss_coef))
    throw ConfigError(where + ": router_aux_loss_coef " + std::to_string(m.router_aux_loss_coef) +
                      " must be a finite number >= 0 (Mixtral-8x7B uses 0.02, transformers' default is 0.001)");
}

}  // namespace

void validate_model(const ModelSpec& m, const std::string& where) {
  validate_sizes(m, where);
  validate_shapes(m, where);
  if (m.moe()) validate_experts(m, where);
}

std::vector<LayerSpec> ModelSpec::layer_shapes() const {
  const int64_t V = vocab, h = hidden, I = intermediate, kv = kv_head_count() * head_dim();
  std::vector<LayerSpec> g;
  auto linear = [](std::vector<ParamSpec>& ps, const std::string& name, int64_t out, int64_t in, bool bias) {
    ps.push_back({name + ".weight", {out, in}});
    if (bias) ps.push_back({name + ".bias", {out}});
  };
  if (recorded) {
    g.push_back({"embed", recorded->embed});
    for (int64_t l = 0; l < layers; ++l) g.push_back({"block." + std::to_string(l), recorded->block});
    g.push_back({"head", recorded->head});
    return g;
  }
  if (family == Family::gpt2) {
    g.push_back({"embed", {{"wte", {V, h}}, {"wpe", {position_rows(), h}}}});
    for (int64_t l = 0; l < layers; ++l) {
      std::vector<ParamSpec> ps = {{"ln1.weight", {h}}, {"ln1.bias", {h}}};
      linear(ps, "attn.qkv", 3 * h, h, true);
      linear(ps, "attn.proj", h, h, true);
      ps.push_back({"ln2.weight", {h}});
      ps.push_back({"ln2.bias", {h}});
      linear(ps, "mlp.fc", I, h, true);
      linear(ps, "mlp.proj", h, I, true);
      g.push_back({"block." + std::to_string(l), ps});
    }
    std::vector<ParamSpec> head = {{"ln_f.weight", {h}}, {"ln_f.bias", {h}}};
    if (!tied) head.push_back({"lm_head.weight", {V, h}});
    g.push_back({"head", head});
    return g;
  }
  g.push_back({"embed", {{"wte", {V, h}}}});
  for (int64_t l = 0; l < layers; ++l) {
    std::vector<ParamSpec> ps = {{"input_norm.weight", {h}}};
    linear(ps, "attn.q", h, h, qkv_bias);
    linear(ps, "attn.k", kv, h, qkv_bias);
    linear(ps, "attn.v", kv, h, qkv_bias);
    linear(ps, "attn.o", h, h, o_bias);
    ps.push_back({"post_norm.weight", {h}});
    const std::string block = "block." + std::to_string(l);
    if (!moe()) {
      linear(ps, "mlp.gate", I, h, mlp_bias);
      linear(ps, "mlp.up", I, h, mlp_bias);
      linear(ps, "mlp.down", h, I, mlp_bias);
      g.push_back({block, ps});
      continue;
    }
    // [Note: MoE blocks]: the router, the shared expert, then the experts (last).
    linear(ps, "mlp.gate", experts, h, false);
    if (shared_intermediate > 0) {
      linear(ps, "mlp.shared_expert.gate_proj", shared_intermediate, h, false);
      linear(ps, "mlp.shared_expert.up_proj", shared_intermediate, h, false);
      linear(ps, "mlp.shared_expert.down_proj", h, shared_intermediate, false);
      linear(ps, "mlp.shared_expert_gate", 1, h, false);
    }
    std::vector<std::vector<ParamSpec>> expert_params(experts);
    const bool mixtral = model_type == "mixtral";  // w1 / w3 / w2, else gate_proj / up_proj / down_proj
    for (int64_t e = 0; e < experts; ++e) {
      // One name either way: block.<l>.mlp.experts.<e>.w1.weight, in the block's group or
      // as w1.weight in the expert's own (block.<l>.mlp.experts.<e>).
      auto& ep = expert_groups ? expert_params[e] : ps;
      const std::string name = expert_groups ? "" : "mlp.experts." + std::to_string(e) + ".";
      linear(ep, name + (mixtral ? "w1" : "gate_proj"), moe_intermediate, h, false);
      linear(ep, name + (mixtral ? "w3" : "up_proj"), moe_intermediate, h, false);
      linear(ep, name + (mixtral ? "w2" : "down_proj"), h, moe_intermediate, false);
    }
    g.push_back({block, ps});
    if (expert_groups)
      for (int64_t e = 0; e < experts; ++e) g.push_back({block + ".mlp.experts." + std::to_string(e), expert_params[e]});
  }
  std::vector<ParamSpec> head = {{"norm.weight", {h}}};
  if (!tied) head.push_back({"lm_head.weight", {V, h}});
  g.push_back({"head", head});
  return g;
}

namespace {
// A parameter's module: its name without ".weight" / ".bias".
std::string module_of(const std::string& name) {
  for (const char* suffix : {".weight", ".bias"}) {
    const std::string s(suffix);
    if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0)
      return name.substr(0, name.size() - s.size());
  }
  return name;
}
}  // namespace

int64_t ModelSpec::block_params() const {
  ModelSpec one = *this;
  one.layers = 1;
  one.expert_groups = false;  // the experts inside their block
  return one.layer_shapes()[1].numel();
}

int64_t ModelSpec::active_param_count() const {
  if (!moe()) return param_count();
  const int64_t idle = (experts - experts_per_tok) * 3 * hidden * moe_intermediate;
  return param_count() - layers * idle;
}

int64_t ModelSpec::largest_module_params() const {
  ModelSpec one = *this;
  one.layers = 1;  // every block has the same modules
  int64_t best = 0;
  for (const auto& g : one.layer_shapes()) {
    std::map<std::string, int64_t> modules;
    for (const auto& p : g.params) modules[module_of(p.name)] += p.numel();
    for (const auto& [name, n] : modules) best = std::max(best, n);
  }
  return best;
}

int64_t ModelSpec::param_count() const {
  // Blocks are alike: count one and multiply (the 70B-scale presets stay cheap).
  ModelSpec none = *this;
  none.layers = 0;
  none.expert_groups = false;
  int64_t n = layers * block_params();
  for (const auto& g : none.layer_shapes()) n += g.numel();
  return n;
}

std::string ModelSpec::assumptions() const {
  return std::string("attention ") + attention_name(attention) + " (" + attention_from + "), seq " +
         std::to_string(seq) + " (" + seq_from + ")" +
         (recorded ? "; parameters and activations: " + recorded->source() : std::string());
}

json ModelSpec::to_json() const {
  json j = {{"name", name},     {"params", param_count()}, {"layers", layers},
            {"hidden", hidden}, {"heads", heads},          {"seq", seq},
            {"vocab", vocab},   {"intermediate", intermediate}, {"family", family_name(family)},
            {"model_type", model_type}, {"tied", tied},    {"attention", attention_name(attention)}};
  if (family == Family::llama) j["kv_heads"] = kv_head_count();
  if (moe()) {
    j["experts"] = {{"count", experts},
                    {"per_token", experts_per_tok},
                    {"intermediate", moe_intermediate},
                    {"shared_intermediate", shared_intermediate},
                    {"norm_topk_prob", norm_topk_prob},
                    {"active_params", active_param_count()},
                    {"router_aux_loss_coef", router_aux_loss ? json(router_aux_loss_coef) : json()}};
  }
  if (family == Family::gpt2) j["positions"] = position_rows(), j["activation"] = activation_name(activation);
  if (attention == Attention::sdpa) j["attention_tile"] = attention_tile;
  else j["softmax"] = softmax_fp32 ? "fp32" : "compute dtype";
  j["assumed"] = {{"attention", attention_from}, {"seq", seq_from}};
  if (recorded)
    j["recorded"] = {{"file", recorded->path}, {"transformers", recorded->transformers}, {"torch", recorded->torch},
                     {"dtype", recorded->dtype}, {"problems", recorded->problems}};
  return j;
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const auto& p : presets()) names.push_back(p.name);
  return names;
}

std::vector<std::string> supported_model_types() { return {"gpt2", "llama", "mistral", "qwen2", "mixtral", "qwen2_moe"}; }

namespace {

// The first of keys the config.json has, or a note that it has none (a default applies).
std::string first_key(const json& j, std::initializer_list<const char*> keys) {
  for (const char* k : keys)
    if (j.contains(k) && !j[k].is_null()) return k;
  return "none of " + std::string(*keys.begin()) + ", ...: 2048 assumed";
}

// A config.json field under its Hugging Face name or an alias; `def` when absent.
template <typename T>
T field(const json& j, const std::string& path, std::initializer_list<const char*> keys, std::optional<T> def) {
  for (const char* k : keys) {
    if (!j.contains(k) || j[k].is_null()) continue;
    const json& v = j[k];
    if constexpr (std::is_same_v<T, bool>) {
      if (!v.is_boolean()) throw ConfigError("--model " + path + ": " + k + " must be true or false, got " + v.dump());
      return v.get<bool>();
    } else if constexpr (std::is_integral_v<T>) {
      if (!v.is_number_integer())
        throw ConfigError("--model " + path + ": " + k + " must be an integer, got " + v.dump());
      return v.get<T>();
    } else {
      if (!v.is_number()) throw ConfigError("--model " + path + ": " + k + " must be a number, got " + v.dump());
      return v.get<T>();
    }
  }
  if (def) return *def;
  throw ConfigError("--model " + path + ": missing " + *keys.begin() +
                    " (a Hugging Face config.json needs hidden_size, num_hidden_layers, "
                    "num_attention_heads, vocab_size)");
}

// GPT2Config's "activation_function" (default "gelu_new"), the ones zrepro computes.
Activation gpt2_activation(const json& j, const std::string& path) {
  if (!j.contains("activation_function") || j["activation_function"].is_null()) return Activation::gelu_new;
  const json& v = j["activation_function"];
  const std::string a = v.is_string() ? v.get<std::string>() : v.dump();
  if (a == "gelu_new") return Activation::gelu_new;
  if (a == "gelu") return Activation::gelu;
  if (a == "gelu_pytorch_tanh") return Activation::gelu_tanh;
  throw ConfigError("--model " + path + ": activation_function \"" + a +
                    "\" is not modelled (expected gelu_new, gelu or gelu_pytorch_tanh); zrepro would not compute "
                    "another activation in its place");
}

void load_llama_fields(const json& j, const std::string& path, ModelSpec& m) {
  m.family = Family::llama;
  m.kv_heads = field<int64_t>(j, path, {"num_key_value_heads"}, m.heads);
  m.tied = field<bool>(j, path, {"tie_word_embeddings"}, false);
  m.norm_eps = field<double>(j, path, {"rms_norm_eps"}, 1e-6);
  m.rope_theta = field<double>(j, path, {"rope_theta"}, 10000.0);
  if (m.model_type == "qwen2" || m.model_type == "qwen2_moe") {
    m.qkv_bias = true;  // Qwen2Attention / Qwen2MoeAttention: q/k/v with bias, o_proj without
    m.o_bias = m.mlp_bias = false;
  } else {
    m.qkv_bias = m.o_bias = field<bool>(j, path, {"attention_bias"}, false);
    m.mlp_bias = field<bool>(j, path, {"mlp_bias"}, false);
  }
  if (j.contains("head_dim") && j["head_dim"].is_number_integer() && j["head_dim"].get<int64_t>() != m.head_dim())
    throw ConfigError("--model " + path + ": head_dim " + j["head_dim"].dump() + " differs from hidden_size / "
                      "num_attention_heads = " + std::to_string(m.head_dim()) + "; zrepro models head_dim = "
                      "hidden_size / num_attention_heads only");
}

// [Note: MoE blocks] from a mixtral / qwen2_moe config.json (MixtralConfig /
// Qwen2MoeConfig defaults where a key is absent).
void load_moe_fields(const json& j, const std::string& path, ModelSpec& m) {
  const bool mixtral = m.model_type == "mixtral";
  m.experts = field<int64_t>(j, path, {mixtral ? "num_local_experts" : "num_experts"}, int64_t{mixtral ? 8 : 60});
  m.experts_per_tok = field<int64_t>(j, path, {"num_experts_per_tok"}, int64_t{mixtral ? 2 : 4});
  m.moe_intermediate = mixtral ? m.intermediate : field<int64_t>(j, path, {"moe_intermediate_size"}, int64_t{1408});
  m.shared_intermediate = mixtral ? 0 : field<int64_t>(j, path, {"shared_expert_intermediate_size"}, int64_t{5632});
  m.norm_topk_prob = mixtral || field<bool>(j, path, {"norm_topk_prob"}, false);
  m.router_aux_loss = field<bool>(j, path, {"output_router_logits"}, false);
  m.router_aux_loss_coef = field<double>(j, path, {"router_aux_loss_coef"}, 0.001);
  if (!mixtral) {
    const int64_t step = field<int64_t>(j, path, {"decoder_sparse_step"}, int64_t{1});
    const bool dense_layers = j.contains("mlp_only_layers") && j["mlp_only_layers"].is_array() &&
                              !j["mlp_only_layers"].empty();
    if (step != 1 || dense_layers)
      throw ConfigError("--model " + path + ": decoder_sparse_step " + std::to_string(step) +
                        (dense_layers ? " with mlp_only_layers " + j["mlp_only_layers"].dump() : std::string()) +
                        ": zrepro models every block sparse (decoder_sparse_step 1, mlp_only_layers [], as the "
                        "published Qwen MoE models); mixed dense and sparse blocks are not modelled");
  }
}

}  // namespace

ModelSpec load_recorded(const std::string& path, const json& doc);

ModelSpec load_hf_config(const std::string& path) {
  const std::string text = read_user_file("--model", path, "a preset name or a Hugging Face config.json");
  const json j = parse_user_json("--model " + path, text);
  if (j.is_discarded()) throw ConfigError("--model " + path + ": malformed JSON (a Hugging Face config.json is JSON)");
  if (!j.is_object()) throw ConfigError("--model " + path + ": expected a JSON object (a Hugging Face config.json)");
  if (RecordedModel::is_recording(j)) return load_recorded(path, j);
  ModelSpec m;
  m.name = path;
  const json type = j.value("model_type", json());
  if (!type.is_string()) {
    throw ConfigError("--model " + path + ": no \"model_type\"; a Hugging Face config.json names its family "
                      "(supported: gpt2, llama, mistral, qwen2, mixtral, qwen2_moe)");
  }
  m.model_type = type.get<std::string>();
  const auto types = supported_model_types();
  if (std::find(types.begin(), types.end(), m.model_type) == types.end())
    throw ConfigError("--model " + path + ": model_type \"" + m.model_type +
                      "\" is not one zrepro builds (gpt2, llama, mistral, qwen2, mixtral, qwen2_moe), and it would not "
                      "build a different architecture in its place. To plan it, record transformers' own modules "
                      "(seconds, no memory; needs torch and transformers in your Python): zrepro record-model "
                      "--config " + path + " --seq SEQ --dtype bf16 --attn sdpa --out model.tape.json, then "
                      "--model model.tape.json");
  m.hidden = field<int64_t>(j, path, {"hidden_size", "n_embd"}, std::nullopt);
  m.layers = field<int64_t>(j, path, {"num_hidden_layers", "n_layer"}, std::nullopt);
  m.heads = field<int64_t>(j, path, {"num_attention_heads", "n_head"}, std::nullopt);
  m.vocab = field<int64_t>(j, path, {"vocab_size"}, std::nullopt);
  m.seq = field<int64_t>(j, path, {"max_position_embeddings", "n_positions", "n_ctx"}, int64_t{2048});
  m.seq_from = "the config.json's context length (" + first_key(j, {"max_position_embeddings", "n_positions", "n_ctx"}) +
               "; --seq to train shorter sequences)";
  if (m.model_type == "gpt2") {
    m.positions = field<int64_t>(j, path, {"n_positions", "max_position_embeddings"}, m.seq);
    m.intermediate = field<int64_t>(j, path, {"n_inner"}, 4 * m.hidden);
    m.tied = field<bool>(j, path, {"tie_word_embeddings"}, true);
    m.norm_eps = field<double>(j, path, {"layer_norm_epsilon"}, 1e-5);
    m.activation = gpt2_activation(j, path);
    m.softmax_fp32 = false;  // GPT2Attention's eager softmax in the compute dtype
  } else {
    m.intermediate = field<int64_t>(j, path, {"intermediate_size"}, std::nullopt);
    load_llama_fields(j, path, m);
    if (m.model_type == "mixtral" || m.model_type == "qwen2_moe") load_moe_fields(j, path, m);
  }
  // [Note: the attention transformers picks] A config.json that names no
  // _attn_implementation is loaded by transformers with sdpa wherever the model class
  // supports it and torch >= 2.1.1 (PreTrainedModel._autoset_attn_implementation; every
  // family here supports it from transformers 4.42): the Trainer user who never chose
  // gets sdpa, and so does the plan. flash_attention_2 keeps the same memory as sdpa.
  if (j.contains("_attn_implementation") && j["_attn_implementation"].is_string()) {
    const std::string a = j["_attn_implementation"].get<std::string>();
    if (a == "eager") m.attention = Attention::eager;
    else if (a == "sdpa" || a == "flash_attention_2") m.attention = Attention::sdpa;
    m.attention_from = "the config.json's _attn_implementation \"" + a + "\"";
  } else {
    m.attention = Attention::sdpa;
    m.attention_from = "transformers' default: the config.json names no _attn_implementation, and transformers >= "
                       "4.42 loads sdpa with torch >= 2.1.1 (--attn eager for the eager path)";
  }
  validate_model(m, "--model " + path);
  return m;
}

// [Note: a recorded architecture]: the dimensions from the recorded config.json (the ones the
// header and the symbols use), the groups and tapes from the recording.
ModelSpec load_recorded(const std::string& path, const json& doc) {
  ModelSpec m;
  m.recorded = RecordedModel::load(path, doc);
  const RecordedModel& r = *m.recorded;
  const json& c = r.hf_config;
  m.name = path;
  m.model_type = r.model_type;
  m.family = Family::llama;  // the closest for what reads the family; the recording decides the memory
  m.hidden = field<int64_t>(c, path, {"hidden_size", "n_embd", "d_model"}, std::nullopt);
  m.heads = field<int64_t>(c, path, {"num_attention_heads", "n_head"}, std::nullopt);
  m.vocab = field<int64_t>(c, path, {"vocab_size"}, std::nullopt);
  m.kv_heads = field<int64_t>(c, path, {"num_key_value_heads"}, m.heads);
  m.intermediate = field<int64_t>(c, path, {"intermediate_size", "n_inner"}, int64_t{0});
  m.layers = r.layers;
  m.tied = r.tied;
  m.seq = r.seq;
  m.seq_from = "the recording";
  m.attention = r.attention == "eager" ? Attention::eager : Attention::sdpa;
  m.attention_from = "the recording";
  return m;
}

namespace {

// A preset (or its alias), else a Hugging Face config.json.
ModelSpec base_model(const std::string& arg) {
  const auto alias = preset_aliases().find(arg);
  const std::string name = alias != preset_aliases().end() ? alias->second : arg;
  for (const auto& p : presets())
    if (p.name == name) return p;
  if (arg.size() > 5 && arg.substr(arg.size() - 5) == ".json") return load_hf_config(arg);
  std::string list;
  for (const auto& n : model_preset_names()) list += (list.empty() ? "" : ", ") + n;
  throw ConfigError("--model: \"" + arg + "\" is neither a preset (" + list + ") nor a Hugging Face config.json path");
}

// --vocab, --seq, --layers, --heads, --hidden, --intermediate.
void override_dimensions(ModelSpec& m, const ModelOverrides& o) {
  if (o.vocab) m.vocab = *o.vocab;
  if (o.seq) m.seq = *o.seq, m.seq_from = o.seq_from;
  if (o.layers) m.layers = *o.layers;
  if (o.heads) {
    // Grouped-query attention keeps its group size when the head count changes.
    if (m.kv_heads > 0 && m.kv_heads != m.heads) m.kv_heads = std::max<int64_t>(1, *o.heads * m.kv_heads / m.heads);
    else if (m.kv_heads > 0) m.kv_heads = *o.heads;
    m.heads = *o.heads;
  }
  if (o.hidden) {
    if (!o.intermediate && m.intermediate == 4 * m.hidden) m.intermediate = 4 * *o.hidden;
    m.hidden = *o.hidden;
  }
  if (o.intermediate) {
    m.intermediate = *o.intermediate;
    if (m.moe()) m.moe_intermediate = *o.intermediate;  // the width of every MLP a token runs through
  }
}

// --output-router-logits, --router-aux-loss-coef, --attn.
void override_behaviour(ModelSpec& m, const ModelOverrides& o) {
  if (o.output_router_logits || o.router_aux_loss_coef) {
    const std::string flag = o.output_router_logits ? "--output-router-logits" : "--router-aux-loss-coef";
    if (!m.moe())
      throw ConfigError(flag + ": " + m.name + " has no experts (no router): the flag is for mixtral / qwen2_moe "
                        "models; drop it, or give a MoE --model");
    if (o.output_router_logits) m.router_aux_loss = *o.output_router_logits;
    if (o.router_aux_loss_coef) m.router_aux_loss_coef = *o.router_aux_loss_coef;
  }
  if (o.attention) {
    if (*o.attention == "eager") m.attention = Attention::eager;
    else if (*o.attention == "sdpa") m.attention = Attention::sdpa;
    else throw ConfigError("--attn: got \"" + *o.attention + "\", expected eager or sdpa");
    m.attention_from = "--attn";
  }
}

}  // namespace

// A recording is of one sequence length, dtype (checked by the planner) and attention, and of
// its model's sizes: other ones need another recording, never a silent reuse.
void check_recorded_overrides(const ModelSpec& m, const ModelOverrides& o, const std::string& arg) {
  const RecordedModel& r = *m.recorded;
  const std::string attn = o.attention ? *o.attention : r.attention;
  const int64_t seq = o.seq ? *o.seq : r.seq;
  if (seq != r.seq || attn != r.attention)
    throw ConfigError("--model " + arg + ": recorded at seq " + std::to_string(r.seq) + " with " + r.attention +
                      " attention; this job has seq " + std::to_string(seq) + " and " + attn + " (" +
                      (seq != r.seq ? o.seq_from : std::string("--attn")) + "): record it again: " +
                      r.record_command(seq, r.dtype, attn));
  if (o.vocab || o.hidden || o.heads || o.intermediate)
    throw ConfigError("--model " + arg + ": a recorded model's sizes are the recording's (--vocab, --hidden, --heads "
                      "and --intermediate do not apply); edit its config.json and record it again");
}

ModelSpec resolve_model(const std::string& arg, const ModelOverrides& o) {
  ModelSpec m = base_model(arg);
  if (m.recorded) check_recorded_overrides(m, o, arg);
  override_dimensions(m, o);
  override_behaviour(m, o);
  validate_model(m, "--model " + arg);
  return m;
}

}  // namespace zrepro
