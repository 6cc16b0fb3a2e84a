// ZeroEngine: DeepSpeed's ZeRO stages 0-3 over ParamGroups and one Communicator.
// What a stage shards and when it reduces is the StagePolicy's to say
// (zero/schedule/stage_policy.h, [Note: which stage shards what]); buffer sizes and
// counts come from BufferPolicy and the schedules in zero/schedule/, which the
// planner runs too. The model asks for a layer's parameters with acquire() and hands
// the layer's output to after_forward(); a custom autograd function delivers the
// layer's gradients in one piece (reduce_grad) and a hook on the output re-gathers
// the layer before its backward. The boundary step is four parts: reduce (stages
// 0-1), gradient statistics (loss, norm and overflow in one all-reduce), the update
// (each layer's LayerOptimizer, on the device or the host), and the parameter sync
// (all-gather of updated partitions, or marking stage-3 persistent params stale).
#pragma once
#include <memory>
#include <optional>
#include <vector>

#include <torch/torch.h>

#include "device/device_memory.h"
#include "offload/copy_engine.h"
#include "offload/cpu_adam.h"
#include "offload/optimizer_offload.h"
#include "zero/comm/communicator.h"
#include "zero/grad_reducer.h"
#include "zero/layer_optimizer.h"
#include "zero/loss_scaler.h"
#include "zero/lr_schedule.h"
#include "zero/param_group.h"
#include "zero/engine_observer.h"
#include "zero/schedule/buffer_policy.h"
#include "zero/schedule/gather_schedule.h"
#include "zero/schedule/stage_policy.h"
#include "zero/schedule/step_schedule.h"
#include "zero/zero_config.h"

namespace zrepro {

// The engine's configuration: a config's settings ([Note: what a config gives the engine],
// zero_config.h) and what the run decides beside them.
struct EngineConfig : EngineSettings {
  torch::ScalarType comm_dtype = torch::kFloat;
  torch::Device device = torch::kCPU;
  // Offload (zero.offload_optimizer / offload_param): the copy engine's host-link
  // model and a fault injection for the gradient-accumulation boundary.
  double host_link_gbps = 0;
  double pageable_ratio = 0.5;
  bool drop_accumulated_grads = false;
  // Transient buffers: buffer_policy(zero) unless a run overrides it (see
  // [Note: one buffer policy for run and plan]).
  std::optional<BufferPolicy> buffers;
};

struct StepResult {
  double loss = 0;            // mean over the global batch
  bool skipped = false;       // overflow: no update
  double grad_norm = 0;       // global L2 norm of the unscaled gradients (NaN if skipped)
  double loss_scale = 1;      // scale the step's gradients were computed with
  double lr = 0;
  LossScaler::Event scale_event;
};

// Bytes of persistent storage this rank's engine owns, by memory category (docs/design/ARCHITECTURE.md) (the
// tracking allocator measures the same categories; transient buffers only there).
struct EngineMemory {
  int64_t params = 0, grads = 0, optimizer_states = 0;
  int64_t host_pinned = 0, host_pageable = 0;  // offload buffers in host memory
};

// [Note: the engine's training state] The engine, not the loop, knows where in the step
// it is (as FSDP2's TrainingState): idle between micro-steps and after the optimizer
// step, forward, backward, step. The loop moves it with begin_forward / begin_backward /
// end_backward / step, and each move sets the memory phase the tracking allocator files
// bytes under (device/device_memory.h), so the phase a byte is counted in is the phase
// the engine is in. A move out of order (a backward without its forward, a step inside a
// micro-step, a layer acquired while idle) is a bug in the caller: std::logic_error
// naming both states.
enum class TrainingState { idle, forward, backward, step };
const char* training_state_name(TrainingState s);

class ZeroEngine : private ShardOps {
 public:
  // init: each layer's initial values (fp32, params back to back), identical on all ranks.
  // observer: what follows the engine's state ([Note: one hook for what watches the engine]).
  ZeroEngine(const std::vector<LayerSpec>& layers, const std::vector<torch::Tensor>& init, const EngineConfig& cfg,
             Communicator& comm, EngineObserver& observer = no_engine_observer());
  ~ZeroEngine();

  // --- model side
  std::vector<torch::Tensor> acquire(int layer);
  torch::Tensor after_forward(int layer, torch::Tensor output);
  // The model leaves `layer` out of this forward (a MoE expert no token picked): it is
  // not gathered, and its zero gradient is reduced when x's gradient passes back
  // ([Note: a skipped layer] in engine.cpp). Returns x (or an alias of it).
  torch::Tensor skipped(int layer, torch::Tensor x);

  // --- loop side ([Note: the engine's training state])
  // idle; the micro-batch loads after it. micro_steps: how many the step has (0: not said).
  void begin_micro_step(int64_t step, int64_t micro_step, int64_t micro_steps = 0);
  void begin_forward();   // idle -> forward
  void begin_backward();  // forward -> backward
  void end_backward();    // backward -> idle: flushes gradient buckets of this micro-step
  // A forward without gradients between steps (evaluation, generation): idle -> forward
  // -> idle. Under ZeRO-3 its layers are gathered as a training forward's are, and all
  // resharded at its end. Run it on every rank, or the others miss its all-gathers.
  void begin_eval_forward();
  void end_eval_forward();
  // At the accumulation boundary (idle -> step -> idle). local_loss: this rank's mean
  // loss over its micro-steps.
  StepResult step(double local_loss);
  TrainingState training_state() const { return state_; }
  double loss_scale() const { return scaler_.scale(); }
  // Fault injection: +inf into this rank's accumulated gradients (drives the scaler).
  void inject_inf_grad();

  const StagePolicy& policy() const { return policy_; }
  // The copy engine of offload (null without offload).
  const CopyEngine* copier() const { return copier_.get(); }
  EngineMemory memory() const;
  Communicator& comm() { return comm_; }
  std::vector<ParamGroup*> groups();
  // Stages 0-1: layer l's gradient accumulated this step, full layout (stage 1: until the
  // boundary's backward reduces it); for tests.
  torch::Tensor accumulated_grad(int layer) const { return full_grads_[layer]; }
  // Full fp32 values of a layer (gathered across ranks); for checks and tests.
  torch::Tensor gather_layer(int layer);
  // Every rank: layer l's parameters gathered (a stage-3 all-gather into the device's
  // comm buffers, as DeepSpeed's GatheredParameters), copied to host memory in their
  // 16-bit dtype when keep (DeepSpeed's rank 0), then released. One tensor per parameter.
  std::vector<torch::Tensor> gather_layer_to_host(int layer, bool keep);
  // [Note: what a checkpoint holds] The training state a resume needs beyond the model
  // (trainer/checkpoint/): each layer's owned fp32 master and Adam moments, the Adam step
  // count (it skips overflowed steps), the LR schedule's iteration and the loss scaler.
  // The 16-bit parameters are the master's cast, so load_layer rebuilds them from it.
  OptimizerTensors optimizer_tensors(int layer) { return optimizers_[layer]->tensors(); }
  struct Counters {
    int64_t adam_steps = 0, lr_iteration = -1;
    LossScaler::State scaler;
  };
  Counters counters() const { return {adam_steps_, schedule_.iteration(), scaler_.state()}; }
  void restore(const Counters& c);
  // Layer l's parameters from its full fp32 values (params back to back), as at init.
  void load_layer(int layer, const torch::Tensor& values_fp32);
  // FNV-1a hash of this rank's full 16-bit parameters (replicated stages, where every
  // rank holds them): equal on all ranks exactly when the replicas are bit-identical.
  int64_t replica_fingerprint();

  // Called by the autograd function with the gradients of one use of a layer's
  // parameters; the last use of the micro-step reduces them ([Note: a group used
  // twice] in engine.cpp).
  void use_backward(int layer, std::vector<torch::Tensor> grads);
  void reduce_grad(int layer, const std::vector<torch::Tensor>& grads);
  void pre_backward(int layer);

 private:
  // The step's parts, in order.
  void reduce_at_boundary();
  // Stage 1: the accumulated gradients through the buckets into the reduced partition,
  // each layer's freed as it is copied in ([Note: ZeRO-1 reduces in the boundary's backward]).
  void reduce_accumulated();
  struct GradStats {
    double loss = 0, sq_norm = 0;
    bool overflow = false;
    double nonfinite = 0;  // layers whose norm is inf or NaN (this rank's, before the all-reduce)
  };
  GradStats grad_stats(double local_loss);
  // The i-th layer grad_stats takes (the order its norms are summed in).
  size_t stats_layer(size_t i) const;
  // Squared norm and non-finite count of per-layer norms (indexed by layer), summed in stats_layer order.
  GradStats sum_of_squares(const std::vector<double>& norms) const;
  void update(double coef, double lr);
  void sync_params();
  void zero_grads();
  // This rank's gradient of layer l the optimizer reads, and its share for the norm.
  torch::Tensor owned_grad(size_t l);
  torch::Tensor norm_share(size_t l);

  // ShardOps: the stage-3 GatherSchedule acts on the ParamGroups.
  void unshard_start(int layer) override { groups_[layer]->unshard_start(comm_); }
  void unshard_wait(int layer) override { groups_[layer]->unshard_wait(); }
  void reshard(int layer) override { groups_[layer]->reshard(); }
  bool uploading(int layer) const override { return groups_[layer]->uploading(); }
  bool host_shard(int layer) const override { return groups_[layer]->host_shard(); }

  // The constructor's parts, in order.
  ShardingConfig sharding_config() const;
  void setup_offload(const std::vector<std::vector<int64_t>>& layer_numels, ShardingConfig& sc);
  void build_groups(const std::vector<LayerSpec>& layers, const std::vector<torch::Tensor>& init,
                    const std::vector<std::vector<int64_t>>& layer_numels, const ShardingConfig& sc,
                    const torch::TensorOptions& opts);
  void gather_each_parameter_once(const torch::TensorOptions& opts);
  // layer_numels: per layer, its parameters' sizes.
  void build_optimizers(const ShardingConfig& sc, const std::vector<std::vector<int64_t>>& layer_numels);
  void build_reducer();
  // Gradient storage ([Note: DeepSpeed's optimizer-state and gradient lifetimes]):
  // every layer's (and stage 2's overhang), or one layer's, unless allocated; released
  // by the step at stages 0-2.
  void allocate_grads();
  void allocate_grad(size_t l);
  void allocate_reduced_partitions();
  void allocate_reduced_flat();
  void release_grad(size_t l);
  int64_t grad_storage_numel(size_t l) const;
  int64_t grad_overhang_elements() const;
  void update_group(const StepGroup& group, const AdamHyper& h, double coef);
  torch::Tensor module_being_flattened(const std::vector<std::vector<int64_t>>& layer_numels,
                                       const torch::TensorOptions& opts);
  void plan_step(const torch::TensorOptions& opts);

  EngineConfig cfg_;
  StagePolicy policy_;
  BufferPolicy buffers_;
  Communicator& comm_;
  std::vector<std::unique_ptr<ParamGroup>> groups_;
  std::vector<torch::Tensor> dummies_;     // one leaf per layer that carries the autograd function
  std::vector<int> uses_;                  // per layer: uses whose backward is still to come
  std::vector<std::vector<torch::Tensor>> kept_grads_;  // per layer: gradients of earlier-finished uses
  StepSchedule step_;
  torch::Tensor reduced_flat_;             // stage 1: the reduced partition, flat, during the step
  torch::TensorOptions grad_options_;      // the model dtype on the device
  std::vector<torch::Tensor> full_grads_;  // full_grads(): full layout (stages 0-1: during a step)
  std::vector<torch::Tensor> owned_grads_;  // this rank's gradient partition / shard (stage 1: during the step)
  // Stage 2: the rest of DeepSpeed's whole-parameter gradient partition on this rank
  // (grad_overhang_numel): held, never read ([Note: DeepSpeed's whole-parameter
  // gradient partition] in zero/schedule/partition.h).
  torch::Tensor grad_overhang_;
  torch::Tensor offload_grad_temp_;  // stages 1-2 under offload_optimizer (offload_grad_temp_numel)
  // BufferPolicy::second_grad_partition: the partition DeepSpeed reduces into during
  // the backward of a micro-step after the first; held from its first reduction to
  // end_backward, never read.
  torch::Tensor second_grad_partition_;
  int64_t micro_step_ = 0;
  bool boundary_micro_step_ = false;  // this micro-step is the step's last (the caller said so)
  bool boundary_reduced_ = false;     // stage 1: reduced at the end of the boundary's backward
  TrainingState state_ = TrainingState::idle;
  // Moves from `from` to `to` and sets the memory phase `to` files bytes under.
  void move(TrainingState from, TrainingState to, Phase phase);
  std::unique_ptr<GradReducer> reducer_;
  std::vector<std::unique_ptr<LayerOptimizer>> optimizers_;
  LossScaler scaler_;
  LrSchedule schedule_;
  int64_t adam_steps_ = 0;
  std::unique_ptr<GatherSchedule> gathers_;  // sharded parameters: gather / prefetch / release
  // Offload: device<->host copies, the host optimizer, which layers it holds.
  std::unique_ptr<CopyEngine> copier_;
  std::unique_ptr<OptimizerOffload> host_opt_;
  std::vector<bool> offloaded_;
  EngineObserver& observer_;
  // What this rank's gradient statistics are made of, for the observer.
  RankStatsParts stats_parts(double local_loss, const std::vector<double>& own_norms);
};

}  // namespace zrepro
