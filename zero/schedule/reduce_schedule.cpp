// See reduce_schedule.h.
#include "zero/schedule/reduce_schedule.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace zrepro {

ReduceSchedule::ReduceSchedule(const std::vector<std::pair<int, const LayerLayout*>>& groups,
                               int64_t reduce_bucket_size, int world_size, const BufferPolicy& policy)
    : ws_(world_size), nbuf_(std::max(1, policy.reduce_buffers)), persistent_(policy.persistent_reduce_buffers) {
  int max_group = 0;
  std::vector<int64_t> slices;
  for (const auto& [g, layout] : groups) {
    max_group = std::max(max_group, g);
    for (const GradUnit& u : layout->units) {
      units_.push_back({g, u});
      slices.push_back(u.slice);
    }
  }
  buckets_ = make_buckets(slices, reduce_bucket_size, ws_);
  group_buckets_.resize(max_group + 1);
  pieces_of_.assign(buckets_.size(), std::vector<int>(max_group + 1, 0));
  for (size_t b = 0; b < buckets_.size(); ++b) {
    buffer_numel_ = std::max(buffer_numel_, buckets_[b].numel_per_rank * ws_);
    for (const auto& p : buckets_[b].pieces) {
      const int g = units_[p.unit].group;
      auto& gb = group_buckets_[g];
      if (gb.empty() || gb.back() != static_cast<int>(b)) gb.push_back(static_cast<int>(b));
      ++pieces_of_[b][g];
    }
  }
  if (policy.full_size_reduce_buffers) buffer_numel_ = std::max(buffer_numel_, reduce_bucket_size);
  remaining_.assign(buckets_.size(), 0);
  bucket_buffer_.assign(buckets_.size(), -1);
  busy_.assign(nbuf_, false);
}

void ReduceSchedule::prepare(ReduceOps& ops) {
  if (persistent_ && !allocated_) {
    ops.allocate_buffers(nbuf_, buffer_numel_);
    allocated_ = true;
  }
}

void ReduceSchedule::open(ReduceOps& ops) {
  if (allocated_) return;
  ops.allocate_buffers(nbuf_, buffer_numel_);
  allocated_ = true;
}

void ReduceSchedule::claim_buffer(int b, ReduceOps& ops) {
  auto free_it = std::find(busy_.begin(), busy_.end(), false);
  while (free_it == busy_.end()) {
    complete_one(ops);  // every buffer reducing: finish the oldest first
    free_it = std::find(busy_.begin(), busy_.end(), false);
  }
  const int i = static_cast<int>(free_it - busy_.begin());
  ops.reuse_buffer(i);
  if (!allocated_) {
    ops.allocate_buffers(nbuf_, buffer_numel_);  // all of them at the first bucket, as DeepSpeed at backward start
    allocated_ = true;
  }
  busy_[i] = true;
  bucket_buffer_[b] = i;
  remaining_[b] = static_cast<int>(buckets_[b].pieces.size());
}

void ReduceSchedule::add(int g, ReduceOps& ops) {
  for (int b : group_buckets_[g]) {
    if (bucket_buffer_[b] < 0) claim_buffer(b, ops);
    ops.fill(b, bucket_buffer_[b], g);
    remaining_[b] -= pieces_of_[b][g];
    if (remaining_[b] > 0) continue;
    ops.launch(b, bucket_buffer_[b]);
    in_flight_.push_back({b, bucket_buffer_[b]});
    bucket_buffer_[b] = -1;
    if (nbuf_ == 1) complete_one(ops);  // no second buffer to fill meanwhile: no overlap
  }
}

void ReduceSchedule::complete_one(ReduceOps& ops) {
  const InFlight f = in_flight_.front();
  in_flight_.pop_front();
  ops.complete(f.bucket, f.buffer);
  busy_[f.buffer] = false;
}

void ReduceSchedule::finish(ReduceOps& ops) {
  while (!in_flight_.empty()) complete_one(ops);
  for (size_t b = 0; b < buckets_.size(); ++b)
    if (bucket_buffer_[b] >= 0)
      throw std::logic_error("ReduceSchedule: bucket " + std::to_string(b) + " did not receive all its gradients");
  const bool free_buffers = !persistent_ && allocated_;
  ops.end(free_buffers);
  if (free_buffers) allocated_ = false;
}

}  // namespace zrepro
