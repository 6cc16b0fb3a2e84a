// See leaf_modules.h.
#include "trainer/config/leaf_modules.h"

#include <algorithm>
#include <sstream>

#include "device/base/errors.h"
#include "trainer/config/ds_versions.h"
#include "zero/schedule/layer_layout.h"

namespace zrepro {

namespace {

bool mixtral(const ModelSpec& m) { return m.model_type == "mixtral"; }
std::string hf_module(const ModelSpec& m) {
  return "transformers.models." + m.model_type + ".modeling_" + m.model_type + ".";
}
std::string prefix(const ModelSpec& m) { return mixtral(m) ? "Mixtral" : "Qwen2Moe"; }

// One module of the toy's Hugging Face tree that holds block b's experts: the block, its
// experts list, the decoder layer, the layers list, the model and the causal LM.
struct Holder {
  std::string name, cls, qualified;
};
std::vector<Holder> holders(const ModelSpec& m, int64_t b) {
  const std::string list = "torch.nn.modules.container.ModuleList";
  const std::string layer = "model.layers." + std::to_string(b);
  auto hf = [&](const std::string& name, const std::string& cls) { return Holder{name, cls, hf_module(m) + cls}; };
  return {hf(moe_block_module(m, b), moe_block_class(m)),
          {moe_block_module(m, b) + ".experts", "ModuleList", list},
          hf(layer, prefix(m) + "DecoderLayer"),
          {"model.layers", "ModuleList", list},
          hf("model", prefix(m) + "Model"),
          hf("", prefix(m) + "ForCausalLM")};
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The leaf entry that makes block b's experts one unit ("" when none).
std::string covering_entry(const ModelSpec& m, const ZeroConfig::LeafModules& leaf, int64_t b) {
  for (const Holder& h : holders(m, b)) {
    for (const auto& c : leaf.classes)
      if (c == h.cls || c == h.qualified) return "class " + c;
    for (const auto& n : leaf.names)
      if (n == h.name) return "name " + n;
    for (const auto& s : leaf.name_suffixes)
      if (!s.empty() && !h.name.empty() && ends_with(h.name, s)) return "name suffix " + s;
  }
  return "";
}

std::vector<std::string> unmatched_entries(const ModelSpec& m, const ZeroConfig::LeafModules& leaf) {
  std::vector<std::string> out;
  auto matches_any = [&](auto pred) {
    for (int64_t b = 0; b < m.layers; ++b)
      for (const Holder& h : holders(m, b))
        if (pred(h)) return true;
    return false;
  };
  // DeepSpeed warns only about the entries a user added, not its default classes.
  std::vector<std::string> defaults;
  if (auto vd = versioned_default("zero_optimization.leaf_module.classes", newest_deepspeed_version());
      vd && vd->value.is_array())
    defaults = vd->value.get<std::vector<std::string>>();
  for (const auto& c : leaf.classes)
    if (std::find(defaults.begin(), defaults.end(), c) == defaults.end() && !matches_any([&](const Holder& h) { return c == h.cls || c == h.qualified; })) out.push_back("class " + c);
  for (const auto& n : leaf.names)
    if (!matches_any([&](const Holder& h) { return n == h.name; })) out.push_back("name " + n);
  for (const auto& s : leaf.name_suffixes)
    if (!matches_any([&](const Holder& h) { return !s.empty() && !h.name.empty() && ends_with(h.name, s); }))
      out.push_back("name suffix " + s);
  return out;
}

}  // namespace

std::string moe_block_class(const ModelSpec& m) { return prefix(m) + "SparseMoeBlock"; }
std::string moe_block_qualified_class(const ModelSpec& m) { return hf_module(m) + moe_block_class(m); }
std::string moe_block_module(const ModelSpec& m, int64_t b) {
  return "model.layers." + std::to_string(b) + (mixtral(m) ? ".block_sparse_moe" : ".mlp");
}

namespace leaf_classes {

// A dense model's module classes, short and module-qualified: its Hugging Face family's
// (transformers.models.<type>.modeling_<type>) and the torch.nn modules inside them.
std::vector<std::string> dense_module_classes(const ModelSpec& m) {
  const bool gpt2 = m.model_type == "gpt2";
  const std::string p = gpt2                        ? "GPT2"
                        : m.model_type == "qwen2"   ? "Qwen2"
                        : m.model_type == "mistral" ? "Mistral"
                                                    : "Llama";
  std::vector<std::string> family =
      gpt2 ? std::vector<std::string>{"GPT2Block", "GPT2MLP", "GPT2Attention", "GPT2Model", "GPT2LMHeadModel"}
           : std::vector<std::string>{p + "DecoderLayer", p + "MLP",   p + "Attention",
                                      p + "RMSNorm",      p + "Model", p + "ForCausalLM", p + "RotaryEmbedding"};
  std::vector<std::string> out;
  for (const auto& c : family) out.push_back(c), out.push_back(hf_module(m) + c);
  for (const char* c : {"torch.nn.modules.linear.Linear", "torch.nn.modules.sparse.Embedding",
                        "torch.nn.modules.container.ModuleList", "torch.nn.modules.dropout.Dropout",
                        gpt2 ? "torch.nn.modules.normalization.LayerNorm" : "torch.nn.modules.activation.SiLU"}) {
    const std::string q = c;
    out.push_back(q), out.push_back(q.substr(q.rfind('.') + 1));
  }
  if (gpt2) out.push_back("Conv1D"), out.push_back("transformers.pytorch_utils.Conv1D");
  return out;
}

bool has_class(const ModelSpec& m, const std::string& c) {
  if (!m.moe()) {
    const auto dense = dense_module_classes(m);
    return std::find(dense.begin(), dense.end(), c) != dense.end();
  }
  for (int64_t b = 0; b < m.layers; ++b)
    for (const Holder& h : holders(m, b))
      if (c == h.cls || c == h.qualified) return true;
  return false;
}

}  // namespace leaf_classes

// Only the classes the script names (set_z3_leaf_modules, --z3-leaf-modules) raise: the
// config's leaf_module entries that match nothing are warned about (unmatched_entries).
void check_leaf_module_classes(const ModelSpec& m, const ZeroConfig& z) {
  const auto& api = z.leaf_module.api_classes;
  if (api.empty()) return;
  for (const auto& c : api)
    if (leaf_classes::has_class(m, c)) return;
  std::string list;
  for (const auto& c : api) list += (list.empty() ? "'" : ", '") + c + "'";
  const std::string expected =
      m.moe() ? "the MoE block's class, " + moe_block_class(m) + " (or " + moe_block_qualified_class(m) +
                    "), or its decoder layer's"
              : "a module class of this dense model, e.g. " + leaf_classes::dense_module_classes(m).front() +
                    " (a leaf module matters for MoE experts; a dense model needs none)";
  throw ConfigError("--z3-leaf-modules: none of the classes [" + list + "] is a module of " + m.name +
                    " (DeepSpeed's set_z3_leaf_modules raises \"ValueError: No modules of type [" + list +
                    "] found in model\" here); expected " + expected);
}

ExpertFetch expert_fetch(const ModelSpec& m, const ZeroConfig& z) {
  ExpertFetch f;
  if (!m.moe()) return f;  // the classes the script names are checked once, by check_job
  f.unmatched = unmatched_entries(m, z.leaf_module);
  if (!StagePolicy{z.stage}.shard_params()) {
    f.why = "with their block: ZeRO stage " + std::to_string(z.stage) + " keeps whole parameters on every rank and "
            "gathers none";
    return f;
  }
  const int64_t expert_param = m.moe_intermediate * m.hidden;  // w1, w3 and w2 alike
  if (persistent_param(expert_param, z.stage3_param_persistence_threshold)) {
    f.why = "with their block: each expert parameter (" + std::to_string(expert_param) +
            " elements) is under stage3_param_persistence_threshold " +
            std::to_string(z.stage3_param_persistence_threshold) +
            ", so it stays whole on every rank and is never gathered (set the threshold below it to gather experts)";
    return f;
  }
  const std::string first = covering_entry(m, z.leaf_module, 0);
  for (int64_t b = 1; b < m.layers; ++b)
    if ((covering_entry(m, z.leaf_module, b).empty()) != first.empty())
      throw ConfigError("zero_optimization.leaf_module: the leaf names cover the MoE block of some layers and not of "
                        "others (layer 0: " + (first.empty() ? std::string("not covered") : first) + ", layer " +
                        std::to_string(b) + ": " + (first.empty() ? "covered" : "not covered") +
                        "); zrepro groups every block alike: name every layer's block, or use classes / name_suffixes");
  if (!first.empty()) {
    f.why = "with their block: the leaf module " + first + " covers " + moe_block_module(m, 0) + " (" +
            moe_block_class(m) + "), fetched as one unit whatever the router picks";
    return f;
  }
  f.one_by_one = true;
  f.why = "expert by expert: ZeRO-3 with no leaf module over " + moe_block_class(m) +
          ", so each expert's modules are gathered when a token picks them and ranks whose tokens pick different "
          "experts issue different all-gathers (fix: zero_optimization.leaf_module.classes [\"" + moe_block_class(m) +
          "\"], DeepSpeed >= 0.18.0's default, or set_z3_leaf_modules / --z3-leaf-modules)";
  return f;
}

ModelSpec with_expert_fetch(const ModelSpec& m, const ZeroConfig& z) {
  ModelSpec out = m;
  out.expert_groups = expert_fetch(m, z).one_by_one;
  return out;
}

void add_leaf_classes(ZeroConfig& z, const std::string& flag_value) {
  std::stringstream in(flag_value);
  for (std::string c; std::getline(in, c, ',');) {
    c.erase(0, c.find_first_not_of(" \t"));
    c.erase(c.find_last_not_of(" \t") + 1);
    if (c.empty())
      throw ConfigError("--z3-leaf-modules: got \"" + flag_value + "\", expected class names separated by commas "
                        "(e.g. MixtralSparseMoeBlock)");
    if (std::find(z.leaf_module.classes.begin(), z.leaf_module.classes.end(), c) == z.leaf_module.classes.end())
      z.leaf_module.classes.push_back(c);
    z.leaf_module.api_classes.push_back(c);
  }
}

}  // namespace zrepro
