// The CUDA caching allocator's bookkeeping, emulated (PyTorch c10/cuda
// CUDACachingAllocator): requests are rounded to 512 bytes; requests up to 1 MiB
// come from 2 MiB segments (small pool), 1-10 MiB from 20 MiB segments, larger ones
// get their own segment rounded to 2 MiB (large pool); blocks are split and cached
// on free, merged with free neighbours, and segments are only returned when wholly
// free and an allocation would otherwise fail. Reserved (segments) is what counts
// against capacity, so fragmentation OOMs happen for real. Pure bookkeeping: no
// memory is touched here; the owner maps (segment, offset) to real storage.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>

namespace zrepro {

class CachingPool {
 public:
  static constexpr int64_t kMinBlock = 512;
  static constexpr int64_t kSmallSize = 1 << 20;        // 1 MiB
  static constexpr int64_t kSmallBuffer = 2 << 20;      // 2 MiB
  static constexpr int64_t kLargeBuffer = 20 << 20;     // 20 MiB
  static constexpr int64_t kMinLargeAlloc = 10 << 20;   // 10 MiB
  static constexpr int64_t kRoundLarge = 2 << 20;       // 2 MiB

  static int64_t round_size(int64_t n);
  static int64_t segment_size(int64_t rounded);

  struct Block {
    int64_t segment, offset, size;
  };

  explicit CachingPool(int64_t capacity = 0) : capacity_(capacity) {}
  void set_capacity(int64_t c) { capacity_ = c; }
  // PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: each pool is one segment that
  // maps and unmaps 2 MiB pages as needed, so free memory never stays stranded in a
  // segment: reserved is each pool's allocated bytes rounded up to a page (blocks
  // packed back to back in the pool's virtual range), and fragmentation OOMs go away.
  void set_expandable(bool e) { expandable_ = e; }
  bool expandable() const { return expandable_; }

  // A block of at least n bytes, or nullopt when capacity forbids a new segment
  // even after releasing the cached free segments. new_segment / released report
  // segment creation and release so the owner can back them with memory.
  std::optional<Block> allocate(int64_t n, int64_t* new_segment_bytes = nullptr);
  void free(const Block& b);
  // torch.cuda.empty_cache(): every wholly free cached segment goes back (no retry counted).
  void empty_cache() { release_free_segments(); }
  // Segments freed by the last allocate() (to release their memory).
  std::set<int64_t> take_released() { return std::move(released_); }

  int64_t allocated() const { return allocated_; }
  int64_t reserved() const { return reserved_; }
  int64_t capacity() const { return capacity_; }
  int64_t largest_free_block() const;
  // PyTorch's num_alloc_retries: allocations that found no cached block, hit the capacity
  // with a new segment, freed every wholly free cached segment and tried again (counted
  // whether the retry then fits or ends in an OOM). [Note: allocator retries]
  int64_t alloc_retries() const { return alloc_retries_; }
  int64_t segments() const { return static_cast<int64_t>(segment_size_.size()); }

 private:
  struct Free {
    int64_t size, segment, offset;
    bool operator<(const Free& o) const {
      return size != o.size ? size < o.size : segment != o.segment ? segment < o.segment : offset < o.offset;
    }
  };
  bool small(int64_t rounded) const { return rounded <= kSmallSize; }
  std::optional<Block> take(bool small_pool, int64_t rounded);
  void release_free_segments();

  std::optional<Block> allocate_expandable(int64_t rounded, int64_t* new_segment_bytes);
  int64_t expandable_reserved(int64_t small_bytes, int64_t large_bytes) const;

  int64_t capacity_;
  bool expandable_ = false;
  int64_t small_bytes_ = 0, large_bytes_ = 0;  // expandable mode
  int64_t allocated_ = 0, reserved_ = 0;
  int64_t alloc_retries_ = 0;
  int64_t next_segment_ = 0;
  std::set<Free> free_[2];                                  // [0] large pool, [1] small pool
  std::map<int64_t, int64_t> segment_size_;                 // segment -> bytes
  std::map<int64_t, bool> segment_small_;
  std::map<int64_t, std::map<int64_t, std::pair<int64_t, bool>>> layout_;  // segment -> offset -> (size, used)
  std::set<int64_t> released_;
};

}  // namespace zrepro
