// See partition.h.
#include "zero/schedule/partition.h"

#include <algorithm>
#include <stdexcept>

namespace zrepro {

FlatPartition partition_flat(int64_t numel, int world_size) {
  if (world_size < 1 || numel < 0) throw std::invalid_argument("partition_flat: bad sizes");
  FlatPartition p;
  p.numel = numel;
  p.world_size = world_size;
  p.padded_numel = round_up(std::max<int64_t>(numel, 1), 2 * world_size);
  p.partition_numel = p.padded_numel / world_size;
  return p;
}

std::vector<ParamSegment> partition_segments(const std::vector<int64_t>& numels, const FlatPartition& p, int rank) {
  std::vector<ParamSegment> out;
  const int64_t lo = p.begin(rank), hi = lo + p.partition_numel;
  int64_t off = 0;
  for (size_t i = 0; i < numels.size(); ++i) {
    const int64_t a = std::max(lo, off), b = std::min(hi, off + numels[i]);
    if (a < b) out.push_back({static_cast<int>(i), a - off, a - lo, b - a});
    off += numels[i];
  }
  return out;
}

std::vector<ParamSegment> whole_model_segments(const std::vector<int64_t>& numels, int world_size, int rank) {
  int64_t total = 0;
  for (int64_t n : numels) total += n;
  return partition_segments(numels, partition_flat(total, world_size), rank);
}

int64_t whole_param_partition_numel(const std::vector<int64_t>& numels, int world_size, int rank) {
  int64_t whole = 0;
  for (const ParamSegment& s : whole_model_segments(numels, world_size, rank)) whole += numels[s.param];
  return whole;
}

int64_t whole_param_overhang_numel(const std::vector<std::vector<int64_t>>& layers, int world_size, int rank) {
  std::vector<int64_t> numels;
  int64_t owned = 0;
  for (const auto& l : layers) {
    numels.insert(numels.end(), l.begin(), l.end());
    int64_t total = 0;
    for (int64_t n : l) total += n;
    owned += partition_flat(total, world_size).partition_numel;
  }
  return std::max<int64_t>(0, whole_param_partition_numel(numels, world_size, rank) - owned);
}

ShardLayout partition_params(const std::vector<int64_t>& numels, int world_size) {
  if (world_size < 1) throw std::invalid_argument("partition_params: world size < 1");
  ShardLayout l;
  for (int64_t n : numels) {
    ParamShard s;
    s.numel = n;
    s.padded_numel = round_up(std::max<int64_t>(n, 1), world_size);
    s.slice_numel = s.padded_numel / world_size;
    s.shard_offset = l.shard_numel;
    s.full_offset = l.full_numel;
    l.shard_numel += s.slice_numel;
    l.full_numel += s.padded_numel;
    l.params.push_back(s);
  }
  return l;
}

std::vector<Bucket> make_buckets(const std::vector<int64_t>& slices, int64_t bucket_numel, int world_size) {
  // Per-rank capacity of a bucket; at least one element so progress is guaranteed.
  const int64_t cap = std::max<int64_t>(1, bucket_numel / world_size);
  std::vector<Bucket> out;
  Bucket cur;
  for (size_t u = 0; u < slices.size(); ++u) {
    int64_t off = 0;
    while (off < slices[u]) {
      const int64_t take = std::min(slices[u] - off, cap - cur.numel_per_rank);
      cur.pieces.push_back({static_cast<int>(u), off, take});
      cur.numel_per_rank += take;
      off += take;
      if (cur.numel_per_rank == cap) {
        out.push_back(std::move(cur));
        cur = Bucket();
      }
    }
  }
  if (cur.numel_per_rank > 0) out.push_back(std::move(cur));
  return out;
}

}  // namespace zrepro

namespace zrepro {

bool reused_within(const std::vector<int>& trace, size_t from, int group, const std::vector<int64_t>& numels,
                   int64_t max_reuse_distance) {
  int64_t traversed = 0;
  for (size_t k = from; k < trace.size(); ++k) {
    if (traversed >= max_reuse_distance) break;
    if (trace[k] == group) return true;
    traversed += numels[trace[k]];
  }
  return false;
}

}  // namespace zrepro
