// See gather_schedule.h.
#include "zero/schedule/gather_schedule.h"

#include "zero/schedule/partition.h"

namespace zrepro {

GatherSchedule::GatherSchedule(std::vector<int64_t> dynamic_numels, Options options)
    : numel_(std::move(dynamic_numels)), o_(options), gathered_(numel_.size(), false) {}

int64_t GatherSchedule::live_numel() const {
  int64_t live = 0;
  for (size_t l = 0; l < numel_.size(); ++l)
    if (gathered_[l]) live += numel_[l];
  return live;
}

std::vector<int> GatherSchedule::prefetch_after(int layer) {
  if (!complete_) {
    trace_.push_back(layer);
  } else if (pos_ >= trace_.size() || trace_[pos_] != layer) {
    // The model took another path than the recorded one: record again (DeepSpeed
    // invalidates its trace the same way).
    trace_.assign(1, layer);
    complete_ = false;
  } else {
    ++pos_;
  }
  gathered_[layer] = true;
  std::vector<int> prefetch;
  if (!complete_) return prefetch;
  const int64_t live = live_numel();
  int64_t prefetching = 0;
  for (size_t k = pos_; k < trace_.size(); ++k) {
    if (prefetching >= o_.prefetch_bucket_size || live + prefetching >= o_.max_live_parameters) break;
    const int l = trace_[k];
    if (gathered_[l] || numel_[l] == 0) continue;
    gathered_[l] = true;
    prefetch.push_back(l);
    prefetching += numel_[l];
  }
  return prefetch;
}

void GatherSchedule::fetch(int layer, ShardOps& groups) {
  const std::vector<int> prefetch = prefetch_after(layer);
  groups.unshard_start(layer);  // also refreshes stale persistent parameters
  // offload_param: at most max_uploads shards on their way up at a time (DeepSpeed's
  // parameter buffers); a prefetch past that is gathered when its layer is needed.
  int64_t uploading = 0;
  if (o_.max_uploads > 0)
    for (size_t l = 0; l < numel_.size(); ++l) uploading += groups.uploading(static_cast<int>(l));
  for (int l : prefetch) {
    const bool host = groups.host_shard(l);
    if (host && o_.max_uploads > 0 && uploading >= o_.max_uploads) continue;
    groups.unshard_start(l);
    uploading += host;
  }
  groups.unshard_wait(layer);
}

bool GatherSchedule::keep_after_use(int layer) const {
  return complete_ && reused_within(trace_, pos_, layer, numel_, o_.max_reuse_distance);
}

void GatherSchedule::release(int layer, ShardOps& groups) {
  if (keep_after_use(layer)) return;
  gathered_[layer] = false;
  groups.reshard(layer);
}

void GatherSchedule::reshard_all(ShardOps& groups) {
  for (size_t l = 0; l < numel_.size(); ++l) groups.reshard(static_cast<int>(l));  // DeepSpeed's release_and_reset_all
  gathered_.assign(numel_.size(), false);
  pos_ = 0;
}

void GatherSchedule::end_forward_only(ShardOps& groups) { reshard_all(groups); }

void GatherSchedule::end_backward(ShardOps& groups) {
  reshard_all(groups);
  complete_ = true;
}

}  // namespace zrepro
