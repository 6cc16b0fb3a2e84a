// GradReducer: moves gradients from the full layout of each layer into the owned
// (partitioned) gradient buffers through reduce_bucket_size buckets, the way
// DeepSpeed's stage 1/2/3 do. It executes ReduceSchedule's decisions
// (zero/schedule/reduce_schedule.h: which bucket, which buffer, when) on tensors:
// pieces are copied into a contiguous bucket buffer (rank-major), a full bucket is
// pre-divided by the world size and reduce-scattered, and the result is added to
// the owned gradients (or, under optimizer offload, sent down to the host). With
// reduce_scatter false a bucket is all-reduced instead and each rank keeps its slice
// (DeepSpeed's fallback; twice the bytes on the wire). Buffer count and size come
// from BufferPolicy (see [Note: one buffer policy for run and plan]).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "offload/copy_engine.h"
#include "zero/comm/communicator.h"
#include "zero/param_group.h"
#include "zero/schedule/reduce_schedule.h"

namespace zrepro {

class GradReducer : private ReduceOps {
 public:
  struct Options {
    int64_t reduce_bucket_size = 500000000;
    bool reduce_scatter = true;
    BufferPolicy buffers;
    torch::ScalarType comm_dtype = torch::kFloat;
    torch::Device device = torch::kCPU;
    // Optimizer offload: reduced pieces of the groups `offloaded` accepts go to
    // `sink` (down to the host) instead of into the owned device gradient; a bucket
    // buffer is refilled only after the copies of its previous bucket completed.
    std::function<bool(int group)> offloaded;
    std::function<CopyEventPtr(int group, int64_t owned_offset, const torch::Tensor& piece)> sink;
    CopyEngine* copier = nullptr;
    // Stood-in peers (zero/peer_shadow.h): every rank's reduced piece of group `group` at
    // owned_offset, [world, numel], on the comm stream as the bucket's reduce completes.
    std::function<void(int group, int64_t owned_offset, const torch::Tensor& rows)> peer_pieces;
    // Called before a bucket's result is added into the owned gradients: DeepSpeed's
    // stage 2 allocates its gradient partition at the step's first bucket reduction
    // (copy_grads_in_partition), not at the first gradient ([Note: DeepSpeed's
    // optimizer-state and gradient lifetimes], zero/schedule/step_schedule.h).
    std::function<void()> before_result;
  };
  // groups: in the order their gradients become ready (reverse layer order).
  GradReducer(std::vector<ParamGroup*> groups, const Options& options, Communicator& comm);

  // Adds group g's gradient; launches every bucket it completes. The gradient is
  // either a full-layout tensor (stage 1's accumulated buffer) or the layer's
  // per-parameter gradients, copied straight into the bucket (stages 2 and 3).
  // owned: each group's owned gradient buffer, indexed by group index.
  void add(int group_index, const torch::Tensor& full_grad, std::vector<torch::Tensor>& owned);
  void add(const ParamGroup& group, const std::vector<torch::Tensor>& grads, std::vector<torch::Tensor>& owned);
  // Allocates the bucket buffers now if they are not (BufferPolicy::reduce_buffers_at_first_grad).
  void open() { schedule_.open(*this); }
  // Waits for all launched buckets and accumulates their results; frees buffers.
  void finish(std::vector<torch::Tensor>& owned);

  const ReduceSchedule& schedule() const { return schedule_; }
  int64_t buffer_numel() const { return schedule_.buffer_numel(); }

 private:
  // ReduceOps: the schedule's decisions on tensors.
  void allocate_buffers(int count, int64_t numel) override;
  void reuse_buffer(int buffer) override;
  void fill(int bucket, int buffer, int group) override;
  void launch(int bucket, int buffer) override;
  void complete(int bucket, int buffer) override;
  void end(bool free_buffers) override;
  // peer_pieces: every rank's reduced pieces of bucket b (in: the reduced bucket), on the
  // comm stream as the reduce completes.
  void give_peers(int b, const torch::Tensor& in);

  Communicator& comm_;
  Options o_;
  ReduceSchedule schedule_;
  std::vector<torch::Tensor> buffers_;
  std::vector<std::vector<CopyEventPtr>> buffer_reads_;  // offload copies still reading each buffer
  struct Launched {
    torch::Tensor out;
    WorkPtr work;
  };
  std::vector<Launched> launched_;  // per bucket, while in flight
  // The current add's source: fill(begin, stride, dst) writes into row k of dst ([ranks, m])
  // the full-layout elements [begin + k * stride, + m).
  std::function<void(int64_t, int64_t, torch::Tensor)> fill_;
  std::vector<torch::Tensor>* owned_ = nullptr;
};

}  // namespace zrepro
