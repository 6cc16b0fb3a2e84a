// JobSpec: one description of the job zrepro trains or plans: the resolved DeepSpeed
// config, the model, the world, the device and the host link.
//
// [Note: one job description] `zrepro run` builds it once at set-up (run_setup.cpp),
// `zrepro plan` and doctor from their flags (plan.cpp), scale-down for the target and its
// toy (planner/scale_down.h); the same value then goes to the engine (train(), which
// derives the EngineConfig from it), the planner (plan_memory) and the fixes
// (predict_fixes, which each change one field of a copy). A setting that changes what is
// trained or what memory it takes belongs here; what only changes how one run is carried
// out (steps, seed, the communicator, injections, the trace, the loader, the stop check)
// stays in TrainOptions (trainer/loop/train.h).
#pragma once
#include <cstdint>
#include <optional>

#include "trainer/config/ds_config.h"
#include "trainer/config/model_spec.h"
#include "zero/schedule/buffer_policy.h"

namespace zrepro {

struct JobSpec {
  ModelSpec model;
  DsConfig cfg;  // resolved for world_size (batch triple, precision, zero section)
  int world_size = 1;
  // Whose bytes: DeepSpeed's stage 2 gradient partition differs by rank (zero/
  // schedule/partition.h). Unset: the rank that holds the most, which OOMs first.
  std::optional<int> rank;
  // GPUs per node, for DeepSpeed's estimator figures (0: all world_size on one node).
  int gpus_per_node = 0;

  // The device.
  bool cpu_device = true;          // the CPU-emulated device (fp16 computes in fp32 there)
  int64_t device_capacity = 0;     // 0: unlimited
  // `run --allocator caching` on the CPU-emulated device: PyTorch's caching allocator
  // emulated, as a GPU always has it (see binds_on_reserved).
  bool emulated_caching_allocator = false;
  bool activation_checkpointing = false;  // recompute each block in backward
  // Checkpoints (trainer/checkpoint/ds_checkpoint.h): the job saves DeepSpeed's
  // checkpoint (a save phase after a step) or resumes from one (a load phase before the
  // first step).
  bool saves_checkpoints = false, resumes = false;
  // The engine's buffer policy, when a run overrides it (experiments and tests; see
  // [Note: one buffer policy for run and plan] in zero/schedule/buffer_policy.h).
  std::optional<BufferPolicy> buffers;

  // The host link offload copies cross (zero.offload_optimizer / offload_param).
  double host_link_gbps = 0;  // modelled bandwidth; 0: the copies run at memcpy speed
  double pageable_ratio = 0.5;  // a pageable copy's share of the pinned bandwidth

  // [Note: the capacity binds where PyTorch's OOM does] On a GPU PyTorch's caching
  // allocator says out of memory when a request finds no room in its segments even after
  // it has flushed its cache: reserved bytes (segments, rounding, fragmentation) bind, and
  // a job can fail before its allocated bytes reach the capacity. The CPU-emulated
  // device's default accounting is exact: allocated bytes bind. The plan's verdict binds on
  // what this job's allocator binds on, and states the other beside it.
  bool binds_on_reserved() const { return !cpu_device || emulated_caching_allocator; }
};

// [Note: plan and run refuse alike] What `zrepro run` refuses in a job, `zrepro plan` refuses
// too (a plan of a job that cannot start is no answer): a micro-batch of more tokens than
// one device step can index (LibTorch indexes some kernels with 32 bits), leaf module
// classes that name no module of the model (DeepSpeed's set_z3_leaf_modules raises).
// ConfigError naming the key or flag, the value and the fix.
void check_job(const JobSpec& job);

}  // namespace zrepro
