// ParamGroup on tensors, one rank (and a gated two-rank communicator for a gather's
// lifetime): the stage-3 state transitions with the bytes each
// allocates and frees, persistent parameters (under the threshold) allocated once and
// regathered only when stale, and replicated groups that never change state.
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>

#include "device/device_memory.h"
#include "zero/comm/communicator.h"
#include "zero/param_group.h"

using namespace zrepro;

namespace {

int64_t now(MemCategory c) { return DeviceMemory::instance().snapshot().by_category[static_cast<int>(c)]; }
size_t gathers(Communicator& comm) { return comm.recorder().snapshot().size(); }

}  // namespace

TEST(ParamGroup, Stage3OnOneRankIsItsShard) {
  // One rank, shard on the device: as in DeepSpeed the parameters are the partition
  // itself: no gathered buffers, no gathers, and the lifecycle still runs (the
  // states and their bytes at several ranks are in tests/zero/zero_mpi_test.cpp
  // and planner_test.cpp's plan-vs-measured checks).
  DeviceMemory::instance().install(0);
  SelfCommunicator comm;
  ShardingConfig sc;
  sc.policy = stage_policy(3);
  sc.persistence_threshold = 100;
  const int64_t params0 = now(MemCategory::params), comm0 = now(MemCategory::comm_buffers);
  ParamGroup g(0, "g", {{"w", {25, 40}}, {"b", {40}}}, sc);  // w dynamic (1000), b persistent (40)
  EXPECT_EQ(g.state(), ShardState::sharded);
  EXPECT_EQ(now(MemCategory::params) - params0, 1040 * 4) << "the shard (one rank: everything)";
  g.load(torch::arange(1040, torch::kFloat));

  g.unshard_start(comm);
  EXPECT_EQ(g.state(), ShardState::gathering);
  g.unshard_wait();
  EXPECT_EQ(g.state(), ShardState::gathered);
  EXPECT_EQ(now(MemCategory::comm_buffers) - comm0, 0) << "nothing to gather into";
  EXPECT_EQ(now(MemCategory::params) - params0, 1040 * 4) << "the shard only";
  const auto p = g.params();
  EXPECT_TRUE(torch::equal(p[0].reshape({-1}), torch::arange(1000, torch::kFloat)));
  EXPECT_TRUE(torch::equal(p[1], torch::arange(1000, 1040, torch::kFloat)));
  EXPECT_EQ(gathers(comm), 0u);
  // Views of the shard: an update of the shard is what the next forward sees.
  g.owned_params().add_(1.0);
  EXPECT_TRUE(torch::equal(g.params()[1], torch::arange(1001, 1041, torch::kFloat)));

  g.reshard();
  EXPECT_EQ(g.state(), ShardState::sharded);
  EXPECT_EQ(now(MemCategory::params) - params0, 1040 * 4);
  g.mark_persistent_stale();
  g.unshard_start(comm);
  g.unshard_wait();
  EXPECT_EQ(gathers(comm), 0u);
  g.reshard();
}

TEST(ParamGroup, ReplicatedGroupsHoldTheFlatAndNeverChangeState) {
  DeviceMemory::instance().install(0);
  SelfCommunicator comm;
  for (int stage : {0, 1, 2}) {
    ShardingConfig sc;
    sc.policy = stage_policy(stage);
    ParamGroup g(0, "g", {{"w", {5}}}, sc);
    EXPECT_EQ(g.state(), ShardState::replicated);
    g.unshard_start(comm);
    g.reshard();
    EXPECT_EQ(g.state(), ShardState::replicated);
    EXPECT_EQ(g.param_bytes(), 6 * 4) << "padded to 2 x world size";
    EXPECT_EQ(gathers(comm), 0u);
  }
}

namespace {

// A threaded two-rank communicator whose collectives wait for the test to let them run,
// then write their output (what MPI does when the peer's data arrives).
class GatedCommunicator : public Communicator {
 public:
  GatedCommunicator() : Communicator(0, 2, true) {}
  ~GatedCommunicator() override {
    open();
    stop_worker();
  }
  void open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  std::string backend() const override { return "gated"; }

 protected:
  void execute(CollOp, torch::Tensor& out, torch::Tensor&, int) override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return open_; });
    if (out.defined()) out.fill_(7);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

}  // namespace

// [Note: a gather outlives its group]: a group destroyed while its gathers are still
// queued (an OOM unwinding the engine, the communicator's worker carrying on) keeps their
// buffer until they have written it; then the buffer goes.
TEST(ParamGroup, AGatherStillQueuedKeepsItsBufferPastTheGroup) {
  DeviceMemory::instance().install(0);
  GatedCommunicator comm;
  ShardingConfig sc;
  sc.policy = stage_policy(3);
  sc.rank = 0;
  sc.world_size = 2;
  const int64_t comm0 = now(MemCategory::comm_buffers);
  int64_t gathered = 0;
  {
    ParamGroup g(0, "g", {{"w", {25, 40}}}, sc);
    g.load(torch::arange(1000, torch::kFloat));
    g.unshard_start(comm);  // the gather waits at the gate
    gathered = now(MemCategory::comm_buffers) - comm0;
    ASSERT_GT(gathered, 0) << "the gathered buffer";
  }  // the group goes, its gather still queued
  EXPECT_EQ(now(MemCategory::comm_buffers) - comm0, gathered) << "the buffer the gather writes into was freed";
  comm.open();
  comm.barrier("drain");  // runs after the gather
  EXPECT_EQ(now(MemCategory::comm_buffers) - comm0, 0) << "the buffer outlived its gather";
}
