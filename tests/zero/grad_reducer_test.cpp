// GradReducer on tensors, one rank (SelfCommunicator): every piece lands in the
// owned gradient at its offset, buckets are reduced in order, and the bucket buffers
// and outputs are the bytes BufferPolicy and the bucket sizes say.
#include <gtest/gtest.h>

#include "device/device_memory.h"
#include "zero/grad_reducer.h"

using namespace zrepro;

namespace {

int64_t comm_bytes(const MemorySnapshot& s) { return s.category_peaks[static_cast<int>(MemCategory::comm_buffers)]; }

}  // namespace

TEST(GradReducer, PiecesLandAtTheirOffsetsInBucketOrderWithTheBytesThePolicySays) {
  DeviceMemory& mem = DeviceMemory::instance();
  mem.install(0);
  SelfCommunicator comm;
  ShardingConfig sc;
  sc.policy = stage_policy(2);
  ParamGroup g0(0, "g0", {{"w", {16}}}, sc);
  ParamGroup g1(1, "g1", {{"w", {8}}, {"b", {3}}}, sc);  // 11, padded to 12
  GradReducer::Options o;
  o.reduce_bucket_size = 10;
  o.buffers.full_size_reduce_buffers = false;
  GradReducer reducer({&g1, &g0}, o, comm);
  // Units in gradient order: g1 (12), g0 (16); 10 per bucket: [g1 0..10) [g1 10..12, g0 0..8) [g0 8..16).
  ASSERT_EQ(reducer.schedule().buckets().size(), 3u);
  EXPECT_EQ(reducer.buffer_numel(), 10);

  torch::manual_seed(0);
  std::vector<torch::Tensor> grads1 = {torch::randn({8}), torch::randn({3})}, grads0 = {torch::randn({16})};
  std::vector<torch::Tensor> owned = {torch::zeros({g0.owned_numel()}), torch::zeros({g1.owned_numel()})};
  mem.reset_peaks();
  const int64_t before = comm_bytes(mem.snapshot());
  reducer.add(g1, grads1, owned);
  reducer.add(g0, grads0, owned);
  reducer.finish(owned);
  // One buffer of 10 fp32 elements and one bucket output of at most 10 at a time.
  EXPECT_EQ(comm_bytes(mem.snapshot()) - before, 2 * 10 * 4);
  EXPECT_EQ(mem.snapshot().by_category[static_cast<int>(MemCategory::comm_buffers)], 0) << "buffers freed at finish";

  EXPECT_TRUE(torch::equal(owned[1].narrow(0, 0, 8), grads1[0]));
  EXPECT_TRUE(torch::equal(owned[1].narrow(0, 8, 3), grads1[1]));
  EXPECT_EQ(owned[1][11].item<float>(), 0.0f) << "padding";
  EXPECT_TRUE(torch::equal(owned[0], grads0[0]));

  const auto ring = comm.recorder().snapshot();
  ASSERT_EQ(ring.size(), 3u);
  for (int b = 0; b < 3; ++b) EXPECT_EQ(ring[b].label, "reduce_grad bucket " + std::to_string(b));
}

TEST(GradReducer, AccumulatesOverMicroStepsAndKeepsPersistentBuffers) {
  DeviceMemory& mem = DeviceMemory::instance();
  mem.install(0);
  SelfCommunicator comm;
  ShardingConfig sc;
  sc.policy = stage_policy(3);
  ParamGroup g(0, "g", {{"w", {6}}}, sc);
  GradReducer::Options o;
  o.reduce_bucket_size = 4;
  o.buffers.reduce_buffers = 2;
  o.buffers.persistent_reduce_buffers = true;
  const int64_t before = mem.snapshot().by_category[static_cast<int>(MemCategory::comm_buffers)];
  GradReducer reducer({&g}, o, comm);
  // Persistent: two full-size buffers (max(bucket, reduce_bucket_size) = 4 elements) from the start.
  EXPECT_EQ(mem.snapshot().by_category[static_cast<int>(MemCategory::comm_buffers)] - before, 2 * 4 * 4);
  std::vector<torch::Tensor> owned = {torch::zeros({g.owned_numel()})};
  const torch::Tensor grad = torch::arange(6, torch::kFloat);
  for (int micro = 0; micro < 3; ++micro) {
    reducer.add(g, {grad}, owned);
    reducer.finish(owned);
  }
  EXPECT_TRUE(torch::allclose(owned[0], 3 * grad));
  EXPECT_EQ(mem.snapshot().by_category[static_cast<int>(MemCategory::comm_buffers)] - before, 2 * 4 * 4)
      << "persistent buffers stay for the run";
}
