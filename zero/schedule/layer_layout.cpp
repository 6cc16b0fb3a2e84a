// See layer_layout.h.
#include "zero/schedule/layer_layout.h"

namespace zrepro {

LayerLayout layer_layout(const std::vector<int64_t>& numels, const StagePolicy& policy, int world_size,
                         int64_t persistence_threshold) {
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
  for (const ParamShard& p : l.shard.params) {
    const bool persistent = p.numel < persistence_threshold;
    l.persistent.push_back(persistent);
    int64_t& buffer = persistent ? l.persist_numel : l.dynamic_numel;
    l.gathered_offsets.push_back(buffer);
    buffer += p.padded_numel;
    l.units.push_back({p.full_offset, p.slice_numel, p.shard_offset});
  }
  return l;
}

}  // namespace zrepro
