// Which experts a ZeRO-3 rank fetches: DeepSpeed's leaf modules (zero_optimization.
// leaf_module, set_z3_leaf_modules, --z3-leaf-modules) matched against the toy's
// Hugging Face module tree, and the grouping of a MoE model's parameters that follows.
//
// [Note: which experts a rank fetches] DeepSpeed's ZeRO-3 registers fetch hooks on
// every module and gathers a module's own parameters when it runs. In transformers 4.x's
// MoE layout each expert is a module of its own, and only the experts some token picked
// run: ranks whose tokens pick different experts issue different all-gathers, and the job
// hangs (or, when the sizes happen to pair up, gathers a mix of two experts' shards). A
// leaf module is fetched as one unit with everything under it, whatever the router picks,
// so every rank issues the same gathers. zrepro follows that with its groups: an expert
// is a group of its own, gathered only when a token picks it, when the run is ZeRO-3, no
// leaf module covers the MoE block and the experts are gathered at all (a parameter under
// stage3_param_persistence_threshold is never gathered); otherwise the experts sit in
// their block's group. (transformers 5.x fuses the experts into one module; a MoE block
// there fetches all of them at once, as a leaf.)
#pragma once
#include <string>
#include <vector>

#include "trainer/config/model_spec.h"
#include "zero/zero_config.h"

namespace zrepro {

// The Hugging Face class of a MoE model's sparse block ("MixtralSparseMoeBlock"), its
// module-qualified name, and the full module name of block b's
// ("model.layers.3.block_sparse_moe").
std::string moe_block_class(const ModelSpec& m);
std::string moe_block_qualified_class(const ModelSpec& m);
std::string moe_block_module(const ModelSpec& m, int64_t b);

struct ExpertFetch {
  bool one_by_one = false;  // each expert its own group, fetched when a token picks it
  std::string why;          // what decided it, for the run header and summary.json
  std::vector<std::string> unmatched;  // leaf entries that match no module of the toy (DeepSpeed warns too)
};
// Throws ConfigError when leaf names cover some MoE blocks and not others (zrepro groups
// every block alike).
ExpertFetch expert_fetch(const ModelSpec& m, const ZeroConfig& z);
// m with expert_groups as expert_fetch decides (m itself for a dense model).
ModelSpec with_expert_fetch(const ModelSpec& m, const ZeroConfig& z);

// set_z3_leaf_modules(model, classes) raises ValueError when no module of the model is of
// any of the classes (deepspeed/utils/z3_leaf_module.py): the script dies before training,
// so run and plan refuse, naming the classes the model has. A dense model's modules are
// its Hugging Face family's (LlamaDecoderLayer, LlamaMLP, ..., GPT2Block, ...) and
// torch.nn's; a MoE model's, those that hold its experts.
void check_leaf_module_classes(const ModelSpec& m, const ZeroConfig& z);

// --z3-leaf-modules "A,B": the classes set_z3_leaf_modules would be given, added to the
// config's (DeepSpeed's API adds to what the config flagged).
void add_leaf_classes(ZeroConfig& z, const std::string& flag_value);

}  // namespace zrepro
