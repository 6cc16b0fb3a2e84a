// LayerLayout: the size table of one layer (one ParamGroup) for a stage policy and
// world size, computed once from its parameters' sizes. It is the one source of the
// layer's element counts: ParamGroup allocates its buffers from it, GradReducer takes
// its gradient units from it, and the planner sums bytes from it (llm.c's
// fill_in_parameter_sizes: one table serves bytes and allocation).
//
// [Note: padding] All padding is decided here and in zero/schedule/partition.h:
// stages 0-2 pad the layer's flat buffer to a multiple of 2 x world size
// (DeepSpeed's alignment), stage 3 pads each parameter to a multiple of the world
// size. Nothing else rounds sizes.
#pragma once
#include <cstdint>
#include <vector>

#include "zero/schedule/partition.h"
#include "zero/schedule/stage_policy.h"

namespace zrepro {

// A piece of the gradient with one equal slice per rank: a stage 1/2 partition or a
// stage 3 parameter slice. base: where rank 0's slice starts in the full gradient
// layout; owned_offset: where this rank's slice sits in its owned gradient.
struct GradUnit {
  int64_t base, slice, owned_offset;
};

struct LayerLayout {
  StagePolicy policy;
  std::vector<int64_t> param_numels;
  int64_t numel = 0;                    // unpadded parameter count
  std::vector<int64_t> natural_offsets; // parameters back to back (the init values' layout)
  FlatPartition flat;                   // stages 0-2
  ShardLayout shard;                    // stage 3
  std::vector<bool> persistent;         // stage 3: under the persistence threshold, kept gathered
  std::vector<int64_t> gathered_offsets;  // stage 3: offset of each padded parameter in its gathered buffer
  // Stage 3 on one rank with the shard on the device: the shard is the gathered
  // layer (DeepSpeed points each parameter at its partition and gathers nothing),
  // so there are no gathered buffers and gathered_offsets index the shard.
  bool shard_is_gathered = false;
  int64_t dynamic_numel = 0;            // stage 3: gathered buffer freed by reshard
  int64_t persist_numel = 0;            // stage 3: gathered buffer of the persistent parameters
  std::vector<GradUnit> units;

  // Persistent parameter storage in 16-bit (or fp32) elements: the padded flat
  // (stages 0-2) or this rank's shard (stage 3; persistent parameters separately).
  int64_t param_numel() const { return policy.shard_params() ? shard.shard_numel : flat.padded_numel; }
  // The full (padded) gradient layout: persistent in stages 0-1, bucket source in 2-3.
  int64_t full_grad_numel() const { return policy.shard_params() ? shard.full_numel : flat.padded_numel; }
  // What this rank updates (and so its optimizer states and owned gradient).
  int64_t owned_numel() const {
    return policy.shard_params() ? shard.shard_numel : policy.owns_whole_flat() ? flat.padded_numel : flat.partition_numel;
  }
  // Where parameter i's gradient starts in the full gradient layout.
  int64_t grad_offset(size_t i) const {
    return policy.shard_params() ? shard.params[i].full_offset : natural_offsets[i];
  }
  // Device elements of parameters allocated with the group: the flat or the shard; a
  // host shard (offload_param) is not on the device.
  int64_t resident_param_numel(bool host_shard) const {
    return policy.shard_params() && host_shard ? 0 : param_numel();
  }
  // The pieces of `rank`'s owned gradient that DeepSpeed takes one norm of each, in order
  // ([Note: the gradient norm's fp64 copies]): each parameter's part of the layer's
  // partition (stages 1-2) or its slice (stage 3); none at stage 0 (one norm of the share).
  std::vector<int64_t> norm_pieces(int rank) const;
  // All persistent device parameter elements: the resident ones and, once first
  // gathered, the persistent gathered buffer.
  int64_t param_device_numel(bool host_shard) const { return resident_param_numel(host_shard) + persist_numel; }
  // Device gradient storage while it exists: the full layout (stages 0-1) or the owned
  // part (2-3); a layer whose optimizer is offloaded accumulates its part on the host.
  int64_t grad_storage_numel(bool offloaded) const {
    if (policy.full_grads()) return full_grad_numel();
    return offloaded ? 0 : owned_numel();
  }
};

// Stage 3: a parameter under stage3_param_persistence_threshold stays whole on every rank
// and is never gathered per use (the one place the rule is written).
inline bool persistent_param(int64_t numel, int64_t persistence_threshold) { return numel < persistence_threshold; }

// host_shard: offload_param keeps the shard in host memory (so even one rank gathers
// into device buffers).
LayerLayout layer_layout(const std::vector<int64_t>& param_numels, const StagePolicy& policy, int world_size,
                         int64_t persistence_threshold, bool host_shard = false);

// Stage 2 (gradients partitioned, parameters whole): the gradient elements
// DeepSpeed holds on `rank` beyond the rank's per-layer owned gradients ([Note:
// DeepSpeed's whole-parameter gradient partition] in partition.h); 0 at the other
// stages (stage 1 holds the full gradient anyway, stage 3 partitions per parameter).
int64_t grad_overhang_numel(const std::vector<const LayerLayout*>& layers, int world_size, int rank);

// [Note: the gradient norm's fp64 copies] DeepSpeed 0.19.8's ZeRO optimizers take the
// gradient norm one parameter at a time, each in fp64 whatever the gradient's dtype:
// stage_1_and_2.py:2684 get_grad_norm_direct (vector_norm of g.to(get_norm_dtype()) for each
// parameter's part of the rank's partition, averaged_gradients) and stage3.py:2457 (each
// parameter's gradient partition); get_norm_dtype (zero/utils.py:59) is fp64 on every
// accelerator that has it (CUDA and the CPU). So the step holds one fp64 copy of one
// gradient piece at a time, before the flat fp32 copy of the update: 8 bytes per element of
// the largest piece. Older releases did the same with .double(). Measured: the CPU
// record's two-rank fp32 ZeRO-2 step (gpt2-fp32-z2-gas2-ranks2 rank 0, whose partition holds
// the whole 38.6M-element embedding: -3.3% without it). Stage 0 is not a ZeRO optimizer:
// torch's clip_grad_norm_ path (.float(), no copy of an fp32 gradient). With the optimizer
// offloaded the norms are taken in the backward, as each gradient lands (stage_1_and_2.py
// :1871), not here. The elements of the largest piece on `rank`: over DeepSpeed's one flat
// group of all parameters at stages 1-2 (zrepro's engine takes its pieces per layer, the same
// on one rank), over the parameter slices at stage 3; 0 at stage 0.
int64_t norm_copy_numel(const std::vector<const LayerLayout*>& layers, int world_size, int rank);

// [Note: ZeRO-3 gathers every parameter to hook it] DeepSpeed 0.19.8's stage-3 optimizer
// registers each parameter's gradient hook with the parameter gathered whole
// (stage3.py:1504 create_reduce_and_remove_grad_hooks: param.all_gather(), the hook, the
// partition again), one parameter at a time, after its gradient partition and reduce
// bucket exist (stage3.py:780-791): the init peak holds the largest parameter gathered
// (padded to the world size) on top of them, and with offload_param also its partition
// copied up from the host (partition_parameters.py:2140, ds_tensor.to(device)). Measured:
// the CPU record's fp32 ZeRO-3 init (gpt2-fp32-z3-gas4: -8.4% without it). The elements
// (in the parameter dtype) of that moment; 0 at stages 0-2.
int64_t hook_gather_numel(const std::vector<const LayerLayout*>& layers, bool host_shard);

}  // namespace zrepro
