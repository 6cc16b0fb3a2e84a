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

int64_t CachingPool::expandable_reserved(int64_t small_bytes, int64_t large_bytes) const {
  auto pages = [](int64_t b) { return (b + kRoundLarge - 1) / kRoundLarge * kRoundLarge; };
  return pages(small_bytes) + pages(large_bytes);
}

std::optional<CachingPool::Block> CachingPool::allocate_expandable(int64_t rounded, int64_t* new_segment_bytes) {
  const bool sm = small(rounded);
  const int64_t sb = small_bytes_ + (sm ? rounded : 0), lp = large_bytes_ + (sm ? 0 : rounded);
  if (capacity_ > 0 && expandable_reserved(sb, lp) > capacity_) return std::nullopt;
  small_bytes_ = sb, large_bytes_ = lp;
  reserved_ = expandable_reserved(sb, lp);
  allocated_ += rounded;
  // Each block gets its own backing (the owner maps it); its id is a "segment".
  const int64_t id = next_segment_++;
  segment_size_[id] = rounded;
  segment_small_[id] = sm;
  if (new_segment_bytes) *new_segment_bytes = rounded;
  return Block{id, 0, rounded};
}

std::optional<CachingPool::Block> CachingPool::allocate(int64_t n, int64_t* new_segment_bytes) {
  const int64_t rounded = round_size(n);
  const bool sm = small(rounded);
  if (new_segment_bytes) *new_segment_bytes = 0;
  if (expandable_) return allocate_expandable(rounded, new_segment_bytes);
  if (auto b = take(sm, rounded)) return b;
  const int64_t seg = segment_size(rounded);
  if (capacity_ > 0 && reserved_ + seg > capacity_) {
    // [Note: allocator retries] PyTorch's malloc, when cudaMalloc of a new segment fails:
    // release_available_cached_blocks does nothing unless max_split_size_mb is set, so it
    // goes on to release_cached_blocks (every cached block that is not part of a split
    // segment goes back to the driver: here the wholly free segments) and retries
    // alloc_block, which counts num_alloc_retries. On a GPU the flush synchronises the
    // device and later allocations must cudaMalloc again: "high memory pressure" in
    // DeepSpeed's words. This emulation counts the retries; it does not model their time.
    release_free_segments();
    ++alloc_retries_;
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
  if (expandable_) {
    // Its pages are unmapped: the memory goes back at once.
    (segment_small_[b.segment] ? small_bytes_ : large_bytes_) -= b.size;
    allocated_ -= b.size;
    reserved_ = expandable_reserved(small_bytes_, large_bytes_);
    segment_size_.erase(b.segment);
    segment_small_.erase(b.segment);
    released_.insert(b.segment);
    return;
  }
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
