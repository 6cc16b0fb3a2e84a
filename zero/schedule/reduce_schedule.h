// ReduceSchedule: the bucketing of gradients (DeepSpeed's IPG buckets) as pure
// bookkeeping, run by GradReducer on tensors and by the planner on byte counts
// through one interface, ReduceOps: which bucket a gradient lands in, which buffer a
// bucket fills, when a bucket is launched, when a buffer is free again, when the
// buffers are allocated and freed. Sizes come from the layers' gradient units
// (zero/schedule/layer_layout.h) and BufferPolicy.
//
// [Note: bucket lifecycle] A bucket claims a free buffer when its first piece
// arrives (with every buffer busy, the oldest launched bucket is completed first);
// the buffer's previous readers (offload copies) are waited for; the pieces are
// copied in rank-major; the full bucket is launched (reduce-scatter), and with one
// buffer completed at once. All buffers are allocated together at the first claim
// (or at construction when persistent: stage 3; or when opened: stage 1 at the step's
// first gradient) and freed at the end of backward (stage 1: of its reduction) unless
// persistent.
#pragma once
#include <cstdint>
#include <deque>
#include <vector>

#include "zero/schedule/buffer_policy.h"
#include "zero/schedule/layer_layout.h"
#include "zero/schedule/partition.h"

namespace zrepro {

class ReduceOps {
 public:
  virtual ~ReduceOps() = default;
  virtual void allocate_buffers(int count, int64_t numel) = 0;
  virtual void reuse_buffer(int buffer) = 0;  // wait for what still reads its previous bucket
  virtual void fill(int bucket, int buffer, int group) = 0;  // the group's pieces of the bucket
  virtual void launch(int bucket, int buffer) = 0;
  virtual void complete(int bucket, int buffer) = 0;  // wait for the collective, hand the result on
  virtual void end(bool free_buffers) = 0;             // end of backward
};

class ReduceSchedule {
 public:
  struct Unit {
    int group;
    GradUnit u;
  };
  // groups: (group index, its layout) in the order their gradients become ready
  // (reverse layer order).
  ReduceSchedule(const std::vector<std::pair<int, const LayerLayout*>>& groups, int64_t reduce_bucket_size,
                 int world_size, const BufferPolicy& policy);

  // Persistent buffers are allocated here (call once, at construction time of the user).
  void prepare(ReduceOps& ops);
  // The buffers now, before the first bucket claims one (a no-op once allocated):
  // BufferPolicy::reduce_buffers_at_first_grad.
  void open(ReduceOps& ops);
  // Group g's gradient is ready: fill every bucket it has pieces in, launch full ones.
  void add(int group, ReduceOps& ops);
  // Completes every launched bucket; ends the backward.
  void finish(ReduceOps& ops);

  const std::vector<Bucket>& buckets() const { return buckets_; }
  const Unit& unit(int u) const { return units_[u]; }
  int64_t buffer_numel() const { return buffer_numel_; }
  int buffers() const { return nbuf_; }
  int world_size() const { return ws_; }

 private:
  void claim_buffer(int bucket, ReduceOps& ops);
  void complete_one(ReduceOps& ops);

  int ws_, nbuf_;
  bool persistent_;
  int64_t buffer_numel_ = 0;
  bool allocated_ = false;
  std::vector<Unit> units_;
  std::vector<Bucket> buckets_;
  std::vector<std::vector<int>> group_buckets_;  // group -> buckets with its pieces
  std::vector<std::vector<int>> pieces_of_;      // [bucket][group] pieces
  std::vector<int> remaining_;                   // pieces still to arrive, per bucket
  std::vector<int> bucket_buffer_;               // buffer a filling bucket writes to (-1: none)
  std::vector<bool> busy_;
  struct InFlight {
    int bucket, buffer;
  };
  std::deque<InFlight> in_flight_;
};

}  // namespace zrepro
