// StepSchedule: when DeepSpeed's optimizer states and gradients exist, and what its
// optimizer step materialises at once, decided once from the stage policy, the layers'
// owned sizes, which layers are offloaded and sub_group_size. ZeroEngine allocates and
// frees by it and the planner adds and subtracts the same bytes (as BufferPolicy and
// the gather/reduce schedules are shared: [Note: one buffer policy for run and plan]).
//
// [Note: DeepSpeed's optimizer-state and gradient lifetimes]
// Read in DeepSpeed 0.19.8 (runtime/zero/stage_1_and_2.py, stage3.py) and measured on an
// H200 with Hugging Face's models (docs/lab/GPU.md: after init a bf16 ZeRO-1/2 job holds
// 6 bytes per parameter, the init peak is 10, the steady step peak 22):
// - Adam's moments are created lazily by the optimizer's first step() (torch's AdamW and
//   DeepSpeed's FusedAdam; stage_1_and_2.py initialize_optimizer_states, lines 934-952,
//   says so: only Adagrad builds state at construction). So init holds the 16-bit
//   parameters and the fp32 master; the moments appear in the first step.
// - initialize_optimizer_states allocates an fp32 zero gradient and drops it again
//   (no offload): at stages 1-2 one per parameter group's partition, all alive together
//   (lines 936-950); at stage 3 one buffer of the largest sub-group, viewed by every
//   sub-group (stage3.py lines 1304-1344). That is the init peak: +4 bytes per element.
// - Gradients at stages 0-2 do not live across steps: stage 2 allocates its whole
//   partition (grads_in_partition, line 2192) when the step's first reduce bucket is
//   reduced (copy_grads_in_partition: the first bucket fills after reduce_bucket_size
//   elements of gradients, half-way through GPT-2 small's backward on the CPU record;
//   until then the gradients live in the bucket itself, lines 1444-1452), stages
//   0-1 hold each parameter's .grad from its backward on (stage 1 until the end of the
//   boundary's backward, which reduces them into its partition: [Note: ZeRO-1 reduces in
//   the boundary's backward], zero/engine.cpp); the step frees them
//   (free_grad_in_param_list, averaged_gradients = None, lines 3127-3131; zero_grad).
//   Stage 3's flat gradient partition (grad_partitions_flat_buffer, stage3.py line 791)
//   is allocated at init and kept.
// - The step of stages 1-2 (stage_1_and_2.py lines 3105-3142), per parameter group:
//   flatten the 16-bit gradient partition (a copy), .to(fp32) (another; the same tensor
//   when the gradients are fp32), drop the flat copy, free the 16-bit gradients, run the
//   optimizer (the moments created in the first step), drop the fp32 gradient. Stage 3
//   does the same per sub-group of sub_group_size elements (_prepare_fp32_grad_for_sub_group,
//   lines 2683-2699; _release_sub_group), its gradient partition kept. Peak of a group
//   of S elements: S x (16-bit size + 4) on top of what is held.
// - Stage 0 has no partition to flatten: the optimizer reads each gradient as it is.
// - An offloaded group's fp32 gradient and states are on the host (none of the above
//   on the device).
#pragma once
#include <cstdint>
#include <vector>

#include "zero/schedule/stage_policy.h"

namespace zrepro {

// Layers whose owned gradients DeepSpeed's step turns into one fp32 gradient at once.
struct StepGroup {
  std::vector<int> layers;
  std::vector<int64_t> offsets;  // each layer's offset in the group's flat gradient
  int64_t numel = 0;
};

struct StepSchedule {
  std::vector<StepGroup> groups;  // empty at stage 0; offloaded layers in none
  // Elements of the fp32 zero gradient initialize_optimizer_states allocates and drops.
  int64_t init_transient_numel = 0;
  // Gradient storage outlives the step (stage 3) or is allocated at the step's first
  // reduction and freed by the step (stages 0-2).
  bool grads_persist = false;
  // The group layer l belongs to, or -1 (stage 0, offloaded).
  std::vector<int> group_of;
};

// [Note: DeepSpeed flattens the module it was handed] (zero/engine.cpp): the bytes of the
// module's 16-bit parameters that exist twice while DeepSpeed flattens them on the device
// (stages 1-2, when capacity - in_use leaves room for the flat copy beside them; capacity 0:
// unlimited), or 0.
inline int64_t module_flatten_bytes(const StagePolicy& policy, int64_t module_bytes, int64_t capacity, int64_t in_use) {
  if (!policy.gathers_updated_partitions()) return 0;
  return capacity > 0 && capacity - in_use < 2 * module_bytes ? 0 : module_bytes;
}

// owned_numels: each layer's owned elements (LayerLayout::owned_numel); offloaded: the
// layers whose optimizer is on the host.
StepSchedule step_schedule(const StagePolicy& policy, const std::vector<int64_t>& owned_numels,
                           const std::vector<bool>& offloaded, int64_t sub_group_size);

}  // namespace zrepro
