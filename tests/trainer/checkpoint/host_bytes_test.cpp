// What a checkpoint costs the host (trainer/checkpoint/host_bytes.h): Hugging Face's shard
// split as zero_to_fp32.py calls it, DeepSpeed's anonymous bytes per stage and mode, and the
// plan quoting the same function the run charges.
#include "trainer/checkpoint/host_bytes.h"

#include <gtest/gtest.h>

#include "trainer/checkpoint/ds_layout.h"
#include "trainer/config/job_spec.h"
#include "trainer/planner/planner.h"

namespace zrepro {
namespace {

std::vector<std::vector<size_t>> tensors_of(const std::vector<Fp32Shard>& shards) {
  std::vector<std::vector<size_t>> out;
  for (const auto& s : shards) out.push_back(s.tensors);
  return out;
}

TEST(HostBytes, ShardsAreCutAsHuggingFaceCutsThem) {
  // In order; a new shard when the next tensor would pass the limit; one larger than the
  // limit alone, between the others.
  using V = std::vector<std::vector<size_t>>;
  EXPECT_EQ(tensors_of(split_fp32_shards({2, 2, 2}, 5)), (V{{0, 1}, {2}}));
  EXPECT_EQ(tensors_of(split_fp32_shards({3, 7, 1, 1}, 5)), (V{{1}, {0, 2, 3}}));
  EXPECT_EQ(tensors_of(split_fp32_shards({5, 5}, 5)), (V{{0}, {1}}));
  EXPECT_EQ(tensors_of(split_fp32_shards({2, 2, 2}, 0)), (V{{0, 1, 2}}));  // the API: one state dict
  EXPECT_EQ(split_fp32_shards({3, 7, 1, 1}, 5)[1].bytes, 5);
}

TEST(HostBytes, StagesOneAndTwoHoldTheWholeFlatWhateverTheModeStageThreeTheShard) {
  const std::vector<int64_t> sizes = {4, 4, 8, 4};
  for (int stage : {1, 2}) {
    const Fp32ConsolidationBytes b = zero_to_fp32_host_bytes(sizes, stage, 24, 6);
    EXPECT_EQ(b.api, 24) << stage;
    EXPECT_EQ(b.script, 24) << stage;  // "memory usage doubles here (zero2)": concatenated first
    EXPECT_EQ(b.mapped, 24) << stage;
  }
  const Fp32ConsolidationBytes b3 = zero_to_fp32_host_bytes(sizes, 3, 20, 6);
  EXPECT_EQ(b3.api, 20);    // every parameter merged at once
  EXPECT_EQ(b3.script, 8);  // the largest shard: the 8-byte tensor alone
  EXPECT_EQ(b3.mapped, 20);
}

TEST(HostBytes, OnlyZeroThreeWithTheGatherFlagHoldsTheSixteenBitModelAtASave) {
  ZeroConfig z;
  z.stage3_gather_16bit_weights_on_model_save = true;
  for (int stage : {0, 1, 2, 3}) {
    z.stage = stage;
    EXPECT_EQ(save_16bit_host_bytes(z, 1000, 2), stage == 3 ? 2000 : 0) << stage;
  }
  z.stage3_gather_16bit_weights_on_model_save = false;
  EXPECT_EQ(save_16bit_host_bytes(z, 1000, 2), 0);
}

TEST(HostBytes, ThePlanQuotesTheCheckpointsOwnShardsAtTheDefaultSize) {
  // llama2-7b at ZeRO-3: 27 GB of fp32 in shards of at most 5GB, the largest as Hugging
  // Face's split makes it from the checkpoint's tensors (not the 5GB limit itself).
  JobSpec job;
  job.model = resolve_model("llama2-7b");
  job.cfg.zero.stage = 3;
  job.world_size = 8;
  job.saves_checkpoints = true;
  const MemoryPlan p = plan_memory(job);
  std::vector<int64_t> fp32;
  for (const CheckpointParam& c : checkpoint_params(job.model)) fp32.push_back(4 * c.numel);
  int64_t largest = 0;
  for (const Fp32Shard& s : split_fp32_shards(fp32, kZeroToFp32DefaultShardBytes)) largest = std::max(largest, s.bytes);
  EXPECT_EQ(p.zero_to_fp32_script_bytes, largest);
  EXPECT_LE(largest, kZeroToFp32DefaultShardBytes);
  EXPECT_EQ(p.zero_to_fp32_api_bytes, 4 * job.model.param_count());
}

}  // namespace
}  // namespace zrepro
