// See gather_schedule.h.
#include "zero/gather_schedule.h"

#include "zero/partition.h"

namespace zrepro {

GatherSchedule::GatherSchedule(std::vector<int64_t> dynamic_numels, Options options)
    : numel_(std::move(dynamic_numels)), o_(options), gathered_(numel_.size(), false) {}

int64_t GatherSchedule::live_numel() const {
  int64_t live = 0;
  for (size_t l = 0; l < numel_.size(); ++l)
    if (gathered_[l]) live += numel_[l];
  return live;
}

std::vector<int> GatherSchedule::fetch(int layer) {
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

bool GatherSchedule::release(int layer) {
  if (complete_ && reused_within(trace_, pos_, layer, numel_, o_.max_reuse_distance)) return false;
  gathered_[layer] = false;
  return true;
}

void GatherSchedule::end_backward() {
  gathered_.assign(numel_.size(), false);
  complete_ = true;
  pos_ = 0;
}

}  // namespace zrepro
