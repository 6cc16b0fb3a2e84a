// The stage policy as one table ([Note: which stage shards what]), and the per-rank
// model-state bytes it implies through LayerLayout against the ZeRO paper's formulas
// (psi parameters, N ranks, 16-bit parameters and gradients, fp32 Adam: 2 + 2 + 12).
#include <vector>

#include <gtest/gtest.h>

#include "zero/schedule/buffer_policy.h"
#include "zero/schedule/layer_layout.h"
#include "zero/schedule/stage_policy.h"

using namespace zrepro;

TEST(StagePolicy, WhichStageShardsWhat) {
  struct Row {
    int stage;
    bool optimizer, grads, params;
    GradReduction reduction;
  };
  const Row table[] = {
      {0, false, false, false, GradReduction::all_reduce_at_boundary},
      {1, true, false, false, GradReduction::reduce_scatter_at_boundary},
      {2, true, true, false, GradReduction::reduce_scatter_per_micro_step},
      {3, true, true, true, GradReduction::reduce_scatter_per_micro_step},
  };
  for (const Row& r : table) {
    const StagePolicy p = stage_policy(r.stage);
    EXPECT_EQ(p.shards(ModelState::optimizer_states), r.optimizer) << r.stage;
    EXPECT_EQ(p.shards(ModelState::gradients), r.grads) << r.stage;
    EXPECT_EQ(p.shards(ModelState::parameters), r.params) << r.stage;
    EXPECT_EQ(p.reduction(), r.reduction) << r.stage;
    EXPECT_EQ(p.full_grads(), !r.grads) << r.stage;
    EXPECT_EQ(p.uses_reducer(), r.optimizer) << r.stage;
    EXPECT_EQ(p.gathers_updated_partitions(), r.stage == 1 || r.stage == 2) << r.stage;
    EXPECT_EQ(p.owns_whole_flat(), r.stage == 0) << r.stage;
    EXPECT_EQ(p.replicated_params(), r.stage < 3) << r.stage;
  }
  EXPECT_THROW(stage_policy(4), std::invalid_argument);
  EXPECT_THROW(stage_policy(-1), std::invalid_argument);
}

TEST(StagePolicy, LayerLayoutGivesTheZeroPaperBytesPerRank) {
  // Sizes that divide by 2N: no padding, so the formulas hold exactly.
  const std::vector<int64_t> params = {4096, 64, 4096 * 4, 4096};
  int64_t psi = 0;
  for (int64_t n : params) psi += n;
  const int N = 4;
  for (int stage = 0; stage <= 3; ++stage) {
    const StagePolicy p = stage_policy(stage);
    const LayerLayout l = layer_layout(params, p, N, /*persistence_threshold=*/0);
    const int64_t param_bytes = 2 * l.param_device_numel(false);
    const int64_t grad_bytes = 2 * (p.full_grads() ? l.full_grad_numel() : l.owned_numel());
    const int64_t optimizer_bytes = 12 * l.owned_numel();
    EXPECT_EQ(param_bytes, stage == 3 ? 2 * psi / N : 2 * psi) << "stage " << stage;
    EXPECT_EQ(grad_bytes, stage >= 2 ? 2 * psi / N : 2 * psi) << "stage " << stage;
    EXPECT_EQ(optimizer_bytes, stage >= 1 ? 12 * psi / N : 12 * psi) << "stage " << stage;
  }
}

TEST(StagePolicy, PersistentParametersStayWholeUnderStage3) {
  const LayerLayout l = layer_layout({10, 1000, 7}, stage_policy(3), 4, /*persistence_threshold=*/100);
  EXPECT_EQ(l.persistent, (std::vector<bool>{true, false, true}));
  EXPECT_EQ(l.persist_numel, 12 + 8);  // each padded to a multiple of 4
  EXPECT_EQ(l.dynamic_numel, 1000);
  EXPECT_EQ(l.gathered_offsets, (std::vector<int64_t>{0, 0, 12}));
  EXPECT_EQ(l.param_device_numel(true), l.persist_numel) << "a host shard is not device memory";
}

TEST(StagePolicy, OneRankStage3GathersNothing) {
  // DeepSpeed points each parameter at its partition on a world of one; zrepro's
  // parameters are then views of the shard, with no gathered buffers.
  const LayerLayout l = layer_layout({10, 1000, 7}, stage_policy(3), 1, /*persistence_threshold=*/100);
  EXPECT_TRUE(l.shard_is_gathered);
  EXPECT_EQ(l.persist_numel, 0);
  EXPECT_EQ(l.dynamic_numel, 0);
  EXPECT_EQ(l.gathered_offsets, (std::vector<int64_t>{0, 10, 1010}));
  EXPECT_EQ(l.param_device_numel(false), 1017);
  // With the shard on the host (offload_param) one rank still gathers to the device.
  const LayerLayout h = layer_layout({10, 1000, 7}, stage_policy(3), 1, 100, /*host_shard=*/true);
  EXPECT_FALSE(h.shard_is_gathered);
  EXPECT_EQ(h.persist_numel, 17);
}

TEST(StagePolicy, Stage2HoldsDeepSpeedsWholeParameterPartition) {
  // Two layers {6, 10} and {4}: one flat group of 20, padded to 20 on 2 ranks:
  // partitions [0, 10) and [10, 20). Rank 0 overlaps params 6 and 10 (16 whole),
  // rank 1 params 10 and 4 (14 whole); per-layer shards give each 8 + 2 = 10.
  EXPECT_EQ(whole_param_partition_numel({6, 10, 4}, 2, 0), 16);
  EXPECT_EQ(whole_param_partition_numel({6, 10, 4}, 2, 1), 14);
  const LayerLayout a = layer_layout({6, 10}, stage_policy(2), 2, 0), b = layer_layout({4}, stage_policy(2), 2, 0);
  EXPECT_EQ(grad_overhang_numel({&a, &b}, 2, 0), 16 - 10);
  EXPECT_EQ(grad_overhang_numel({&a, &b}, 2, 1), 14 - 10);
  // Stage 1 holds the full gradient, stage 3 partitions per parameter: no overhang.
  const LayerLayout a1 = layer_layout({6, 10}, stage_policy(1), 2, 0), b1 = layer_layout({4}, stage_policy(1), 2, 0);
  EXPECT_EQ(grad_overhang_numel({&a1, &b1}, 2, 0), 0);
}

TEST(LayerLayout, TheNormCopiesOnePieceOfDeepSpeedsPartitionAtATime) {
  // [Note: the gradient norm's fp64 copies] Parameters {6, 10} and {4} on 2 ranks at
  // stage 2: DeepSpeed's one flat group [0, 20) cut at 10 gives rank 0 the pieces 6 and 4
  // (param 10's first part), rank 1 the pieces 6 and 4: the largest is 6 on both.
  const LayerLayout a = layer_layout({6, 10}, stage_policy(2), 2, 0), b = layer_layout({4}, stage_policy(2), 2, 0);
  EXPECT_EQ(norm_copy_numel({&a, &b}, 2, 0), 6);
  EXPECT_EQ(norm_copy_numel({&a, &b}, 2, 1), 6);
  // On one rank every parameter is whole.
  const LayerLayout a1 = layer_layout({6, 10}, stage_policy(1), 1, 0), b1 = layer_layout({4}, stage_policy(1), 1, 0);
  EXPECT_EQ(norm_copy_numel({&a1, &b1}, 1, 0), 10);
  // zrepro's engine cuts per layer: layer a's flat [0, 16) halves at 8, rank 0 holds 6 and 2.
  EXPECT_EQ(a.norm_pieces(0), (std::vector<int64_t>{6, 2}));
  EXPECT_EQ(a.norm_pieces(1), (std::vector<int64_t>{8}));
  // Stage 3: each parameter's slice (padded to the world size, halved).
  const LayerLayout a3 = layer_layout({6, 11}, stage_policy(3), 2, 0);
  EXPECT_EQ(norm_copy_numel({&a3}, 2, 1), 6);
  EXPECT_EQ(a3.norm_pieces(1), (std::vector<int64_t>{3, 6}));
  // Stage 0 is not a ZeRO optimizer: one norm of the share, no fp64 copy.
  const LayerLayout a0 = layer_layout({6, 10}, stage_policy(0), 2, 0);
  EXPECT_EQ(norm_copy_numel({&a0}, 2, 0), 0);
  EXPECT_TRUE(a0.norm_pieces(0).empty());
}

TEST(BufferPolicy, FollowsTheZeroConfig) {
  ZeroConfig z;
  z.stage = 2;
  BufferPolicy b = buffer_policy(z);
  EXPECT_EQ(b.reduce_buffers, 1);
  EXPECT_TRUE(b.full_size_reduce_buffers);
  EXPECT_FALSE(b.persistent_reduce_buffers);
  EXPECT_EQ(b.max_param_uploads, 0);
  z.overlap_comm = true;
  EXPECT_EQ(buffer_policy(z).reduce_buffers, 2) << "stages 1-2 double their bucket with overlap_comm";
  z.stage = 3;
  z.contiguous_gradients = false;
  z.offload_param.device = "cpu";
  z.offload_param.buffer_count = 5;
  b = buffer_policy(z);
  // Stage 3 allocates one bucket at init whatever overlap_comm says (measured in
  // DeepSpeed 0.19.8: docs/design/CONFORMANCE.md).
  EXPECT_EQ(b.reduce_buffers, 1);
  EXPECT_FALSE(b.full_size_reduce_buffers);
  EXPECT_TRUE(b.persistent_reduce_buffers);
  EXPECT_EQ(b.max_param_uploads, 5);
}
