// The schedules run and plan share, on recording executors: ReduceSchedule (bucket
// boundaries, buffer claims, launch and completion order, allocation and freeing),
// ShardLifecycle (the stage-3 state machine) and GatherSchedule (trace, prefetch,
// reuse distance, the upload bound).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "zero/schedule/gather_schedule.h"
#include "zero/schedule/reduce_schedule.h"
#include "zero/schedule/shard_state.h"

using namespace zrepro;

namespace {

struct ReduceLog : ReduceOps {
  std::vector<std::string> events;
  void allocate_buffers(int count, int64_t numel) override {
    events.push_back("alloc " + std::to_string(count) + "x" + std::to_string(numel));
  }
  void reuse_buffer(int b) override { events.push_back("reuse " + std::to_string(b)); }
  void fill(int bucket, int buffer, int group) override {
    events.push_back("fill b" + std::to_string(bucket) + " buf" + std::to_string(buffer) + " g" + std::to_string(group));
  }
  void launch(int bucket, int buffer) override {
    events.push_back("launch b" + std::to_string(bucket) + " buf" + std::to_string(buffer));
  }
  void complete(int bucket, int buffer) override {
    events.push_back("complete b" + std::to_string(bucket) + " buf" + std::to_string(buffer));
  }
  void end(bool free) override { events.push_back(free ? "end free" : "end keep"); }
};

// Three replicated layers (stage 2) on 2 ranks: flat sizes 16, 8, 24 -> partitions 8, 4, 12.
std::vector<LayerLayout> layers() {
  std::vector<LayerLayout> out;
  for (int64_t n : {16, 8, 24}) out.push_back(layer_layout({n}, stage_policy(2), 2, 0));
  return out;
}

std::vector<std::pair<int, const LayerLayout*>> reverse(const std::vector<LayerLayout>& l) {
  std::vector<std::pair<int, const LayerLayout*>> out;
  for (int g = static_cast<int>(l.size()) - 1; g >= 0; --g) out.emplace_back(g, &l[g]);
  return out;
}

}  // namespace

TEST(ReduceSchedule, BucketBoundariesFollowGradientOrderAndSplitUnits) {
  const auto l = layers();
  BufferPolicy bp;
  bp.full_size_reduce_buffers = false;
  // 20 elements over 2 ranks: 10 per rank. Units in reverse order: 12 (g2), 4 (g1), 8 (g0).
  ReduceSchedule s(reverse(l), 20, 2, bp);
  ASSERT_EQ(s.buckets().size(), 3u);
  EXPECT_EQ(s.buckets()[0].numel_per_rank, 10);  // g2[0..10)
  EXPECT_EQ(s.buckets()[1].numel_per_rank, 10);  // g2[10..12) + g1 + g0[0..4)
  EXPECT_EQ(s.buckets()[2].numel_per_rank, 4);   // g0[4..8)
  EXPECT_EQ(s.buffer_numel(), 20);               // the largest bucket over both ranks
  bp.full_size_reduce_buffers = true;
  EXPECT_EQ(ReduceSchedule(reverse(l), 100, 2, bp).buffer_numel(), 100) << "contiguous_gradients: full-size buffers";
}

TEST(ReduceSchedule, OneBufferCompletesEachBucketBeforeTheNext) {
  const auto l = layers();
  BufferPolicy bp;
  bp.full_size_reduce_buffers = false;
  ReduceSchedule s(reverse(l), 20, 2, bp);
  ReduceLog log;
  s.prepare(log);
  EXPECT_TRUE(log.events.empty()) << "non-persistent buffers wait for the first gradient";
  for (int g : {2, 1, 0}) s.add(g, log);
  s.finish(log);
  const std::vector<std::string> want = {
      "reuse 0", "alloc 1x20", "fill b0 buf0 g2", "launch b0 buf0", "complete b0 buf0",
      "reuse 0", "fill b1 buf0 g2",
      "fill b1 buf0 g1",
      "fill b1 buf0 g0", "launch b1 buf0", "complete b1 buf0",
      "reuse 0", "fill b2 buf0 g0", "launch b2 buf0", "complete b2 buf0",
      "end free"};
  EXPECT_EQ(log.events, want);
}

TEST(ReduceSchedule, TwoBuffersOverlapAndPersistentBuffersStay) {
  const auto l = layers();
  BufferPolicy bp;
  bp.reduce_buffers = 2;
  bp.full_size_reduce_buffers = false;
  bp.persistent_reduce_buffers = true;
  ReduceSchedule s(reverse(l), 20, 2, bp);
  ReduceLog log;
  s.prepare(log);
  EXPECT_EQ(log.events, std::vector<std::string>{"alloc 2x20"});
  log.events.clear();
  for (int g : {2, 1, 0}) s.add(g, log);
  s.finish(log);
  // Bucket 1 fills buffer 1 while bucket 0 reduces; bucket 2 needs a buffer: the
  // oldest in flight (bucket 0) completes first.
  const std::vector<std::string> want = {
      "reuse 0", "fill b0 buf0 g2", "launch b0 buf0",
      "reuse 1", "fill b1 buf1 g2", "fill b1 buf1 g1", "fill b1 buf1 g0", "launch b1 buf1",
      "complete b0 buf0", "reuse 0", "fill b2 buf0 g0", "launch b2 buf0",
      "complete b1 buf1", "complete b2 buf0", "end keep"};
  EXPECT_EQ(log.events, want);
}

TEST(ReduceSchedule, AMissingGradientIsAnError) {
  const auto l = layers();
  ReduceSchedule s(reverse(l), 20, 2, BufferPolicy{});
  ReduceLog log;
  s.add(2, log);
  s.add(1, log);  // g0 never arrives: bucket 1 stays open
  EXPECT_THROW(s.finish(log), std::logic_error);
}

TEST(ShardLifecycle, StatesAndWhatEachTransitionAllocates) {
  ShardLifecycle life(true, false);
  EXPECT_EQ(life.state(), ShardState::sharded);
  ShardLifecycle::Start s = life.start();
  EXPECT_TRUE(s.alloc_dynamic && s.alloc_persistent && s.gather_dynamic && s.gather_persistent && !s.upload);
  EXPECT_EQ(life.state(), ShardState::gathering);
  EXPECT_FALSE(life.start().any()) << "gathers in flight: nothing more to start";
  life.wait();
  EXPECT_EQ(life.state(), ShardState::gathered);
  EXPECT_FALSE(life.start().any()) << "gathered and fresh";
  EXPECT_TRUE(life.reshard());
  EXPECT_EQ(life.state(), ShardState::sharded);
  EXPECT_FALSE(life.reshard());
  s = life.start();
  EXPECT_TRUE(s.alloc_dynamic && !s.alloc_persistent && !s.gather_persistent) << "persistent: allocated once, fresh";
  life.wait();
  life.mark_stale();
  s = life.start();
  EXPECT_TRUE(!s.alloc_dynamic && s.gather_persistent && !s.alloc_persistent) << "stale persistent params regather";
  life.wait();
  EXPECT_EQ(ShardLifecycle(false, true).state(), ShardState::replicated);
  EXPECT_FALSE(ShardLifecycle(false, true).start().any());
}

TEST(ShardLifecycle, AHostShardComesUpBeforeItsGathers) {
  ShardLifecycle life(true, true);
  const ShardLifecycle::Start s = life.start();
  EXPECT_TRUE(s.upload);
  EXPECT_TRUE(life.uploading());
  const ShardLifecycle::Wait w = life.wait();
  EXPECT_TRUE(w.upload_landed && w.gather_dynamic && w.gather_persistent);
  EXPECT_FALSE(life.uploading());
}

namespace {

// ShardOps over lifecycles, logging starts and reshards.
struct ShardLog : ShardOps {
  std::vector<ShardLifecycle> life;
  std::vector<std::string> events;
  ShardLog(int n, bool host) : life(n, ShardLifecycle(true, host)) {}
  void unshard_start(int l) override {
    if (life[l].start().any()) events.push_back("start " + std::to_string(l));
  }
  void unshard_wait(int l) override { life[l].wait(); }
  void reshard(int l) override {
    life[l].wait();
    if (life[l].reshard()) events.push_back("reshard " + std::to_string(l));
  }
  bool uploading(int l) const override { return life[l].uploading(); }
  bool host_shard(int l) const override { return life[l].host_shard(); }
};

// One forward and backward over n layers, as the model calls the engine.
void micro_step(GatherSchedule& g, ShardLog& ops, int n) {
  g.begin_micro_step();
  for (int l = 0; l < n; ++l) g.fetch(l, ops), g.release(l, ops);
  for (int l = n - 1; l >= 0; --l) g.fetch(l, ops), g.release(l, ops);
  g.end_backward(ops);
}

}  // namespace

TEST(GatherSchedule, RecordsTheTraceThenPrefetchesAlongIt) {
  GatherSchedule g({10, 10, 10}, {/*prefetch*/ 10, /*live*/ 1000, /*reuse*/ 0, /*uploads*/ 0});
  ShardLog ops(3, false);
  micro_step(g, ops, 3);
  EXPECT_EQ(g.trace(), (std::vector<int>{0, 1, 2, 2, 1, 0}));
  EXPECT_EQ(ops.events.front(), "start 0");
  ops.events.clear();
  g.begin_micro_step();
  g.fetch(0, ops);
  EXPECT_EQ(ops.events, (std::vector<std::string>{"start 0", "start 1"})) << "one layer of prefetch (10 elements)";
}

TEST(GatherSchedule, ReuseDistanceKeepsALayerThatComesBackSoon) {
  // Layer 2 is used twice in a row at the turn (forward then backward): with a reuse
  // distance it stays gathered between the two uses, without one it is resharded.
  for (int64_t reuse : {0, 1000}) {
    GatherSchedule g({10, 10, 10}, {0, 1000, reuse, 0});
    ShardLog ops(3, false);
    micro_step(g, ops, 3);  // records the trace
    ops.events.clear();
    micro_step(g, ops, 3);
    int reshards_of_2 = 0;
    for (const auto& e : ops.events) reshards_of_2 += e == "reshard 2";
    EXPECT_EQ(reshards_of_2, reuse == 0 ? 2 : 1) << "reuse distance " << reuse;
  }
}

TEST(GatherSchedule, UploadBoundLimitsHostShardsInFlight) {
  for (int64_t bound : {0, 1, 2}) {
    GatherSchedule g({10, 10, 10, 10}, {1000, 1000, 0, bound});
    ShardLog ops(4, true);
    micro_step(g, ops, 4);
    ops.events.clear();
    g.begin_micro_step();
    g.fetch(0, ops);
    // Layer 0 itself was waited for; the prefetches admitted are still on their way up.
    int in_flight = 0;
    for (int l = 0; l < 4; ++l) in_flight += ops.uploading(l);
    // The fetched layer counts against the bound until it is waited for.
    EXPECT_EQ(in_flight, bound == 0 ? 3 : bound - 1) << "max_uploads " << bound;
  }
}
