// ParamGroup: the unit ZeRO shards, one per model layer (FSDP2-style). It owns
// this rank's storage of the layer's parameters for the configured stage:
//   stage 0-2: the full 16-bit flat buffer (padded to 2 x world size), with this
//              rank's partition [r*P, (r+1)*P) being what it updates;
//   stage 3:   only its 1/ws shard; the gathered ("full") buffers exist between
//              unshard() and reshard(). Parameters under the persistence threshold
//              live in a second full buffer that stays gathered.
// Parameters are handed to compute as views of the full buffers. Range maps
// come from zero/partition.h and are computed once.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "offload/copy_engine.h"
#include "zero/comm/communicator.h"
#include "zero/partition.h"

namespace zrepro {

struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel() const;
};

struct ShardingConfig {
  int stage = 0;
  int rank = 0, world_size = 1;
  torch::ScalarType dtype = torch::kFloat;  // 16-bit (or fp32) parameter storage
  torch::Device device = torch::kCPU;
  int64_t persistence_threshold = 0;        // stage 3: params below stay gathered
  // offload_param (stage 3): the shard lives in host memory and goes up through
  // this copy engine before each gather.
  CopyEngine* host_shard = nullptr;
  bool host_pinned = true;
};

class ParamGroup {
 public:
  ParamGroup(int index, std::string name, std::vector<ParamSpec> specs, const ShardingConfig& cfg);

  int index() const { return index_; }
  const std::string& name() const { return name_; }
  const std::vector<ParamSpec>& specs() const { return specs_; }
  int64_t numel() const { return numel_; }  // unpadded parameter count
  const ShardingConfig& config() const { return cfg_; }

  // Takes this rank's part of the layer's initial values (fp32, params back to back).
  void load(const torch::Tensor& values_fp32);

  // Fresh views of the full parameters for compute; valid while unsharded (always
  // for stages 0-2).
  std::vector<torch::Tensor> params() const;

  // --- stage 3: gather / release (start-wait pairs so gathers can overlap compute).
  // With a host shard, start brings the shard up (async) and the gathers are issued
  // by wait, once it arrived: prefetching then overlaps the host-to-device copy.
  bool unsharded() const { return gathered_; }
  void unshard_start(Communicator& comm);  // also refreshes stale persistent params
  void unshard_wait();
  bool host_shard() const { return cfg_.host_shard != nullptr; }
  bool uploading() const { return upload_ != nullptr; }  // host shard on its way up
  void reshard();                          // frees the dynamic full buffer
  int64_t dynamic_numel() const;           // elements freed by reshard (padded)
  void mark_persistent_stale() { persistent_stale_ = true; }

  // --- gradients in the full layout (padded); this rank's rank-major slice layout
  // is partition (stages 0-2) or per-parameter slices (stage 3).
  int64_t full_grad_numel() const;
  // Adds per-parameter gradients into `full` (full layout) at their offsets.
  void scatter_param_grads(const std::vector<torch::Tensor>& grads, torch::Tensor& full) const;
  // Writes elements [begin, begin + dst.numel()) of the full-layout gradient made of
  // `grads` into dst (zeros for padding), without materialising the full layout.
  void copy_grad_range(const std::vector<torch::Tensor>& grads, int64_t begin, torch::Tensor dst) const;
  // Gradient units for bucketing: (offset of rank 0's slice in the full layout,
  // slice length, offset in this rank's owned gradient).
  struct Unit {
    int64_t base, slice, owned_offset;
  };
  const std::vector<Unit>& units() const { return units_; }

  // --- what this rank owns and updates
  torch::Tensor owned_params();  // 16-bit view: partition (0-2: whole flat for stage 0) or shard
  int64_t owned_numel() const;
  // Stages 0-2: this rank's partition range [begin, begin + numel) of the flat.
  const FlatPartition& flat_partition() const { return flat_; }

  // Stage 1/2: all-gather the updated partitions back into the full buffer.
  WorkPtr gather_partitions(Communicator& comm);

  // Persistent device bytes this rank keeps for parameters (full flat, or shard +
  // persistent full; a host shard is not device memory).
  int64_t param_bytes() const;
  int64_t host_bytes() const;  // the host shard under offload_param

 private:
  int64_t grad_offset(size_t i) const;  // parameter i in the full gradient layout
  void free_storage(torch::Tensor& t);
  void alloc_storage(torch::Tensor& t);
  void submit_gathers(Communicator& comm, const torch::Tensor& shard, bool dyn, bool per);

  int index_;
  std::string name_;
  std::vector<ParamSpec> specs_;
  ShardingConfig cfg_;
  int64_t numel_ = 0;
  std::vector<int64_t> offsets_;  // natural offsets (stages 0-2)
  FlatPartition flat_;
  ShardLayout layout_;            // stage 3
  std::vector<bool> persistent_;  // stage 3
  std::vector<int64_t> full_offsets_;  // stage 3: offset of each padded param in its buffer
  std::vector<Unit> units_;

  torch::Tensor flat_tensor_;  // stages 0-2: full flat; stage 3: dynamic full buffer
  torch::Tensor persist_;  // stage 3: persistent full buffer
  torch::Tensor shard_;    // stage 3
  bool gathered_ = true;
  bool persistent_stale_ = true;
  std::vector<WorkPtr> pending_;
  // host shard: the upload in flight, its device copy and the gathers it will feed
  CopyEventPtr upload_;
  torch::Tensor device_shard_;
  Communicator* upload_comm_ = nullptr;
  bool upload_dyn_ = false, upload_per_ = false;
};

}  // namespace zrepro
