// GradReducer: moves gradients from the full layout of each layer into the
// owned (partitioned) gradient buffers through reduce_bucket_size buckets, the
// way DeepSpeed's stage 1/2/3 do: pieces are copied into a contiguous bucket
// buffer (rank-major), a full bucket is pre-divided by the world size and
// reduce-scattered, and the result is added to the owned gradients. With
// overlap_comm two bucket buffers alternate so one reduces while the next fills.
// With reduce_scatter false a bucket is all-reduced instead and each rank keeps
// its slice (DeepSpeed's fallback; twice the bytes on the wire).
// Buffers: with contiguous_gradients DeepSpeed allocates full reduce_bucket_size
// buffers whatever the model size (stage 1/2 at the start of backward, stage 3 once
// for the run), which is why a small model can use more memory under ZeRO than
// without it; otherwise each buffer is as large as the largest bucket needs.
#pragma once
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "offload/copy_engine.h"
#include "zero/comm/communicator.h"
#include "zero/param_group.h"

namespace zrepro {

class GradReducer {
 public:
  // groups: in the order their gradients become ready (reverse layer order).
  // owned: each group's owned gradient buffer, indexed by group index.
  struct Options {
    int64_t reduce_bucket_size = 500000000;
    bool overlap_comm = false, reduce_scatter = true, contiguous_gradients = true;
    bool persistent_buffers = false;  // stage 3: allocated once, kept for the run
    torch::ScalarType comm_dtype = torch::kFloat;
    torch::Device device = torch::kCPU;
    // Optimizer offload: reduced pieces of the groups `offloaded` accepts go to
    // `sink` (down to the host) instead of into the owned device gradient; a bucket
    // buffer is refilled only after the copies of its previous bucket completed.
    std::function<bool(int group)> offloaded;
    std::function<CopyEventPtr(int group, int64_t owned_offset, const torch::Tensor& piece)> sink;
    CopyEngine* copier = nullptr;
  };
  GradReducer(std::vector<ParamGroup*> groups, const Options& options, Communicator& comm);

  // Adds group g's gradient; launches every bucket it completes. The gradient is
  // either a full-layout tensor (stage 1's accumulated buffer) or the layer's
  // per-parameter gradients, copied straight into the bucket (stages 2 and 3).
  void add(int group_index, const torch::Tensor& full_grad, std::vector<torch::Tensor>& owned);
  void add(const ParamGroup& group, const std::vector<torch::Tensor>& grads, std::vector<torch::Tensor>& owned);
  // Waits for all launched buckets and accumulates their results; frees buffers.
  void finish(std::vector<torch::Tensor>& owned);


 private:
  struct Unit {
    int group;
    ParamGroup::Unit u;
  };
  struct InFlight {
    int bucket, buffer;
    torch::Tensor out;
    WorkPtr work;
  };
  void launch(int b, std::vector<torch::Tensor>& owned);
  void complete_one(std::vector<torch::Tensor>& owned);
  void allocate_buffers();
  // fill(unit base offset + rank slice offset, destination) writes one piece.
  void add_pieces(int g, const std::function<void(int64_t, torch::Tensor)>& fill, std::vector<torch::Tensor>& owned);

  Communicator& comm_;
  int ws_;
  bool overlap_, reduce_scatter_, persistent_;
  torch::ScalarType dtype_;
  torch::Device device_;
  int64_t buffer_numel_;
  std::vector<Unit> units_;
  std::vector<Bucket> buckets_;
  std::vector<std::vector<int>> group_buckets_;  // group index -> buckets with its pieces
  std::vector<int> remaining_;                   // pieces still to arrive, per bucket
  std::vector<int> bucket_buffer_;               // buffer a filling bucket writes to (-1: none)
  std::vector<torch::Tensor> buffers_;
  std::vector<bool> buffer_busy_;
  std::vector<std::vector<CopyEventPtr>> buffer_reads_;  // offload copies still reading each buffer
  Options o_;
  std::deque<InFlight> in_flight_;
};

}  // namespace zrepro
