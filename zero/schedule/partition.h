// Sharding arithmetic, pure and computed once: how a layer's parameters are
// padded and split across ranks (DeepSpeed's stage 1/2 and stage 3 schemes), and
// how shards are grouped into communication buckets. No tensors, no devices.
#pragma once
#include <cstdint>
#include <vector>

namespace zrepro {

inline int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// Stage 1/2: one flat buffer per group padded to a multiple of 2 * world size
// (DeepSpeed's NCCL alignment factor of 2), cut into world-size equal contiguous
// partitions; rank r owns [r * partition, (r + 1) * partition). Parameters may
// straddle partitions.
struct FlatPartition {
  int64_t numel = 0, padded_numel = 0, partition_numel = 0;
  int world_size = 1;
  int64_t begin(int rank) const { return rank * partition_numel; }
};
FlatPartition partition_flat(int64_t numel, int world_size);

// The part of parameter `param` (offset `param_offset` into it) that lies in a
// rank's partition at `partition_offset`, `numel` elements long.
struct ParamSegment {
  int param;
  int64_t param_offset, partition_offset, numel;
};
// Segments of the parameters (given by their sizes, laid out back to back) that
// fall into `rank`'s partition, in order.
std::vector<ParamSegment> partition_segments(const std::vector<int64_t>& param_numels, const FlatPartition& p,
                                             int rank);

// [Note: DeepSpeed's whole-parameter gradient partition] DeepSpeed stages 1-2
// flatten the model's parameters into one group and cut it into world-size
// partitions (partition_flat). At the accumulation boundary a rank holds the
// gradients of every parameter that overlaps its partition, whole
// (stage_1_and_2.py params_in_partition -> averaged_gradients, grads_in_partition),
// so the ranks differ: `tiny` on 2 ranks holds 60,160 and 74,752 elements against
// an exact 59,264 (docs/design/CONFORMANCE.md). zrepro partitions per layer and holds the
// difference as the engine's gradient overhang (grad_overhang_numel) to match.
//
// The elements of the parameters (sizes in model order) that overlap `rank`'s
// partition of one flat group over all of them.
int64_t whole_param_partition_numel(const std::vector<int64_t>& param_numels, int world_size, int rank);
// The segments of `rank`'s partition of that one flat group over all of them.
std::vector<ParamSegment> whole_model_segments(const std::vector<int64_t>& param_numels, int world_size, int rank);
// What that whole-parameter partition holds beyond zrepro's per-layer partitions (each
// layer's flat padded and cut on its own), never negative. layer_param_numels: per
// layer, its parameters' sizes in model order.
int64_t whole_param_overhang_numel(const std::vector<std::vector<int64_t>>& layer_param_numels, int world_size,
                                   int rank);

// Stage 3: each parameter is padded to a multiple of world size and every rank keeps
// a 1/ws slice. A group's shard is its parameters' slices back to back; the
// gathered ("full") buffer keeps each padded parameter contiguous.
struct ParamShard {
  int64_t numel = 0, padded_numel = 0;
  int64_t slice_numel = 0;   // padded_numel / world size
  int64_t shard_offset = 0;  // where this rank's slice sits in the group shard
  int64_t full_offset = 0;   // where the padded parameter sits in the full buffer
};
struct ShardLayout {
  std::vector<ParamShard> params;
  int64_t shard_numel = 0;  // per rank
  int64_t full_numel = 0;   // = shard_numel * world size
};
ShardLayout partition_params(const std::vector<int64_t>& param_numels, int world_size);

// A unit is something with one equal slice per rank: a stage 1/2 group partition
// or a stage 3 parameter slice. A bucket holds pieces of units; in its buffer the
// pieces are laid out rank-major ([rank 0 pieces | rank 1 pieces | ...]) so one
// reduce-scatter / all-gather on it moves every rank's pieces at once.
struct BucketPiece {
  int unit;
  int64_t offset;  // into the unit's per-rank slice
  int64_t numel;   // per rank
};
struct Bucket {
  std::vector<BucketPiece> pieces;
  int64_t numel_per_rank = 0;  // sum of piece sizes; the buffer holds world size times this
};
// Packs units in the given order into buckets of at most bucket_numel elements
// (counted over all ranks, as DeepSpeed's reduce_bucket_size is), splitting a unit
// that does not fit. Every bucket holds at least one element per rank.
std::vector<Bucket> make_buckets(const std::vector<int64_t>& unit_slice_numels, int64_t bucket_numel, int world_size);

}  // namespace zrepro

namespace zrepro {

// Stage 3 release rule (DeepSpeed's PartitionedParameterCoordinator): after a use,
// a layer stays gathered if it is used again among the next layers of the recorded
// trace, looked at from position `from` until max_reuse_distance parameter
// elements have been traversed.
bool reused_within(const std::vector<int>& trace, size_t from, int group, const std::vector<int64_t>& group_numels,
                   int64_t max_reuse_distance);

}  // namespace zrepro
