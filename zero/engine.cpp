// See engine.h.
#include "zero/engine.h"

#include <functional>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include <torch/csrc/autograd/custom_function.h>

#include "device/device_memory.h"
#include "offload/host_memory.h"
#include "zero/schedule/offload_plan.h"

namespace zrepro {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Identity-like autograd function that hands a layer's parameters to compute and,
// in backward, receives all of the layer's parameter gradients at once: the
// point where the layer's backward is complete (reduce_grad, stage-3 release).
struct LayerParams : public torch::autograd::Function<LayerParams> {
  static variable_list forward(AutogradContext* ctx, torch::Tensor carrier, int64_t layer, int64_t engine_addr) {
    ctx->set_materialize_grads(false);  // a use that leaves a parameter out delivers no gradient for it
    ctx->saved_data["layer"] = layer;
    ctx->saved_data["engine"] = engine_addr;
    auto* engine = reinterpret_cast<ZeroEngine*>(static_cast<intptr_t>(engine_addr));
    return engine->groups()[layer]->params();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto* engine = reinterpret_cast<ZeroEngine*>(static_cast<intptr_t>(ctx->saved_data["engine"].toInt()));
    engine->use_backward(static_cast<int>(ctx->saved_data["layer"].toInt()), grads);
    return {torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// Identity on the activation a skipped layer's output would have joined; in backward it
// delivers the layer's (zero) gradients at that point ([Note: a skipped layer]).
struct SkippedLayer : public torch::autograd::Function<SkippedLayer> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, int64_t layer, int64_t engine_addr) {
    ctx->saved_data["layer"] = layer;
    ctx->saved_data["engine"] = engine_addr;
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto* engine = reinterpret_cast<ZeroEngine*>(static_cast<intptr_t>(ctx->saved_data["engine"].toInt()));
    const int layer = static_cast<int>(ctx->saved_data["layer"].toInt());
    engine->use_backward(layer, std::vector<torch::Tensor>(engine->groups()[layer]->specs().size()));
    return {grads[0], torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

ZeroEngine::ZeroEngine(const std::vector<LayerSpec>& layers, const std::vector<torch::Tensor>& init,
                       const EngineConfig& cfg, Communicator& comm, EngineObserver& observer)
    : cfg_(cfg),
      policy_(stage_policy(cfg.zero.stage)),
      buffers_(cfg.buffers ? *cfg.buffers : buffer_policy(cfg.zero)),
      comm_(comm),
      scaler_(cfg.fp16, cfg.precision == Precision::fp16),
      schedule_(cfg.scheduler, cfg.optimizer.lr),
      observer_(observer) {
  torch::NoGradGuard no_grad;
  DeviceMemory::instance().set_phase(Phase::init);
  std::vector<std::vector<int64_t>> layer_numels;
  for (const auto& l : layers) {
    layer_numels.emplace_back();
    for (const auto& p : l.params) layer_numels.back().push_back(p.numel());
  }
  offloaded_ = offloaded_layers(layer_numels, cfg.zero);
  ShardingConfig sc = sharding_config();
  setup_offload(layer_numels, sc);
  const auto opts = torch::TensorOptions().dtype(sc.dtype).device(sc.device);
  build_groups(layers, init, layer_numels, sc, opts);
  plan_step(opts);
  uses_.assign(layers.size(), 0);
  kept_grads_.resize(layers.size());
  build_optimizers(sc, layer_numels);
  // Stage 3 keeps its gradient partition from init on (allocated after the optimizer, as
  // stage3.py does); stages 0-2 allocate gradients at the step's first reduction ([Note:
  // DeepSpeed's optimizer-state and gradient lifetimes]).
  if (step_.grads_persist) allocate_grads();
  if (policy_.shard_params()) {
    std::vector<int64_t> dynamic;
    for (auto& g : groups_) dynamic.push_back(g->layout().dynamic_numel);
    gathers_ = std::make_unique<GatherSchedule>(
        dynamic, GatherSchedule::Options{cfg.zero.stage3_prefetch_bucket_size, cfg.zero.stage3_max_live_parameters,
                                         cfg.zero.stage3_max_reuse_distance, buffers_.max_param_uploads});
  }
  if (policy_.uses_reducer()) build_reducer();
  gather_each_parameter_once(opts);
}

ShardingConfig ZeroEngine::sharding_config() const {
  ShardingConfig sc;
  sc.policy = policy_;
  sc.rank = comm_.rank();
  sc.world_size = comm_.world_size();
  sc.dtype = cfg_.precision == Precision::fp16   ? torch::kHalf
             : cfg_.precision == Precision::bf16 ? torch::kBFloat16
                                                 : torch::kFloat;
  sc.device = cfg_.device;
  sc.persistence_threshold = cfg_.zero.stage3_param_persistence_threshold;
  return sc;
}

void ZeroEngine::setup_offload(const std::vector<std::vector<int64_t>>& layer_numels, ShardingConfig& sc) {
  const OffloadConfig& op = cfg_.zero.offload_param;
  if (!cfg_.zero.offload_optimizer.enabled() && !op.enabled()) return;
  HostMemory::instance().set_backend(cfg_.device.is_cuda() ? PinBackend::cuda : PinBackend::mlock);
  copier_ = std::make_unique<CopyEngine>(
      CopyEngine::Options{cfg_.host_link_gbps, cfg_.pageable_ratio, cfg_.device.is_cuda()});
  // Everything offload will pin, checked against the memlock limit before the first
  // buffer is allocated.
  const OffloadHostBytes need =
      offload_host_bytes(layer_numels, cfg_.zero, comm_.world_size(), comm_.rank(), sc.dtype, cfg_.comm_dtype);
  HostMemory::instance().preflight(need.pinned, std::string("offload (") + (op.enabled() ? "parameter shards, " : "") +
                                                    "fp32 master, Adam moments, gradients)");
  if (op.enabled()) {
    sc.host_shard = copier_.get();
    sc.host_pinned = op.pin_memory;
  }
}

void ZeroEngine::build_groups(const std::vector<LayerSpec>& layers, const std::vector<torch::Tensor>& init,
                              const std::vector<std::vector<int64_t>>& layer_numels, const ShardingConfig& sc,
                              const torch::TensorOptions& opts) {
  torch::Tensor module_copy = module_being_flattened(layer_numels, opts);
  for (size_t l = 0; l < layers.size(); ++l) {
    groups_.push_back(std::make_unique<ParamGroup>(static_cast<int>(l), layers[l].name, layers[l].params, sc));
    groups_.back()->load(init[l].to(sc.device));
    // The gradient accumulates in the model dtype on the device; offloaded, in the model
    // dtype at stages 1-2 when the reduction is in it (DeepSpeed accumulates on the device
    // before the fp32 copy goes down), else in the host's fp32 accumulator.
    const bool host_fp32 = offloaded_[l] && (policy_.shard_params() || cfg_.comm_dtype != sc.dtype);
    observer_.group_built(*groups_.back(), init[l], host_fp32 ? torch::kFloat : sc.dtype);
    dummies_.push_back(torch::zeros({1}, torch::TensorOptions().device(sc.device)).requires_grad_(true));
  }
}

// [Note: ZeRO-3 gathers every parameter to hook it] (zero/schedule/layer_layout.h): the
// largest parameter gathered whole for a moment, at the end of init.
void ZeroEngine::gather_each_parameter_once(const torch::TensorOptions& opts) {
  std::vector<const LayerLayout*> layouts;
  for (auto& g : groups_) layouts.push_back(&g->layout());
  if (const int64_t n = hook_gather_numel(layouts, cfg_.zero.offload_param.enabled()); n > 0) {
    DeviceMemory::CategoryScope tag(MemCategory::comm_buffers);
    torch::Tensor gathered = torch::empty({n}, opts);
  }
}

// [Note: DeepSpeed flattens the module it was handed] At stages 1-2 DeepSpeed's engine has
// the module on the device and flattens its 16-bit parameters into a new buffer
// (stage_1_and_2.py __init__, flatten_dense_tensors_aligned, lines 505-524) before it
// points them into it: the parameters exist twice for a moment, when the device has the
// room (available_memory() >= the flat buffer, lines 447-453; else it moves the module to
// the host first). Stage 0 keeps the module's tensors, stage 3 partitions them as they are
// made (zero.Init). Returns the stand-in for the module's parameters (undefined otherwise);
// the caller drops it once its groups hold the parameters.
torch::Tensor ZeroEngine::module_being_flattened(const std::vector<std::vector<int64_t>>& layer_numels,
                                                 const torch::TensorOptions& opts) {
  int64_t n = 0;
  for (const auto& l : layer_numels)
    for (int64_t x : l) n += x;
  const int64_t bytes = n * static_cast<int64_t>(c10::elementSize(opts.dtype().toScalarType()));
  const MemorySnapshot now = DeviceMemory::instance().snapshot();
  // A CUDA device's room is its own to say: assumed there (the lent GPUs have it).
  if (module_flatten_bytes(policy_, bytes, opts.device().is_cuda() ? 0 : now.capacity, now.reserved) == 0)
    return torch::Tensor();
  DeviceMemory::CategoryScope tag(MemCategory::params);
  return torch::empty({n}, opts);
}

// The gradient storage's options and DeepSpeed's step groups, from the layers' owned sizes.
void ZeroEngine::plan_step(const torch::TensorOptions& opts) {
  grad_options_ = opts;
  full_grads_.resize(groups_.size());
  owned_grads_.resize(groups_.size());
  std::vector<int64_t> owned;
  for (auto& g : groups_) owned.push_back(g->owned_numel());
  step_ = step_schedule(policy_, owned, offloaded_, cfg_.zero.sub_group_size);
}

void ZeroEngine::build_optimizers(const ShardingConfig& sc, const std::vector<std::vector<int64_t>>& layer_numels) {
  // DeepSpeed creates (and partitions) the optimizer states after the model: an
  // OOM here is "while partitioning optimizer states".
  DeviceMemory::instance().set_phase(Phase::partition);
  if (cfg_.zero.offload_optimizer.enabled()) {
    OptimizerOffload::Options ho;
    ho.pinned = cfg_.zero.offload_optimizer.pin_memory;
    ho.grad_dtype = cfg_.comm_dtype;
    ho.param_dtype = sc.dtype;
    ho.drop_accumulated_grads = cfg_.drop_accumulated_grads;
    ho.param_offload = cfg_.zero.offload_param.enabled();
    ho.boundary_fp32 = !policy_.shard_params();  // stages 1-2 (stage_1_and_2.py)
    std::vector<int64_t> numels;
    for (auto& g : groups_) numels.push_back(g->owned_numel());
    ho.overhang_numel = offload_grad_overhang_numel(layer_numels, cfg_.zero, comm_.world_size(), comm_.rank());
    host_opt_ = std::make_unique<OptimizerOffload>(numels, offloaded_, ho, *copier_);
    // DeepSpeed's device buffer the host accumulator comes up into ([Note: DeepSpeed's
    // offloaded accumulation moves whole parameters]).
    if (const int64_t n = offload_grad_temp_numel(layer_numels, cfg_.zero)) {
      DeviceMemory::CategoryScope tag(MemCategory::grads);
      offload_grad_temp_ = torch::zeros({n}, torch::TensorOptions().dtype(sc.dtype).device(sc.device));
      host_opt_->use_device_temp(offload_grad_temp_);
    }
  }
  {
    DeviceMemory::CategoryScope tag(MemCategory::optimizer_states);
    for (auto& g : groups_)
      optimizers_.push_back(offloaded_[g->index()] ? make_host_adam(*g, *host_opt_) : make_device_adam(*g));
  }
  // DeepSpeed's initialize_optimizer_states: an fp32 zero gradient, dropped again.
  if (step_.init_transient_numel > 0) {
    DeviceMemory::CategoryScope tag(MemCategory::other);
    torch::Tensor zero = torch::zeros({step_.init_transient_numel}, grad_options_.dtype(torch::kFloat));
  }
}

void ZeroEngine::build_reducer() {
  std::vector<ParamGroup*> reverse;
  for (auto it = groups_.rbegin(); it != groups_.rend(); ++it) reverse.push_back(it->get());
  GradReducer::Options ro;
  ro.reduce_bucket_size = cfg_.zero.reduce_bucket_size;
  ro.reduce_scatter = bucket_reduce_scatters(cfg_.zero);
  ro.buffers = buffers_;
  ro.comm_dtype = cfg_.comm_dtype;
  ro.device = cfg_.device;
  if (host_opt_) {
    ro.offloaded = [this](int g) { return bool(offloaded_[g]); };
    ro.sink = [this](int g, int64_t offset, const torch::Tensor& piece) { return host_opt_->add_grad(g, offset, piece); };
    ro.copier = copier_.get();
  }
  ro.before_result = [this] { allocate_reduced_partitions(); };
  ro.peer_pieces = observer_.reduced_pieces();
  DeviceMemory::instance().set_phase(Phase::init);
  reducer_ = std::make_unique<GradReducer>(reverse, ro, comm_);
}

ZeroEngine::~ZeroEngine() {
  if (copier_) copier_->synchronize();  // no copy may outlive the buffers it touches
}

std::vector<ParamGroup*> ZeroEngine::groups() {
  std::vector<ParamGroup*> out;
  for (auto& g : groups_) out.push_back(g.get());
  return out;
}

int64_t ZeroEngine::grad_overhang_elements() const {
  for (bool off : offloaded_)
    if (off) return 0;  // offloaded gradients accumulate on the host
  std::vector<const LayerLayout*> layouts;
  for (auto& g : groups_) layouts.push_back(&g->layout());
  return grad_overhang_numel(layouts, comm_.world_size(), comm_.rank());
}

int64_t ZeroEngine::grad_storage_numel(size_t l) const { return groups_[l]->layout().grad_storage_numel(offloaded_[l]); }

void ZeroEngine::allocate_grads() {
  DeviceMemory::CategoryScope tag(MemCategory::grads);
  for (size_t l = 0; l < groups_.size(); ++l) allocate_grad(l);
  if (const int64_t n = grad_overhang_elements(); n > 0 && !grad_overhang_.defined())
    grad_overhang_ = torch::zeros({n}, grad_options_);
}

// Stage 2, at a micro-step's first bucket result (GradReducer::Options::before_result): the
// owned partition (the step's first), and after the first micro-step the fresh partition
// DeepSpeed reduces into beside the accumulated one (BufferPolicy::second_grad_partition).
void ZeroEngine::allocate_reduced_partitions() {
  if (policy_.reduction() == GradReduction::reduce_scatter_at_boundary) return allocate_reduced_flat();
  allocate_grads();
  if (!buffers_.second_grad_partition || micro_step_ == 0 || second_grad_partition_.defined()) return;
  DeviceMemory::CategoryScope grads_tag(MemCategory::grads);
  int64_t n = grad_overhang_.defined() ? grad_overhang_.numel() : 0;
  for (const auto& o : owned_grads_) n += o.defined() ? o.numel() : 0;
  second_grad_partition_ = torch::empty({n}, grad_options_);
}

// Stage 1, at the boundary reduction's first bucket result: the reduced partition, one flat
// buffer with each layer's partition a view of it. DeepSpeed allocates its partition of the
// reduced gradients there (copy_grads_in_partition, stage_1_and_2.py:2184) and the step
// uses it as its flat copy (update_group). A comm buffer, not grads: it lives only to the step.
void ZeroEngine::allocate_reduced_flat() {
  if (reduced_flat_.defined() || step_.groups.empty()) return;
  DeviceMemory::CategoryScope tag(MemCategory::comm_buffers);
  const StepGroup& g = step_.groups.front();  // stage 1: one group
  reduced_flat_ = torch::zeros({g.numel}, grad_options_);
  for (size_t i = 0; i < g.layers.size(); ++i)
    owned_grads_[g.layers[i]] = reduced_flat_.narrow(0, g.offsets[i], groups_[g.layers[i]]->owned_numel());
}

void ZeroEngine::allocate_grad(size_t l) {
  DeviceMemory::CategoryScope tag(MemCategory::grads);
  torch::Tensor& g = policy_.full_grads() ? full_grads_[l] : owned_grads_[l];
  if (const int64_t n = grad_storage_numel(l); n > 0 && !g.defined()) g = torch::zeros({n}, grad_options_);
}

EngineMemory ZeroEngine::memory() const {
  EngineMemory m;
  const int64_t grad_elem = static_cast<int64_t>(c10::elementSize(grad_options_.dtype().toScalarType()));
  for (size_t l = 0; l < groups_.size(); ++l) {
    m.params += groups_[l]->param_bytes();
    // Gradient storage while it exists (stages 0-2: from the step's first reduction to the step).
    m.grads += grad_storage_numel(l) * grad_elem;
    m.optimizer_states += optimizers_[l]->device_bytes();
  }
  m.grads += grad_overhang_elements() * grad_elem;
  if (offload_grad_temp_.defined()) m.grads += offload_grad_temp_.numel() * offload_grad_temp_.element_size();
  m.host_pinned = HostMemory::instance().pinned_bytes();
  m.host_pageable = HostMemory::instance().pageable_bytes();
  return m;
}

// ---------------------------------------------------------------- model side

std::vector<torch::Tensor> ZeroEngine::acquire(int layer) {
  if (state_ != TrainingState::forward && state_ != TrainingState::backward)  // backward: a recompute
    throw std::logic_error(std::string("ZeroEngine: layer ") + std::to_string(layer) + " acquired in state " +
                           training_state_name(state_) + ", expected forward or backward");
  if (gathers_) gathers_->fetch(layer, *this);
  if (torch::GradMode::is_enabled()) ++uses_[layer];  // a use whose backward will deliver gradients
  DeviceMemory::instance().mark("acquire", layer);
  return LayerParams::apply(dummies_[layer], static_cast<int64_t>(layer),
                            static_cast<int64_t>(reinterpret_cast<intptr_t>(this)));
}

torch::Tensor ZeroEngine::after_forward(int layer, torch::Tensor output) {
  DeviceMemory::instance().mark("after_forward", layer);
  if (!gathers_) return output;
  gathers_->release(layer, *this);
  if (output.requires_grad()) output.register_hook([this, layer](torch::Tensor g) {
    pre_backward(layer);
    return g;
  });
  return output;
}

void ZeroEngine::pre_backward(int layer) { gathers_->fetch(layer, *this); }

// [Note: a skipped layer]
// A MoE expert no token picked does not run: it is not acquired, so under ZeRO-3 it is
// not gathered, in forward or backward (DeepSpeed's hooks on its modules never fire).
// Its gradient is zero. The gradient buckets (ReduceSchedule) are laid out once, in
// reverse layer order, and a bucket is launched when all of its pieces arrived, so
// the zero gradient is handed in where the layer's own would have been: when the
// gradient of the activation its output would have joined passes back. DeepSpeed's
// buckets take gradients in arrival order and leave such a parameter out; the reduced
// values are the same (zero), the bucket contents differ.
torch::Tensor ZeroEngine::skipped(int layer, torch::Tensor x) {
  if (state_ != TrainingState::forward && state_ != TrainingState::backward)
    throw std::logic_error(std::string("ZeroEngine: layer ") + std::to_string(layer) + " skipped in state " +
                           training_state_name(state_) + ", expected forward or backward");
  if (!torch::GradMode::is_enabled() || !x.requires_grad()) return x;
  ++uses_[layer];
  return SkippedLayer::apply(x, static_cast<int64_t>(layer), static_cast<int64_t>(reinterpret_cast<intptr_t>(this)));
}

// [Note: a group used twice]
// A tied LM head uses the embed group a second time in one forward (DeepSpeed's
// ZeRO-3 fetches the shared parameter for each module that uses it, and autograd
// sums both gradients into the one .grad before DeepSpeed's hook reduces it). Each
// use's backward delivers its gradients here: all but the last to arrive are kept
// (summed) and, under ZeRO-3, the group is released; the last sums them out of place,
// as autograd's input buffer does for a tied weight (the CPU record of DeepSpeed with
// Hugging Face's GPT-2 holds the head's gradient, the embedding's and their sum at once:
// three vocab x hidden tensors at the end of backward), and reduces once. A
// checkpointed block's first forward runs without grad and does not count as a use;
// its recomputation does.
void ZeroEngine::use_backward(int layer, std::vector<torch::Tensor> grads) {
  std::vector<torch::Tensor>& kept = kept_grads_[layer];
  if (uses_[layer] > 0) --uses_[layer];
  if (uses_[layer] > 0) {
    DeviceMemory::instance().mark("use", layer);
    torch::NoGradGuard no_grad;
    if (kept.empty()) kept.resize(grads.size());
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!grads[i].defined()) continue;
      if (kept[i].defined()) kept[i].add_(grads[i]);
      else kept[i] = grads[i];
    }
    if (gathers_) gathers_->release(layer, *this);
    return;
  }
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < grads.size(); ++i) {
    const bool k = !kept.empty() && kept[i].defined();
    if (k && grads[i].defined()) grads[i] = kept[i] + grads[i];
    else if (k) grads[i] = kept[i];
    else if (!grads[i].defined()) {
      const ShardingConfig& c = groups_[layer]->config();  // unused by every use: a zero gradient
      grads[i] = torch::zeros(groups_[layer]->specs()[i].shape, torch::TensorOptions().dtype(c.dtype).device(c.device));
    }
  }
  // The gradients are delivered, zero ones included (a MoE expert no token picked): the
  // planner's tapes cut here (trainer/planner/tape_recorder.h).
  DeviceMemory::instance().mark("use", layer);
  kept.clear();
  reduce_grad(layer, grads);
}

void ZeroEngine::reduce_grad(int layer, const std::vector<torch::Tensor>& grads) {
  torch::NoGradGuard no_grad;
  DeviceMemory::CategoryScope tag(MemCategory::comm_buffers);
  ParamGroup& g = *groups_[layer];
  if (policy_.reduction() != GradReduction::reduce_scatter_per_micro_step) {
    allocate_grad(layer);  // each parameter's .grad from its first backward of the step
    g.scatter_param_grads(grads, full_grads_[layer]);  // accumulates locally until the boundary
    if (buffers_.reduce_buffers_at_first_grad) reducer_->open();  // DeepSpeed's hook: setup_buckets
    return;
  }
  // Stage 2's partitions come with the first bucket's result (before_result).
  reducer_->add(g, grads, owned_grads_);
  if (gathers_) gathers_->release(layer, *this);
}

// ---------------------------------------------------------------- loop side

const char* training_state_name(TrainingState s) {
  switch (s) {
    case TrainingState::idle: return "idle";
    case TrainingState::forward: return "forward";
    case TrainingState::backward: return "backward";
    case TrainingState::step: return "step";
  }
  return "?";
}

void ZeroEngine::move(TrainingState from, TrainingState to, Phase phase) {
  if (state_ != from)
    throw std::logic_error(std::string("ZeroEngine: ") + training_state_name(to) + " begins in state " +
                           training_state_name(state_) + ", expected " + training_state_name(from));
  state_ = to;
  DeviceMemory::instance().set_phase(phase);
}

void ZeroEngine::begin_forward() { move(TrainingState::idle, TrainingState::forward, Phase::forward); }

void ZeroEngine::begin_backward() { move(TrainingState::forward, TrainingState::backward, Phase::backward); }

void ZeroEngine::begin_eval_forward() {
  move(TrainingState::idle, TrainingState::forward, Phase::forward);
  if (gathers_) gathers_->begin_micro_step();
}

void ZeroEngine::end_eval_forward() {
  move(TrainingState::forward, TrainingState::idle, Phase::forward);
  if (gathers_) gathers_->end_forward_only(*this);
}

void ZeroEngine::begin_micro_step(int64_t step, int64_t micro_step, int64_t micro_steps) {
  if (state_ != TrainingState::idle)
    throw std::logic_error(std::string("ZeroEngine: a micro-step begins in state ") + training_state_name(state_) +
                           ", expected idle");
  comm_.set_position(step, micro_step);
  micro_step_ = micro_step;
  boundary_micro_step_ = micro_steps > 0 && micro_step + 1 == micro_steps;
  std::fill(uses_.begin(), uses_.end(), 0);
  for (auto& k : kept_grads_) k.clear();
  if (gathers_) gathers_->begin_micro_step();
  if (host_opt_) host_opt_->begin_micro_step(micro_step, micro_steps == 1, micro_step + 1 == micro_steps);
  // [Note: a release's own behaviour] (zero_config.h): the next micro-step's gradients
  // replace, not join, the ones reduced so far, on this rank and on the ranks an observer
  // stands in for (their gradient rows).
  if (cfg_.release.boundary_micro_step_grads_only && micro_step > 0) {
    for (auto& g : owned_grads_)
      if (g.defined()) g.zero_();
    observer_.grads_zeroed();
  }
}

void ZeroEngine::end_backward() {
  if (state_ != TrainingState::backward)
    throw std::logic_error(std::string("ZeroEngine: end_backward in state ") + training_state_name(state_) +
                           ", expected backward");
  state_ = TrainingState::idle;
  if (policy_.reduction() == GradReduction::reduce_scatter_per_micro_step)
    reducer_->finish(owned_grads_);
  else if (policy_.reduction() == GradReduction::reduce_scatter_at_boundary && boundary_micro_step_)
    reduce_accumulated();
  second_grad_partition_ = torch::Tensor();
  if (gathers_) gathers_->end_backward(*this);
}

void ZeroEngine::inject_inf_grad() {
  torch::NoGradGuard no_grad;
  const bool partitioned = !policy_.full_grads() || boundary_reduced_;  // this rank's partition only
  if (!boundary_reduced_) allocate_grads();
  if (partitioned && offloaded_.front()) {
    host_opt_->finish_grads();  // the accumulator is final once its copies landed
    DeviceMemory::HostScope host;
    host_opt_->grad(0)[0] = std::numeric_limits<double>::infinity();
    return;
  }
  torch::Tensor& g = partitioned ? owned_grads_.front() : full_grads_.front();
  g[0] = std::numeric_limits<double>::infinity();
}

torch::Tensor ZeroEngine::owned_grad(size_t l) { return policy_.owns_whole_flat() ? full_grads_[l] : owned_grads_[l]; }

torch::Tensor ZeroEngine::norm_share(size_t l) {
  // Stage 0 holds every gradient, so each rank takes its partition's share of the
  // norm; the others own exactly their partition or shard.
  if (!policy_.owns_whole_flat() || offloaded_[l]) return owned_grads_[l];
  const FlatPartition& f = groups_[l]->flat_partition();
  return full_grads_[l].narrow(0, f.begin(comm_.rank()), f.partition_numel);
}

void ZeroEngine::reduce_at_boundary() {
  const int ws = comm_.world_size();
  switch (policy_.reduction()) {
    case GradReduction::all_reduce_at_boundary: {
      if (ws == 1) return;
      std::vector<WorkPtr> works;
      for (size_t l = 0; l < groups_.size(); ++l) {
        torch::Tensor& g = full_grads_[l];
        g.div_(ws);
        for (int64_t off = 0; off < g.numel(); off += cfg_.zero.reduce_bucket_size)
          works.push_back(comm_.all_reduce(g.narrow(0, off, std::min(cfg_.zero.reduce_bucket_size, g.numel() - off)),
                                           "all_reduce grads " + groups_[l]->name()));
      }
      for (auto& w : works) w->wait();
      return;
    }
    case GradReduction::reduce_scatter_at_boundary:
      if (!boundary_reduced_) reduce_accumulated();  // the caller did not say which micro-step was the last
      return;
    case GradReduction::reduce_scatter_per_micro_step:
      return;  // reduced by every backward
  }
}

// [Note: ZeRO-1 reduces in the boundary's backward]
// DeepSpeed 0.19.8's stage 1 keeps each parameter's accumulated .grad through the step's
// micro-steps; its gradient hook allocates the reduce bucket at the step's first gradient
// (BufferPolicy::reduce_buffers_at_first_grad). At the end of the boundary micro-step's
// backward (engine.py:3165 allreduce_gradients -> stage_1_and_2.py:958 reduce_gradients)
// it walks the parameters: each .grad is copied into the bucket and its own storage freed,
// a full bucket is reduced and its result copied into the rank's gradient partition,
// allocated at the first result (copy_grads_in_partition:2184), and the bucket is freed at
// the end (_release_ipg_buffers). So the backward's peak holds every gradient but one
// bucket's worth, the bucket and the partition at once, and the step holds the partition
// alone (measured: the CPU record's ZeRO-1 cases). The engine does the same in end_backward
// when begin_micro_step was told the step's micro-step count, and in the step otherwise.
void ZeroEngine::reduce_accumulated() {
  allocate_grads();  // a layer no backward reached this step has a zero gradient
  if (host_opt_) host_opt_->begin_micro_step(0, true);  // the boundary's reduce: the step's only gradient
  for (auto it = groups_.rbegin(); it != groups_.rend(); ++it) {
    const int l = (*it)->index();
    reducer_->add(l, full_grads_[l], owned_grads_);
    full_grads_[l] = torch::Tensor();  // copied into the bucket
  }
  reducer_->finish(owned_grads_);  // the partition came with the first result (allocate_reduced_flat)
  boundary_reduced_ = true;
}

size_t ZeroEngine::stats_layer(size_t i) const {
  // [Note: norms while the last pieces land] With offload, layers are taken in the
  // order backward finished them (last layer first) and each waits only for its own
  // copies and host adds: the norms of the layers that landed are computed while the
  // last bucket is still on the link, as DeepSpeed computes each parameter's norm as
  // its gradient is reduced instead of after every copy. The wait is what remains.
  return host_opt_ ? groups_.size() - 1 - i : i;
}

ZeroEngine::GradStats ZeroEngine::sum_of_squares(const std::vector<double>& norms) const {
  // An inf or NaN anywhere makes a norm non-finite, which is the overflow flag.
  GradStats s;
  for (size_t i = 0; i < norms.size(); ++i) {
    const double n = norms[stats_layer(i)];
    if (std::isfinite(n))
      s.sq_norm += n * n;
    else
      s.overflow = true, s.nonfinite += 1;
  }
  return s;
}

ZeroEngine::GradStats ZeroEngine::grad_stats(double local_loss) {
  const size_t L = groups_.size();
  std::vector<double> norms(L);  // by layer
  for (size_t i = 0; i < L; ++i) {
    const size_t l = stats_layer(i);
    if (host_opt_ && offloaded_[l]) host_opt_->finish_grads(static_cast<int>(l));
    // One norm per layer, of its pieces ([Note: the gradient norm's fp64 copies]).
    norms[l] = optimizers_[l]->grad_norm(norm_share(l));
  }
  const GradStats own = sum_of_squares(norms);
  torch::Tensor stats = torch::tensor({local_loss, own.sq_norm, own.nonfinite}, torch::kDouble).to(cfg_.device);
  observer_.stats_reducing(stats, stats_parts(local_loss, norms));
  comm_.all_reduce_wait(stats, "loss+grad_norm+overflow");
  stats = stats.cpu();
  GradStats s;
  s.loss = stats[0].item<double>() / comm_.world_size();
  s.sq_norm = stats[1].item<double>();
  s.overflow = stats[2].item<double>() > 0;
  return s;
}

RankStatsParts ZeroEngine::stats_parts(double local_loss, const std::vector<double>& own_norms) {
  RankStatsParts p;
  p.local_loss = local_loss;
  p.own_norms = own_norms;
  p.norm = [this](size_t l, int k, const torch::Tensor& share) {
    if (share.defined()) return owned_grad_norm(*groups_[l], share, k);
    const FlatPartition& f = groups_[l]->flat_partition();  // stage 0: rank k's partition of the whole
    return grad_share_norm(full_grads_[l].narrow(0, f.begin(k), f.partition_numel));
  };
  p.sum = [this](const std::vector<double>& norms) {
    const GradStats s = sum_of_squares(norms);
    return std::make_pair(s.sq_norm, s.nonfinite);
  };
  return p;
}

void ZeroEngine::update(double coef, double lr) {
  ++adam_steps_;
  const OptimizerConfig& o = cfg_.optimizer;
  const AdamHyper h{lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.adam_w_mode, o.bias_correction};
  // Each updated partition is on the device when its update returns (an offloaded
  // one's upload included), so it can be gathered. A layer of a step group is updated
  // with its group ([Note: DeepSpeed's optimizer-state and gradient lifetimes]).
  for (size_t l = 0; l < groups_.size(); ++l) {
    const int gi = step_.group_of[l];
    if (gi < 0)
      optimizers_[l]->update(owned_grad(l), h, adam_steps_, coef);
    else if (step_.groups[gi].layers.front() == static_cast<int>(l))
      update_group(step_.groups[gi], h, coef);
  }
  observer_.stepped(h, adam_steps_, coef);
}

void ZeroEngine::update_group(const StepGroup& group, const AdamHyper& h, double coef) {
  // DeepSpeed's step of one group: the flat copy of its 16-bit gradients (stage 1's reduced
  // partition is flat already, and copied all the same: flatten_dense_tensors_aligned of its
  // views), that copy in fp32 (the same tensor when the gradients are fp32), the 16-bit
  // gradients freed (stages 1-2), then the optimizer on views of the fp32 gradient, which
  // dies after it.
  torch::Tensor g32;
  {
    DeviceMemory::CategoryScope tag(MemCategory::other);  // the step's transients, as the norm's copies
    std::vector<torch::Tensor> parts;
    for (int l : group.layers) parts.push_back(owned_grad(l));
    g32 = torch::cat(parts).to(torch::kFloat);
  }
  if (!step_.grads_persist) {
    for (int l : group.layers) release_grad(l);
    if (group.layers.back() == step_.groups.back().layers.back()) {
      grad_overhang_ = torch::Tensor();
      reduced_flat_ = torch::Tensor();
    }
  }
  for (size_t i = 0; i < group.layers.size(); ++i) {
    const int l = group.layers[i];
    optimizers_[l]->update(g32.narrow(0, group.offsets[i], groups_[l]->owned_numel()), h, adam_steps_, coef);
  }
}

void ZeroEngine::release_grad(size_t l) {
  full_grads_[l] = torch::Tensor();
  owned_grads_[l] = torch::Tensor();
}

void ZeroEngine::sync_params() {
  if (policy_.gathers_updated_partitions()) {
    std::vector<WorkPtr> works;
    for (size_t l = 0; l < groups_.size(); ++l) works.push_back(groups_[l]->gather_partitions(comm_));
    for (auto& w : works) w->wait();
  } else if (policy_.shard_params()) {
    for (size_t l = 0; l < groups_.size(); ++l) groups_[l]->mark_persistent_stale();
  }
}

void ZeroEngine::zero_grads() {
  observer_.grads_zeroed();
  reduced_flat_ = torch::Tensor();  // an overflow skipped the step that would have used it
  boundary_reduced_ = false;
  if (!step_.grads_persist) {  // stages 0-2: the step frees the gradients (stage 1's reduced partition too)
    for (size_t l = 0; l < groups_.size(); ++l) release_grad(l);
    grad_overhang_ = torch::Tensor();
    return;
  }
  for (auto& g : owned_grads_)
    if (g.defined()) g.zero_();
}

StepResult ZeroEngine::step(double local_loss) {
  move(TrainingState::idle, TrainingState::step, Phase::step);
  struct BackToIdle {
    TrainingState& state;
    ~BackToIdle() { state = TrainingState::idle; }  // also when the scaler gives up (throws)
  } back{state_};
  torch::NoGradGuard no_grad;
  StepResult r;
  r.loss_scale = scaler_.scale();
  r.lr = schedule_.lr();
  if (!boundary_reduced_) allocate_grads();  // a layer no backward reached this step has a zero gradient
  reduce_at_boundary();
  const GradStats s = grad_stats(local_loss);
  r.loss = s.loss;
  const bool check = (cfg_.precision == Precision::fp16 && scaler_.dynamic()) ||
                     (cfg_.precision == Precision::bf16 && cfg_.bf16_check_grad_overflow);
  if (check && s.overflow) {
    r.skipped = true;
    r.grad_norm = std::numeric_limits<double>::quiet_NaN();
    zero_grads();
    r.scale_event = scaler_.update(true);  // throws at the minimum scale
    return r;
  }
  // Unchecked precision (fp32, static fp16 scale): a non-finite gradient goes through
  // as in DeepSpeed and the norm is reported as such.
  r.grad_norm = s.overflow ? std::numeric_limits<double>::quiet_NaN() : std::sqrt(s.sq_norm) / r.loss_scale;
  double coef = 1.0 / r.loss_scale;
  if (cfg_.gradient_clipping > 0 && r.grad_norm > cfg_.gradient_clipping)
    coef *= cfg_.gradient_clipping / (r.grad_norm + 1e-6);
  update(coef, r.lr);
  sync_params();
  zero_grads();
  r.scale_event = scaler_.update(false);
  schedule_.step();
  return r;
}

int64_t ZeroEngine::replica_fingerprint() {
  TORCH_CHECK(policy_.replicated_params(), "replica_fingerprint: sharded parameters have no replica");
  uint64_t h = 1469598103934665603ULL;
  for (auto& g : groups_) {
    torch::Tensor all = torch::cat([&] {
      std::vector<torch::Tensor> v;
      for (auto& p : g->params()) v.push_back(p.reshape({-1}));
      return v;
    }()).cpu().contiguous();
    const auto* bytes = static_cast<const unsigned char*>(all.data_ptr());
    for (int64_t i = 0; i < all.numel() * static_cast<int64_t>(all.element_size()); ++i)
      h = (h ^ bytes[i]) * 1099511628211ULL;
  }
  return static_cast<int64_t>(h);
}

void ZeroEngine::restore(const Counters& c) {
  if (state_ != TrainingState::idle)
    throw std::logic_error(std::string("ZeroEngine: restore in state ") + training_state_name(state_) + ", expected idle");
  adam_steps_ = c.adam_steps;
  schedule_.set_iteration(c.lr_iteration);
  scaler_.restore(c.scaler);
}

void ZeroEngine::load_layer(int layer, const torch::Tensor& values) {
  torch::NoGradGuard no_grad;
  ParamGroup& g = *groups_[layer];
  g.load(values);
  // Stage 3's whole persistent copies are refreshed from the shard at their next gather.
  g.mark_persistent_stale();
}

namespace {

// Runs `use` while layer g is gathered (every rank: a stage-3 all-gather), then reshards it
// unless it was gathered before.
void while_gathered(ParamGroup& g, Communicator& comm, const std::function<void()>& use) {
  torch::NoGradGuard no_grad;
  const bool was = g.state() != ShardState::sharded;
  g.unshard_start(comm);
  g.unshard_wait();
  use();
  if (!was) g.reshard();
}

}  // namespace

std::vector<torch::Tensor> ZeroEngine::gather_layer_to_host(int layer, bool keep) {
  ParamGroup& g = *groups_[layer];
  std::vector<torch::Tensor> out;
  while_gathered(g, comm_, [&] {
    if (!keep) return;
    DeviceMemory::HostScope host;
    for (auto& p : g.params()) out.push_back(p.detach().to(torch::kCPU).clone());
  });
  return out;
}

torch::Tensor ZeroEngine::gather_layer(int layer) {
  ParamGroup& g = *groups_[layer];
  torch::Tensor whole;
  while_gathered(g, comm_, [&] {
    std::vector<torch::Tensor> flat;
    for (auto& p : g.params()) flat.push_back(p.reshape({-1}).to(torch::kFloat).cpu());
    // Concatenated (a copy) before the reshard frees the gathered buffer: an fp32 CPU view
    // converts to itself, so `flat` may still point into it.
    whole = torch::cat(flat);
  });
  return whole;
}

}  // namespace zrepro
