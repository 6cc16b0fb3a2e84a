// See caching_pool.h.
#include "device/caching_pool.h"

#include <algorithm>

namespace zrepro {

int64_t CachingPool::round_size(int64_t n) {
  if (n < kMinBlock) return kMinBlock;
  return (n + kMinBlock - 1) / kMinBlock * kMinBlock;
}

int64_t CachingPool::segment_size(int64_t rounded) {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  return (rounded + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

std::optional<CachingPool::Block> CachingPool::take(bool small_pool, int64_t rounded) {
  auto& pool = free_[small_pool ? 1 : 0];
  auto it = pool.lower_bound(Free{rounded, -1, -1});  // best fit
  if (it == pool.end()) return std::nullopt;
  Free f = *it;
  pool.erase(it);
  auto& seg = layout_[f.segment];
  const int64_t rest = f.size - rounded;
  // Split when the remainder is worth keeping (PyTorch: >= 512 B small, > 1 MiB large).
  const bool split = small_pool ? rest >= kMinBlock : rest > kSmallSize;
  const int64_t size = split ? rounded : f.size;
  seg[f.offset] = {size, true};
  if (split) {
    seg[f.offset + size] = {rest, false};
    pool.insert(Free{rest, f.segment, f.offset + size});
  }
  allocated_ += size;
  return Block{f.segment, f.offset, size};
}

void CachingPool::release_free_segments() {
  for (auto it = segment_size_.begin(); it != segment_size_.end();) {
    const int64_t s = it->first;
    auto& seg = layout_[s];
    if (seg.size() == 1 && !seg.begin()->second.second) {
      free_[segment_small_[s] ? 1 : 0].erase(Free{it->second, s, 0});
      reserved_ -= it->second;
      layout_.erase(s);
      segment_small_.erase(s);
      released_.insert(s);
      it = segment_size_.erase(it);
    } else {
      ++it;
    }
  }
}

std::optional<CachingPool::Block> CachingPool::allocate(int64_t n, int64_t* new_segment_bytes) {
  const int64_t rounded = round_size(n);
  const bool sm = small(rounded);
  if (new_segment_bytes) *new_segment_bytes = 0;
  if (auto b = take(sm, rounded)) return b;
  const int64_t seg = segment_size(rounded);
  if (capacity_ > 0 && reserved_ + seg > capacity_) {
    release_free_segments();  // PyTorch frees cached blocks and retries before raising OOM
    if (reserved_ + seg > capacity_) return std::nullopt;
  }
  const int64_t id = next_segment_++;
  segment_size_[id] = seg;
  segment_small_[id] = sm;
  layout_[id][0] = {seg, false};
  free_[sm ? 1 : 0].insert(Free{seg, id, 0});
  reserved_ += seg;
  if (new_segment_bytes) *new_segment_bytes = seg;
  return take(sm, rounded);
}

void CachingPool::free(const Block& b) {
  auto& seg = layout_[b.segment];
  auto& pool = free_[segment_small_[b.segment] ? 1 : 0];
  allocated_ -= b.size;
  int64_t offset = b.offset, size = b.size;
  seg.erase(b.offset);
  // Merge with the free neighbours in the same segment.
  auto next = seg.lower_bound(offset);
  if (next != seg.end() && next->first == offset + size && !next->second.second) {
    pool.erase(Free{next->second.first, b.segment, next->first});
    size += next->second.first;
    seg.erase(next);
  }
  auto prev = seg.lower_bound(offset);
  if (prev != seg.begin()) {
    --prev;
    if (!prev->second.second && prev->first + prev->second.first == offset) {
      pool.erase(Free{prev->second.first, b.segment, prev->first});
      offset = prev->first;
      size += prev->second.first;
      seg.erase(prev);
    }
  }
  seg[offset] = {size, false};
  pool.insert(Free{size, b.segment, offset});
}

int64_t CachingPool::largest_free_block() const {
  int64_t m = 0;
  for (const auto& pool : free_)
    if (!pool.empty()) m = std::max(m, pool.rbegin()->size);
  return m;
}

}  // namespace zrepro
