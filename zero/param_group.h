// ParamGroup: the unit ZeRO shards, one per model layer (FSDP2-style). It owns
// this rank's storage of the layer's parameters under the stage policy:
//   replicated parameters (stages 0-2): the full 16-bit flat buffer (padded to
//       2 x world size), with this rank's partition [r*P, (r+1)*P) being what it
//       updates (stage 0: all of it);
//   sharded parameters (stage 3): only its 1/ws shard; the gathered ("full")
//       buffers exist between unshard and reshard. Parameters under the persistence
//       threshold live in a second full buffer that stays gathered.
// Sizes come from its LayerLayout (zero/schedule/layer_layout.h), the stage-3 state
// from its ShardLifecycle (zero/schedule/shard_state.h, [Note: stage-3 lifecycle]):
// ParamGroup executes their decisions on tensors. Parameters are handed to compute
// as views of the full buffers.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "offload/copy_engine.h"
#include "zero/comm/communicator.h"
#include "zero/schedule/layer_layout.h"
#include "zero/schedule/param_spec.h"
#include "zero/schedule/shard_state.h"

namespace zrepro {

struct ShardingConfig {
  StagePolicy policy;
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
  int64_t numel() const { return layout_.numel; }  // unpadded parameter count
  const ShardingConfig& config() const { return cfg_; }
  const LayerLayout& layout() const { return layout_; }
  ShardState state() const { return life_.state(); }

  // Takes this rank's part of the layer's initial values (fp32, params back to back).
  void load(const torch::Tensor& values_fp32);

  // Fresh views of the full parameters for compute; valid while gathered (always
  // for replicated parameters).
  std::vector<torch::Tensor> params() const;

  // --- sharded parameters: gather / release (start-wait pairs so gathers can overlap
  // compute). With a host shard, start brings the shard up (async) and the gathers
  // are issued by wait, once it arrived: prefetching then overlaps the upload.
  void unshard_start(Communicator& comm);  // also refreshes stale persistent params
  void unshard_wait();
  void reshard();                          // frees the dynamic full buffer
  bool host_shard() const { return life_.host_shard(); }
  bool uploading() const { return life_.uploading(); }  // host shard on its way up
  void mark_persistent_stale() { life_.mark_stale(); }

  // --- gradients in the full layout (padded); units for bucketing come from the layout.
  // Adds per-parameter gradients into `full` (full layout) at their offsets.
  void scatter_param_grads(const std::vector<torch::Tensor>& grads, torch::Tensor& full) const;
  // Writes elements [begin, begin + dst.numel()) of the full-layout gradient made of
  // `grads` into dst (zeros for padding), without materialising the full layout.
  void copy_grad_range(const std::vector<torch::Tensor>& grads, int64_t begin, torch::Tensor dst) const;
  // The same for rows: row k of dst ([rows, m]) gets the m elements from begin + k * stride
  // (every rank's slice of a bucket piece at once: one strided copy per parameter, not one
  // call per rank, so a bucket of N ranks costs O(its elements), not O(N) calls).
  void copy_grad_rows(const std::vector<torch::Tensor>& grads, int64_t begin, int64_t stride, torch::Tensor dst) const;

  // --- what this rank owns and updates
  torch::Tensor owned_params();  // 16-bit view: whole flat (stage 0), partition (1-2) or shard (3)
  int64_t owned_numel() const { return layout_.owned_numel(); }
  // Replicated parameters: this rank's partition range of the flat.
  const FlatPartition& flat_partition() const { return layout_.flat; }

  // What this group's all-gathers send slices of, laid out as owned_params(): the shard
  // (or its device copy while an offloaded shard is up), or this rank's partition.
  torch::Tensor gather_source() const;

  // Stages 1-2: all-gather the updated partitions back into the full buffer.
  WorkPtr gather_partitions(Communicator& comm);

  // Persistent device bytes this rank keeps for parameters (full flat, or shard +
  // persistent full; a host shard is not device memory).
  int64_t param_bytes() const;
  int64_t host_bytes() const;  // the host shard under offload_param

 private:
  void free_storage(torch::Tensor& t);
  void alloc_storage(torch::Tensor& t);
  void submit_gathers(Communicator& comm, const torch::Tensor& shard, bool dyn, bool per);

  int index_;
  std::string name_;
  std::vector<ParamSpec> specs_;
  ShardingConfig cfg_;
  LayerLayout layout_;
  ShardLifecycle life_;

  torch::Tensor flat_tensor_;  // replicated: full flat; sharded: dynamic gathered buffer
  torch::Tensor persist_;      // sharded: persistent gathered buffer
  torch::Tensor shard_;        // sharded
  std::vector<WorkPtr> pending_;
  // host shard: the upload in flight, its device copy, the communicator of its gathers
  CopyEventPtr upload_;
  torch::Tensor device_shard_;
  Communicator* upload_comm_ = nullptr;
};

}  // namespace zrepro
