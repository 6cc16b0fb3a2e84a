// BufferPolicy: how many transient buffers the engine keeps and how large, decided
// once from the ZeRO config and the stage policy.
//
// [Note: one buffer policy for run and plan]
// GradReducer (through ReduceSchedule) and the stage-3 fetch (GatherSchedule) size
// and count their buffers from this struct alone, and the planner executes the same
// schedules with the same struct, so a change here moves the measured and the
// planned bytes together (tests/trainer/planner/planner_test.cpp changes one field
// and checks both). A run or plan may override it (TrainOptions / PlanRequest) to
// try a policy DeepSpeed does not have.
#pragma once
#include <cstdint>

#include "zero/schedule/stage_policy.h"
#include "zero/zero_config.h"

namespace zrepro {

struct BufferPolicy {
  // Gradient bucket buffers: stages 1-2 take 2 with overlap_comm (one reduces while
  // the next fills: stage_1_and_2.py setup_buckets); stage 3 allocates one at init
  // whatever overlap_comm says (stage3.py, its IPG bucket per dtype).
  int reduce_buffers = 1;
  // contiguous_gradients: every bucket buffer is reduce_bucket_size elements whatever
  // the model size (DeepSpeed's IPG buffer); otherwise as large as the largest bucket.
  bool full_size_reduce_buffers = true;
  // Stage 3 allocates its bucket buffers once for the run; stages 1-2 at the start of
  // each backward and free them at its end.
  bool persistent_reduce_buffers = false;
  // offload_param: at most this many parameter shards on their way up at a time
  // (DeepSpeed's buffer_count parameter buffers); 0: no bound.
  int64_t max_param_uploads = 0;
  // Stage 2 with contiguous_gradients (no optimizer offload): during the backward of
  // every micro-step after the first, DeepSpeed reduces into a fresh gradient partition
  // (grads_in_partition) while the previous micro-steps' accumulated partition stays
  // alive beside it (all_grad_tensors holds views of it: the backward epilogue of
  // 0.19.8's stage_1_and_2.py, lines 1037-1059, with or without overlap_comm), so it
  // holds the rank's whole-parameter partition twice (measured: docs/design/CONFORMANCE.md
  // with overlap_comm, the CPU record's gpt2-fp32-z2-gas2 without).
  bool second_grad_partition = false;
  // Stage 1 with contiguous_gradients: DeepSpeed's gradient hook allocates the bucket
  // buffers at the step's first gradient (setup_buckets, stage_1_and_2.py:3256, called
  // from process_gradients:2287 on every gradient) and they stay until the boundary's
  // reduction frees them (_release_ipg_buffers:924, from the backward epilogue), across
  // every micro-step of the step ([Note: ZeRO-1 reduces in the boundary's backward],
  // zero/engine.cpp).
  bool reduce_buffers_at_first_grad = false;
};

inline BufferPolicy buffer_policy(const ZeroConfig& z) {
  BufferPolicy b;
  const StagePolicy policy = stage_policy(z.stage);
  b.reduce_buffers = z.overlap_comm && !policy.shard_params() ? 2 : 1;
  b.full_size_reduce_buffers = z.contiguous_gradients;
  b.persistent_reduce_buffers = policy.shard_params();
  b.max_param_uploads = z.offload_param.enabled() ? z.offload_param.buffer_count : 0;
  b.second_grad_partition = policy.shard_grads() && !policy.shard_params() && z.contiguous_gradients &&
                            !z.offload_optimizer.enabled();
  b.reduce_buffers_at_first_grad = policy.reduction() == GradReduction::reduce_scatter_at_boundary && z.contiguous_gradients;
  return b;
}

}  // namespace zrepro
