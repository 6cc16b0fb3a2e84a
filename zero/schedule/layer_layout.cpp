// See layer_layout.h.
#include "zero/schedule/layer_layout.h"

#include <algorithm>

namespace zrepro {

LayerLayout layer_layout(const std::vector<int64_t>& numels, const StagePolicy& policy, int world_size,
                         int64_t persistence_threshold, bool host_shard) {
  LayerLayout l;
  l.policy = policy;
  l.param_numels = numels;
  for (int64_t n : numels) {
    l.natural_offsets.push_back(l.numel);
    l.numel += n;
  }
  l.flat = partition_flat(l.numel, world_size);
  if (!policy.shard_params()) {
    l.units.push_back({0, l.flat.partition_numel, 0});
    return l;
  }
  l.shard = partition_params(numels, world_size);
  l.shard_is_gathered = world_size == 1 && !host_shard;
  for (const ParamShard& p : l.shard.params) {
    const bool persistent = persistent_param(p.numel, persistence_threshold);
    l.persistent.push_back(persistent);
    l.units.push_back({p.full_offset, p.slice_numel, p.shard_offset});
    if (l.shard_is_gathered) {
      l.gathered_offsets.push_back(p.shard_offset);
      continue;
    }
    int64_t& buffer = persistent ? l.persist_numel : l.dynamic_numel;
    l.gathered_offsets.push_back(buffer);
    buffer += p.padded_numel;
  }
  return l;
}

std::vector<int64_t> LayerLayout::norm_pieces(int rank) const {
  std::vector<int64_t> out;
  if (policy.shard_params()) {
    for (const ParamShard& p : shard.params) out.push_back(p.slice_numel);
  } else if (!policy.owns_whole_flat()) {
    for (const ParamSegment& s : partition_segments(param_numels, flat, rank)) out.push_back(s.numel);
  }
  return out;
}

int64_t norm_copy_numel(const std::vector<const LayerLayout*>& layers, int world_size, int rank) {
  if (layers.empty() || layers[0]->policy.owns_whole_flat()) return 0;
  int64_t most = 0;
  if (layers[0]->policy.shard_params()) {
    for (const LayerLayout* l : layers)
      for (const ParamShard& p : l->shard.params) most = std::max(most, p.slice_numel);
    return most;
  }
  std::vector<int64_t> numels;
  for (const LayerLayout* l : layers) numels.insert(numels.end(), l->param_numels.begin(), l->param_numels.end());
  for (const ParamSegment& s : whole_model_segments(numels, world_size, rank)) most = std::max(most, s.numel);
  return most;
}

int64_t grad_overhang_numel(const std::vector<const LayerLayout*>& layers, int world_size, int rank) {
  if (layers.empty() || !layers[0]->policy.shard_grads() || layers[0]->policy.shard_params()) return 0;
  std::vector<std::vector<int64_t>> numels;
  for (const LayerLayout* l : layers) numels.push_back(l->param_numels);
  return whole_param_overhang_numel(numels, world_size, rank);
}

int64_t hook_gather_numel(const std::vector<const LayerLayout*>& layers, bool host_shard) {
  int64_t most = 0;
  for (const LayerLayout* l : layers) {
    if (!l->policy.shard_params()) return 0;
    for (const ParamShard& p : l->shard.params)
      most = std::max(most, p.padded_numel + (host_shard ? p.slice_numel : 0));
  }
  return most;
}

}  // namespace zrepro
