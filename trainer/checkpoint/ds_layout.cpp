// See ds_layout.h.
#include "trainer/checkpoint/ds_layout.h"

#include <utility>

#include "zero/schedule/partition.h"

namespace zrepro {

namespace {

// zrepro's parameter name (group + "." + param) -> DeepSpeed's module's.
std::string module_name(const ModelSpec& m, const std::string& group, const std::string& param) {
  const bool gpt2 = m.family == Family::gpt2;
  if (group == "embed") return gpt2 ? param + ".weight" : "model.embed_tokens.weight";
  if (group == "head") {
    if (param == "lm_head.weight") return param;
    return gpt2 ? param : "model.norm.weight";
  }
  // block.<l>[.mlp.experts.<e>]: the block index, then the parameter's path in the block.
  const size_t dot = group.find('.', 6);
  const std::string index = group.substr(6, dot == std::string::npos ? std::string::npos : dot - 6);
  std::string path = (dot == std::string::npos ? "" : group.substr(dot + 1) + ".") + param;
  static const std::vector<std::pair<std::string, std::string>> gpt2_names = {
      {"attn.qkv.", "qkv."}, {"attn.proj.", "proj."}, {"mlp.fc.", "fc."}, {"mlp.proj.", "fc2."}};
  static const std::vector<std::pair<std::string, std::string>> llama_names = {
      {"input_norm.", "input_layernorm."}, {"post_norm.", "post_attention_layernorm."},
      {"attn.q.", "self_attn.q_proj."},    {"attn.k.", "self_attn.k_proj."},
      {"attn.v.", "self_attn.v_proj."},    {"attn.o.", "self_attn.o_proj."},
      {"mlp.gate.", "mlp.gate_proj."},     {"mlp.up.", "mlp.up_proj."},
      {"mlp.down.", "mlp.down_proj."}};
  static const std::vector<std::pair<std::string, std::string>> mixtral_names = {
      {"mlp.gate.", "block_sparse_moe.gate."}, {"mlp.experts.", "block_sparse_moe.experts."}};
  auto rename = [&](const std::vector<std::pair<std::string, std::string>>& table) {
    for (const auto& [z, d] : table)
      if (path.compare(0, z.size(), z) == 0) {
        path = d + path.substr(z.size());
        return true;
      }
    return false;
  };
  if (gpt2) {
    rename(gpt2_names);
    return "blocks." + index + "." + path;
  }
  // Qwen2-MoE keeps mlp.gate / mlp.experts / mlp.shared_expert* as zrepro names them.
  if (!(m.moe() && (m.model_type == "mixtral" ? rename(mixtral_names) : path.compare(0, 4, "mlp.") == 0)))
    rename(llama_names);
  return "model.layers." + index + "." + path;
}

}  // namespace

std::vector<CheckpointParam> checkpoint_params(const ModelSpec& m) {
  std::vector<CheckpointParam> out;
  const std::vector<LayerSpec> layers = m.layer_shapes();
  for (size_t g = 0; g < layers.size(); ++g)
    for (const ParamSpec& p : layers[g].params)
      out.push_back({module_name(m, layers[g].name, p.name), p.shape, p.numel(), static_cast<int>(g)});
  return out;
}

std::string tied_head_name(const ModelSpec& m) { return m.tied ? "lm_head.weight" : ""; }

torch::Tensor ds_partition(const torch::Tensor& natural, const std::vector<int64_t>& numels,
                           const CheckpointLayout& layout, int rank, bool keep_padding) {
  const auto opts = natural.options();
  const int world = layout.world;
  if (layout.partition == DsPartitionForm::whole_model_ranges) {
    const FlatPartition p = partition_flat(natural.numel(), world);
    const int64_t lo = p.begin(rank), hi = std::min(lo + p.partition_numel, natural.numel());
    torch::Tensor mine = hi > lo ? natural.narrow(0, lo, hi - lo) : torch::empty({0}, opts);
    if (!keep_padding) return mine.clone();
    torch::Tensor out = torch::zeros({p.partition_numel}, opts);
    out.narrow(0, 0, mine.numel()).copy_(mine);
    return out;
  }
  const ShardLayout s = partition_params(numels, world);
  torch::Tensor out = torch::zeros({s.shard_numel}, opts);
  int64_t offset = 0;
  for (size_t i = 0; i < numels.size(); ++i) {
    const ParamShard& ps = s.params[i];
    const int64_t lo = rank * ps.slice_numel, hi = std::min(lo + ps.slice_numel, ps.numel);
    if (hi > lo) out.narrow(0, ps.shard_offset, hi - lo).copy_(natural.narrow(0, offset + lo, hi - lo));
    offset += ps.numel;
  }
  return out;
}

torch::Tensor natural_from_ds_partitions(const std::vector<torch::Tensor>& parts, const std::vector<int64_t>& numels,
                                         const CheckpointLayout& layout) {
  const int world = layout.world;
  int64_t total = 0;
  for (int64_t n : numels) total += n;
  const auto opts = parts.front().options();
  if (layout.partition == DsPartitionForm::whole_model_ranges) {
    // Each rank's part padded or not, the padding only at the tail of the whole: concatenated,
    // the first `total` elements are the flat.
    std::vector<torch::Tensor> flat(parts.begin(), parts.end());
    torch::Tensor all = torch::cat(flat);
    TORCH_CHECK(all.numel() >= total, "DeepSpeed partitions hold ", all.numel(), " elements, the model ", total);
    return all.narrow(0, 0, total).clone();
  }
  const ShardLayout s = partition_params(numels, world);
  torch::Tensor out = torch::empty({total}, opts);
  int64_t offset = 0;
  for (size_t i = 0; i < numels.size(); ++i) {
    const ParamShard& ps = s.params[i];
    for (int r = 0; r < world; ++r) {
      const int64_t lo = r * ps.slice_numel, hi = std::min(lo + ps.slice_numel, ps.numel);
      if (hi > lo) out.narrow(0, offset + lo, hi - lo).copy_(parts[r].narrow(0, ps.shard_offset, hi - lo));
    }
    offset += ps.numel;
  }
  return out;
}

torch::Tensor owned_from_natural(const LayerLayout& l, int rank, const torch::Tensor& natural) {
  torch::Tensor out = torch::zeros({l.owned_numel()}, natural.options());
  if (l.policy.shard_params()) {
    for (size_t i = 0; i < l.shard.params.size(); ++i) {
      const ParamShard& p = l.shard.params[i];
      const int64_t lo = rank * p.slice_numel, hi = std::min(lo + p.slice_numel, p.numel);
      if (hi > lo) out.narrow(0, p.shard_offset, hi - lo).copy_(natural.narrow(0, l.natural_offsets[i] + lo, hi - lo));
    }
    return out;
  }
  const int64_t lo = l.policy.owns_whole_flat() ? 0 : l.flat.begin(rank);
  const int64_t hi = std::min(lo + l.owned_numel(), l.numel);
  if (hi > lo) out.narrow(0, 0, hi - lo).copy_(natural.narrow(0, lo, hi - lo));
  return out;
}

torch::Tensor natural_from_owned(const LayerLayout& l, const torch::Tensor& gathered) {
  torch::Tensor out = torch::empty({l.numel}, gathered.options());
  if (l.policy.shard_params()) {
    for (size_t i = 0; i < l.shard.params.size(); ++i) {
      const ParamShard& p = l.shard.params[i];
      for (int64_t r = 0; r < gathered.size(0); ++r) {
        const int64_t lo = r * p.slice_numel, hi = std::min(lo + p.slice_numel, p.numel);
        if (hi > lo) out.narrow(0, l.natural_offsets[i] + lo, hi - lo).copy_(gathered[r].narrow(0, p.shard_offset, hi - lo));
      }
    }
    return out;
  }
  const torch::Tensor flat = l.policy.owns_whole_flat() ? gathered[0] : gathered.reshape({-1});
  return flat.narrow(0, 0, l.numel).clone();
}

}  // namespace zrepro
