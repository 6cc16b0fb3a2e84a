// ZeroEngine: DeepSpeed's ZeRO stages 0-3 over ParamGroups and one Communicator.
//   stage 0: full params, grads and optimizer states; all-reduce at the boundary.
//   stage 1: optimizer states partitioned; full grads accumulate locally and are
//            reduce-scattered at the boundary; updated partitions all-gathered.
//   stage 2: + gradients reduce-scattered every micro-step into the partition.
//   stage 3: + parameters sharded; each layer gathered before its forward and
//            backward, released per DeepSpeed's reuse-distance rule, prefetched
//            along the trace recorded in the first step.
// The model asks for a layer's parameters with acquire() and hands the layer's
// output to after_forward(); a custom autograd function delivers the layer's
// gradients in one piece (reduce_grad) and a hook on the output re-gathers the
// layer before its backward. The boundary step does loss / norm / overflow in
// one all-reduce, unscale + clip, Adam on the owned shard, write-back.
#pragma once
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "offload/copy_engine.h"
#include "offload/cpu_adam.h"
#include "offload/optimizer_offload.h"
#include "zero/comm/communicator.h"
#include "zero/gather_schedule.h"
#include "zero/grad_reducer.h"
#include "zero/loss_scaler.h"
#include "zero/lr_schedule.h"
#include "zero/param_group.h"
#include "zero/zero_config.h"

namespace zrepro {

struct EngineConfig {
  Precision precision = Precision::fp32;
  ZeroConfig zero;
  OptimizerConfig optimizer;
  SchedulerConfig scheduler;
  LossScaleConfig loss_scale;
  bool bf16_check_grad_overflow = true;
  double gradient_clipping = 1.0;
  torch::ScalarType comm_dtype = torch::kFloat;
  torch::Device device = torch::kCPU;
  // Offload (zero.offload_optimizer / offload_param): the copy engine's host-link
  // model and a fault injection for the gradient-accumulation boundary.
  double host_link_gbps = 0;
  double pageable_ratio = 0.5;
  bool drop_accumulated_grads = false;
};

struct LayerSpec {
  std::string name;
  std::vector<ParamSpec> params;
};

struct StepResult {
  double loss = 0;            // mean over the global batch
  bool skipped = false;       // overflow: no update
  double grad_norm = 0;       // global L2 norm of the unscaled gradients (NaN if skipped)
  double loss_scale = 1;      // scale the step's gradients were computed with
  double lr = 0;
  LossScaler::Event scale_event;
};

// Bytes of persistent storage this rank's engine owns, by DESIGN.md category (the
// tracking allocator measures the same categories; transient buffers only there).
struct EngineMemory {
  int64_t params = 0, grads = 0, optimizer_states = 0;
  int64_t host_pinned = 0, host_pageable = 0;  // offload buffers in host memory
};

class ZeroEngine {
 public:
  // init: each layer's initial values (fp32, params back to back), identical on all ranks.
  ZeroEngine(const std::vector<LayerSpec>& layers, const std::vector<torch::Tensor>& init, const EngineConfig& cfg,
             Communicator& comm);
  ~ZeroEngine();

  // --- model side
  std::vector<torch::Tensor> acquire(int layer);
  torch::Tensor after_forward(int layer, torch::Tensor output);

  // --- loop side
  void begin_micro_step(int64_t step, int64_t micro_step);
  void end_backward();  // flushes gradient buckets of this micro-step
  // At the accumulation boundary. local_loss: this rank's mean loss over its micro-steps.
  StepResult step(double local_loss);
  double loss_scale() const { return scaler_.scale(); }
  // Fault injection: +inf into this rank's accumulated gradients (drives the scaler).
  void inject_inf_grad();

  int zero_stage() const { return cfg_.zero.stage; }
  // The copy engine of offload (null without offload).
  const CopyEngine* copier() const { return copier_.get(); }
  EngineMemory memory() const;
  Communicator& comm() { return comm_; }
  std::vector<ParamGroup*> groups();
  // Full fp32 values of a layer (gathered across ranks); for checks and tests.
  torch::Tensor gather_layer(int layer);
  // FNV-1a hash of this rank's full 16-bit parameters (stages 0-2, where every rank
  // holds them): equal on all ranks exactly when the replicas are bit-identical.
  int64_t replica_fingerprint();

  // Called by the autograd function with a layer's parameter gradients.
  void reduce_grad(int layer, const std::vector<torch::Tensor>& grads);
  void pre_backward(int layer);

 private:
  void fetch(int layer);
  void release(int layer);

  EngineConfig cfg_;
  Communicator& comm_;
  std::vector<std::unique_ptr<ParamGroup>> groups_;
  std::vector<torch::Tensor> dummies_;     // one leaf per layer that carries the autograd function
  std::vector<torch::Tensor> full_grads_;  // stage 0/1: persistent, full layout
  std::vector<torch::Tensor> owned_grads_;  // stage 1 (boundary) / 2 / 3: this rank's gradient shard
  std::unique_ptr<GradReducer> reducer_;
  struct State {
    torch::Tensor master, exp_avg, exp_avg_sq;
  };
  std::vector<State> states_;
  LossScaler scaler_;
  LrSchedule schedule_;
  int64_t adam_steps_ = 0;
  std::unique_ptr<GatherSchedule> schedule3_;  // stage 3: gather / prefetch / release decisions
  // Offload: device<->host copies, the host optimizer, which layers it holds.
  std::unique_ptr<CopyEngine> copier_;
  std::unique_ptr<OptimizerOffload> host_opt_;
  std::vector<bool> offloaded_;
};

}  // namespace zrepro
