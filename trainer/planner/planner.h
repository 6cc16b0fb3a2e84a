// The memory planner behind `zrepro plan`: predicts, without training, the device
// bytes per rank of a run by executing the engine's own schedules (zero/schedule/:
// layer size tables, the stage-3 lifecycle and gather schedule, the gradient
// buckets, the buffer policy) on byte counts, with the model's activation tapes
// (gpt_memory.h) between the engine calls and the optimizer step's temporaries
// (docs/design/ARCHITECTURE.md, "How plan and run share the schedule"). The peak of that timeline, its phase, the
// category breakdown there, and the first point where it passes the capacity are
// the prediction. DeepSpeed's own estimator figures (model states only) come
// alongside, so users see what they leave out.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "device/device_memory.h"
#include "trainer/config/job_spec.h"

namespace zrepro {

using CategoryBytes = std::array<int64_t, kNumMemCategories>;

struct PhasePeak {
  Phase phase = Phase::init;
  int64_t peak = 0;
  CategoryBytes by_category{};  // at this phase's peak
};

// One of DeepSpeed's estimate_zero{2,3}_model_states_mem_needs settings.
struct DeepSpeedEstimate {
  std::string setting;  // e.g. "zero3, offload_optimizer=none, offload_param=none"
  int64_t gpu_bytes = 0, cpu_bytes = 0;
  std::string formula;
};

struct MemoryPlan {
  int world_size = 1, zero_stage = 0;
  int64_t capacity = 0;
  int64_t peak_bytes = 0;
  Phase peak_phase = Phase::init;
  CategoryBytes by_category{};      // at the peak
  CategoryBytes category_peaks{};   // each category's own maximum
  std::vector<PhasePeak> phases;    // each phase's peak, in run order
  CategoryBytes model_states{};     // persistent params / grads / optimizer_states
  int64_t host_bytes = 0;           // host memory the run keeps (cpu checkpoints)
  // What one block's forward adds to the activations per micro-batch (its saved tensors:
  // its forward and what follows it before the next block), and where the activation
  // model came from.
  int64_t block_saved_bytes = 0;
  std::string activation_source;
  // Checkpoints' host memory (JobSpec::saves_checkpoints), beside the device plan:
  // rank 0's whole 16-bit model at a save (ZeRO-3 with stage3_gather_16bit_weights_on_model_save,
  // else 0: [Note: the 16-bit consolidation at save]), and what DeepSpeed's zero_to_fp32 holds
  // consolidating the checkpoint offline ([Note: zero_to_fp32's host memory],
  // trainer/checkpoint/zero_to_fp32.h): the anonymous bytes of the API (the whole fp32 model)
  // and of the script at its default 5GB shards (the whole model at stages 1-2; the largest
  // shard at stage 3), beside the fp32 partitions it maps (file-backed); plus the
  // interpreter's ~550 MB.
  int64_t save_16bit_host_bytes = 0;
  int64_t zero_to_fp32_api_bytes = 0, zero_to_fp32_script_bytes = 0, zero_to_fp32_mapped_bytes = 0;
  int64_t host_pinned_bytes = 0, host_pageable_bytes = 0;  // offload buffers
  // The memlock preflight `zrepro run` does on the CPU-emulated device (mlock pinning),
  // against this machine's limit: pinned_fits false = the run fails at init.
  bool pinned_fits = true;
  int64_t memlock_available = -1;  // bytes this process may still lock (-1: unlimited or not checked)
  int64_t memlock_limit = -1;      // ulimit -l in bytes (-1: unlimited)
  // The verdict, on what the job's allocator binds on ([Note: the capacity binds where
  // PyTorch's OOM does], trainer/config/job_spec.h): allocated_fits, and reserved_fits too
  // where binds_on_reserved.
  bool fits = true;
  bool allocated_fits = true;       // the allocated bytes stay within the capacity
  bool binds_on_reserved = false;
  Phase oom_phase = Phase::init;    // valid when !fits: the phase of the first allocation that fails
  int64_t oom_request = 0;          // that allocation
  CategoryBytes at_oom{};           // allocated by category just before it
  std::vector<DeepSpeedEstimate> deepspeed;
  std::string not_planned;          // what a run may allocate that this plan leaves out, or empty
  // [Note: the plan through the caching allocator] The same allocations replayed through
  // the caching-allocator emulation (device/caching_pool.h, PyTorch's default on CUDA):
  // the reserved peak, and the cache flushes (num_alloc_retries) of the second, steady
  // step; with a capacity, reserved_fits false when a segment would not fit even after
  // flushing (the caching allocator's OOM, which can come before the allocated bytes
  // reach the capacity).
  int64_t reserved_peak_bytes = 0;
  int64_t alloc_retries_per_step = 0;
  bool reserved_fits = true;
  // The same replay with no capacity: the reserved peak a GPU with room to spare reaches
  // (torch.cuda.max_memory_reserved; what the GPU record compares, and where the measured
  // band puts real DeepSpeed's reserved peak). Equal to reserved_peak_bytes without a capacity.
  int64_t unbounded_reserved_peak_bytes = 0;

  nlohmann::json to_json() const;
};

MemoryPlan plan_memory(const JobSpec& req);

// The rank a plan without a rank is the plan of, and `run --as-rank most`: the one that
// holds the most. Ranks differ only by DeepSpeed's whole-parameter gradient partition
// (stage 2's overhang, and the offloaded accumulator's at stages 1-2), so it is the rank
// whose overhang is largest, the lowest of equals (rank 0 where every rank holds the same).
// Where the peak comes before stage 2's partition exists (it is allocated at the first
// bucket's result) every rank peaks alike, and this one holds the largest model states.
int rank_holding_most(const JobSpec& job);

// DeepSpeed 0.19.6 estimators (estimate_zero2/3_model_states_mem_needs), largest_layer = the largest
// layer's parameter count, gpus = world size on one node.
// DeepSpeed's estimate_zero2/zero3_model_states_mem_needs (zero_init true, buffer
// factor 1.5) for a cluster of nodes x gpus_per_node: the GPU column depends on the
// total, the CPU column on the GPUs per node or the node count.
std::vector<DeepSpeedEstimate> deepspeed_estimates(int64_t params, int64_t largest_module, int gpus_per_node, int nodes,
                                                   int zero_stage);

// Human table: phases, categories at the peak, verdict, DeepSpeed's figures.
std::string format_plan(const MemoryPlan& plan, const JobSpec& req);

}  // namespace zrepro
