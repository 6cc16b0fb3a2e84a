// The CUDA caching allocator emulation: rounding and segment rules, splitting,
// caching and merging, and a fragmentation sequence that runs out of memory while
// the free bytes in aggregate would be enough; the cache flushes PyTorch counts as retries.
#include <gtest/gtest.h>

#include "device/caching_pool.h"

using namespace zrepro;

namespace {
constexpr int64_t MiB = 1 << 20;
}

TEST(CachingPool, RoundingAndSegmentRules) {
  EXPECT_EQ(CachingPool::round_size(1), 512);
  EXPECT_EQ(CachingPool::round_size(512), 512);
  EXPECT_EQ(CachingPool::round_size(513), 1024);
  EXPECT_EQ(CachingPool::segment_size(512), 2 * MiB);       // small pool
  EXPECT_EQ(CachingPool::segment_size(1 * MiB), 2 * MiB);
  EXPECT_EQ(CachingPool::segment_size(1 * MiB + 512), 20 * MiB);  // 1-10 MiB: 20 MiB segments
  EXPECT_EQ(CachingPool::segment_size(9 * MiB), 20 * MiB);
  EXPECT_EQ(CachingPool::segment_size(10 * MiB), 10 * MiB);  // large: own segment, 2 MiB rounding
  EXPECT_EQ(CachingPool::segment_size(11 * MiB), 12 * MiB);
}

TEST(CachingPool, SplitsCachesAndMerges) {
  CachingPool p;
  int64_t seg = 0;
  auto a = p.allocate(1000, &seg);
  ASSERT_TRUE(a);
  EXPECT_EQ(seg, 2 * MiB);  // a new small segment
  EXPECT_EQ(a->size, 1024);
  auto b = p.allocate(3000, &seg);
  EXPECT_EQ(seg, 0);  // split from the same segment
  EXPECT_EQ(b->segment, a->segment);
  EXPECT_EQ(p.allocated(), 1024 + 3072);
  EXPECT_EQ(p.reserved(), 2 * MiB);
  p.free(*a);
  p.free(*b);
  EXPECT_EQ(p.allocated(), 0);
  EXPECT_EQ(p.reserved(), 2 * MiB);           // cached, not returned
  EXPECT_EQ(p.largest_free_block(), 2 * MiB);  // merged back into one block
  auto c = p.allocate(5 * MiB, &seg);
  EXPECT_EQ(seg, 20 * MiB);
  EXPECT_EQ(p.reserved(), 22 * MiB);
  p.free(*c);
}

TEST(CachingPool, FragmentationOomWithEnoughAggregateFreeMemory) {
  CachingPool p(40 * MiB);
  std::vector<CachingPool::Block> blocks;
  for (int i = 0; i < 6; ++i) blocks.push_back(*p.allocate(6 * MiB));  // three per 20 MiB segment
  EXPECT_EQ(p.reserved(), 40 * MiB);
  EXPECT_EQ(p.segments(), 2);
  for (int i = 0; i < 6; i += 2) p.free(blocks[i]);  // holes of 6 MiB, none adjacent
  const int64_t free_bytes = p.reserved() - p.allocated();
  EXPECT_EQ(free_bytes, 22 * MiB);  // three 6 MiB holes + two 2 MiB tails
  EXPECT_FALSE(p.allocate(12 * MiB).has_value()) << "12 MiB must not fit although 22 MiB are free";
  EXPECT_LT(p.largest_free_block(), 12 * MiB);
  // Once neighbours are free the blocks merge and a cached segment serves it.
  for (int i = 1; i < 6; i += 2) p.free(blocks[i]);
  EXPECT_EQ(p.largest_free_block(), 20 * MiB);
  auto big = p.allocate(12 * MiB);
  ASSERT_TRUE(big.has_value());
  EXPECT_EQ(p.reserved(), 40 * MiB);
  // A request no cached block fits releases the wholly free segments first.
  p.free(*big);
  auto huge = p.allocate(30 * MiB);
  ASSERT_TRUE(huge.has_value());
  EXPECT_EQ(p.reserved(), 30 * MiB);
}

TEST(CachingPool, ExpandableSegmentsServeWhatFragmentationRefused) {
  // The sequence that fragments the segmented pool: with expandable segments the
  // freed holes are unmapped, so the 12 MiB request fits.
  CachingPool p(40 * MiB);
  p.set_expandable(true);
  std::vector<CachingPool::Block> blocks;
  for (int i = 0; i < 6; ++i) blocks.push_back(*p.allocate(6 * MiB));
  EXPECT_EQ(p.reserved(), 36 * MiB);  // pages of what is allocated, no 20 MiB segments
  for (int i = 0; i < 6; i += 2) p.free(blocks[i]);
  EXPECT_EQ(p.reserved(), 18 * MiB);
  EXPECT_TRUE(p.allocate(12 * MiB).has_value());
  EXPECT_EQ(p.reserved(), 30 * MiB);
  EXPECT_FALSE(p.allocate(12 * MiB).has_value());  // capacity still holds: 42 > 40 MiB
  // Small requests share pages: 512-byte rounding, reserved rounded to 2 MiB per pool.
  CachingPool s(0);
  s.set_expandable(true);
  for (int i = 0; i < 8; ++i) s.allocate(1000);
  EXPECT_EQ(s.allocated(), 8 * 1024);
  EXPECT_EQ(s.reserved(), 2 * MiB);
}

// [Note: allocator retries]: PyTorch counts num_alloc_retries when a new segment would pass
// the capacity, the cache is flushed (wholly free segments go back) and the allocation
// tried again, whether it then fits or not; an allocation a cached block serves, or one
// that fits beside the cache, is no retry, and expandable segments never retry.
TEST(CachingPool, AFlushAndRetryIsCountedAsPyTorchCountsIt) {
  CachingPool p(40 * MiB);
  auto a = p.allocate(6 * MiB);   // a 20 MiB segment (its 14 MiB tail cached)
  auto b = p.allocate(16 * MiB);  // too big for the tail: its own 16 MiB segment, 36 MiB reserved
  ASSERT_TRUE(a && b);
  EXPECT_EQ(p.alloc_retries(), 0);
  p.free(*a);  // the 20 MiB segment is cached, wholly free
  auto c = p.allocate(6 * MiB);  // served from the cache
  ASSERT_TRUE(c);
  EXPECT_EQ(p.alloc_retries(), 0);
  p.free(*c);
  auto d = p.allocate(22 * MiB);  // no cached block fits; 36 + 22 > 40: flush the cached 20 MiB, retry, fits
  ASSERT_TRUE(d);
  EXPECT_EQ(p.alloc_retries(), 1);
  EXPECT_EQ(p.reserved(), 38 * MiB);
  EXPECT_FALSE(p.allocate(16 * MiB).has_value());  // nothing to flush: the retry fails, still counted
  EXPECT_EQ(p.alloc_retries(), 2);
  CachingPool e(40 * MiB);
  e.set_expandable(true);
  auto x = e.allocate(30 * MiB);
  e.free(*x);
  EXPECT_TRUE(e.allocate(30 * MiB).has_value());
  EXPECT_FALSE(e.allocate(30 * MiB).has_value());
  EXPECT_EQ(e.alloc_retries(), 0);
}
