// See planner.h. PlanSim runs the engine's own schedules (zero/schedule/: the
// layer size tables, ShardLifecycle, GatherSchedule, ReduceSchedule, BufferPolicy)
// on byte counts instead of tensors, in the order the GPT model calls the engine,
// with the model's activation tapes in between, on one rank (every rank of this
// trainer holds the same amounts: partitions and shards are padded to equal sizes),
// over two optimizer steps: the first records the stage-3 trace, the second is the
// steady state with prefetching and reuse. See docs/design/ARCHITECTURE.md "How plan and
// run share the schedule".
#include "trainer/planner/planner.h"

#include "device/caching_pool.h"

#include <cmath>

#include <algorithm>
#include <functional>
#include <memory>
#include <numeric>
#include <sstream>

#include "device/base/errors.h"
#include "offload/host_memory.h"
#include "trainer/checkpoint/ds_layout.h"
#include "trainer/checkpoint/host_bytes.h"
#include "trainer/model/gpt.h"
#include "trainer/planner/gpt_memory.h"
#include "zero/schedule/buffer_policy.h"
#include "zero/schedule/gather_schedule.h"
#include "zero/schedule/layer_layout.h"
#include "zero/schedule/offload_plan.h"
#include "zero/schedule/reduce_schedule.h"
#include "zero/schedule/shard_state.h"
#include "zero/schedule/stage_policy.h"
#include "zero/schedule/step_schedule.h"

namespace zrepro {

using json = nlohmann::json;

namespace {

int64_t elem_size(torch::ScalarType t) { return static_cast<int64_t>(c10::elementSize(t)); }

// [Note: the CUDA workspace in the plan]
// On a GPU the first matmul makes cuBLAS allocate its workspace through the caching
// allocator, and it stays for the run. Measured on the H200 record
// (conformance/results/gpu/nvidia-h200.json, torch 2.11, CUDA 13): real DeepSpeed's
// step peak at ZeRO-1/2 is 22 bytes per parameter (zero/schedule/step_schedule.h) plus
// 64.02 MiB for TinyLlama-1.1B and 66.3 MiB for GPT-2, where the init peak, before any
// matmul, has no such remainder (10 bytes per parameter + 0.7 MiB). A plan for a GPU
// (`--device cuda`, scale-down targets) adds it at the first forward; the CPU-emulated
// device has none.
constexpr int64_t kCublasWorkspaceBytes = 64LL << 20;

// [Note: the plan through the caching allocator] Every add() of the timeline is one
// allocation or one free; the timeline also replays them through CachingPool, the
// emulation `zrepro run --allocator caching` uses, so the plan has a reserved peak and
// the cache flushes PyTorch would count. A free names only its bytes and category: it
// frees that category's most recent live block of that size, or, for a free that sums
// several (a layer's parameter gradients), its most recent blocks until the bytes are
// covered. Measured against runs in tests/trainer/planner/planner_test.cpp.
class CachingReplay {
 public:
  explicit CachingReplay(int64_t capacity) : pool_(capacity) {}
  void add(int category, int64_t bytes) {
    if (!fits_) return;  // past the caching allocator's OOM nothing is replayed
    auto& live = live_[category];
    if (bytes > 0) {
      std::optional<CachingPool::Block> b = pool_.allocate(bytes);
      if (!b) {
        fits_ = false;
        return;
      }
      live.push_back({bytes, *b});
      peak_ = std::max(peak_, pool_.reserved());
      return;
    }
    int64_t left = -bytes;
    for (auto it = live.rbegin(); it != live.rend(); ++it)
      if (it->first == left) {
        pool_.free(it->second);
        live.erase(std::next(it).base());
        return;
      }
    while (left > 0 && !live.empty()) {
      left -= live.back().first;
      pool_.free(live.back().second);
      live.pop_back();
    }
    if (left < 0) add(category, -left);  // freed more than asked: keep the difference
  }
  int64_t reserved_peak() const { return peak_; }
  int64_t retries() const { return pool_.alloc_retries(); }
  bool fits() const { return fits_; }

 private:
  CachingPool pool_;
  std::array<std::vector<std::pair<int64_t, CachingPool::Block>>, kNumMemCategories> live_;
  int64_t peak_ = 0;
  bool fits_ = true;
};

// The first allocation the caching allocator cannot place (after flushing its cache).
struct CachingOom {
  Phase phase = Phase::init;
  int64_t request = 0;
  CategoryBytes at{};  // allocated, just before it
};

// The running device total and everything the plan reports about it.
class Timeline {
 public:
  explicit Timeline(MemoryPlan& plan) : p_(plan), caching_(plan.capacity), unbounded_(0) {}
  const CachingReplay& caching() const { return caching_; }
  const CachingReplay& unbounded() const { return p_.capacity > 0 ? unbounded_ : caching_; }
  const std::optional<CachingOom>& caching_oom() const { return caching_oom_; }
  void phase(Phase ph) {
    phase_ = ph;
    if (p_.phases.empty() || p_.phases.back().phase != ph) {
      auto it = std::find_if(p_.phases.begin(), p_.phases.end(), [&](const PhasePeak& x) { return x.phase == ph; });
      if (it == p_.phases.end()) p_.phases.push_back({ph, total_, now_});
    }
  }
  void add(MemCategory c, int64_t bytes) {
    if (bytes == 0) return;
    const int ci = static_cast<int>(c);
    if (bytes > 0 && p_.capacity > 0 && total_ + bytes > p_.capacity && p_.allocated_fits) {
      p_.allocated_fits = false;
      p_.oom_phase = phase_;
      p_.oom_request = bytes;
      p_.at_oom = now_;
    }
    const bool cached_before = caching_.fits();
    caching_.add(ci, bytes);
    if (cached_before && !caching_.fits()) caching_oom_ = CachingOom{phase_, bytes, now_};
    if (p_.capacity > 0) unbounded_.add(ci, bytes);
    now_[ci] += bytes;
    total_ += bytes;
    p_.category_peaks[ci] = std::max(p_.category_peaks[ci], now_[ci]);
    if (total_ > p_.peak_bytes) {
      p_.peak_bytes = total_;
      p_.peak_phase = phase_;
      p_.by_category = now_;
    }
    for (auto& ph : p_.phases)
      if (ph.phase == phase_ && total_ > ph.peak) ph.peak = total_, ph.by_category = now_;
  }
  int64_t now(MemCategory c) const { return now_[static_cast<int>(c)]; }

 private:
  MemoryPlan& p_;
  Phase phase_ = Phase::init;
  int64_t total_ = 0;
  CategoryBytes now_{};
  CachingReplay caching_, unbounded_;
  std::optional<CachingOom> caching_oom_;
};

// The engine's per-layer size tables (zero/schedule/layer_layout.h), from the model.
std::vector<LayerLayout> layer_layouts(const ModelSpec& m, const StagePolicy& policy, int ws,
                                       int64_t persistence_threshold, bool host_shard) {
  std::vector<LayerLayout> out;
  for (const LayerSpec& layer : m.layer_shapes()) {
    std::vector<int64_t> numels;
    for (const auto& p : layer.params) numels.push_back(p.numel());
    out.push_back(layer_layout(numels, policy, ws, persistence_threshold, host_shard));
  }
  return out;
}

// ShardOps on byte counts: GatherSchedule runs the engine's stage-3 algorithm on these
// lifecycles, and each transition adds what ParamGroup allocates or frees for it.
class PlannedShards : public ShardOps {
 public:
  PlannedShards(const std::vector<LayerLayout>& layers, bool host_shard, int64_t pe, Timeline& tl)
      : layers_(layers), pe_(pe), tl_(tl) {
    for (size_t l = 0; l < layers.size(); ++l) life_.emplace_back(true, host_shard);
  }
  void unshard_start(int l) override {
    const ShardLifecycle::Start s = life_[l].start();
    if (s.alloc_dynamic) tl_.add(MemCategory::comm_buffers, layers_[l].dynamic_numel * pe_);
    if (s.alloc_persistent) tl_.add(MemCategory::params, layers_[l].persist_numel * pe_);
    if (s.upload) tl_.add(MemCategory::comm_buffers, layers_[l].shard.shard_numel * pe_);  // the shard's device copy
  }
  void unshard_wait(int l) override {
    if (life_[l].wait().upload_landed) tl_.add(MemCategory::comm_buffers, -layers_[l].shard.shard_numel * pe_);
  }
  void reshard(int l) override {
    unshard_wait(l);  // nothing to wait for unless gathering
    if (life_[l].reshard()) tl_.add(MemCategory::comm_buffers, -layers_[l].dynamic_numel * pe_);
  }
  bool uploading(int l) const override { return life_[l].uploading(); }
  bool host_shard(int l) const override { return life_[l].host_shard(); }
  void mark_stale() {
    for (auto& l : life_) l.mark_stale();
  }

 private:
  const std::vector<LayerLayout>& layers_;
  int64_t pe_;
  Timeline& tl_;
  std::vector<ShardLifecycle> life_;
};

// ReduceOps on byte counts: ReduceSchedule runs GradReducer's bucketing, and each
// event adds what GradReducer allocates or frees. With optimizer offload a bucket's
// output stays alive until its copy to the host landed, at the latest until its
// buffer is refilled; the planner takes it as held until then, and as landed by the
// end of backward. GradReducer does not wait there, so on a loaded machine up to one
// output per buffer can still be in flight during the next forward (measured: +74 KB
// on a 1.3 MB peak; Planner.OffloadMovesStatesToTheHostAsMeasured bounds it).
class PlannedReduce : public ReduceOps {
 public:
  PlannedReduce(const ReduceSchedule& sched, bool reduce_scatter, int64_t comm_elem, const std::vector<bool>& offloaded,
                Timeline& tl, std::function<void()> before_result)
      : sched_(sched), reduce_scatter_(reduce_scatter), ce_(comm_elem), tl_(tl),
        before_result_(std::move(before_result)) {
    held_.assign(sched.buffers(), 0);
    out_.assign(sched.buckets().size(), 0);
    for (const Bucket& b : sched.buckets()) {
      bool off = false;
      for (const auto& p : b.pieces) off = off || offloaded[sched.unit(p.unit).group];
      offloaded_bucket_.push_back(off);
    }
  }
  void allocate_buffers(int count, int64_t numel) override { tl_.add(MemCategory::comm_buffers, count * numel * ce_); }
  void reuse_buffer(int i) override {
    tl_.add(MemCategory::comm_buffers, -held_[i]);  // the reducer waits for the copies of its previous bucket
    held_[i] = 0;
  }
  void fill(int, int, int) override {}
  void launch(int b, int) override {
    out_[b] = reduce_scatter_ ? sched_.buckets()[b].numel_per_rank * ce_ : 0;
    tl_.add(MemCategory::comm_buffers, out_[b]);
  }
  void complete(int b, int buffer) override {
    before_result_();
    if (offloaded_bucket_[b])
      held_[buffer] += out_[b];  // the copy to the host still reads it
    else
      tl_.add(MemCategory::comm_buffers, -out_[b]);
  }
  void end(bool free_buffers) override {
    for (int i = 0; i < sched_.buffers(); ++i) reuse_buffer(i);
    if (free_buffers) tl_.add(MemCategory::comm_buffers, -sched_.buffers() * sched_.buffer_numel() * ce_);
  }

 private:
  const ReduceSchedule& sched_;
  bool reduce_scatter_;
  int64_t ce_;
  Timeline& tl_;
  std::vector<int64_t> held_;  // per buffer: outputs waiting on their copy
  std::vector<int64_t> out_;   // per bucket: its output while in flight
  std::vector<bool> offloaded_bucket_;
  std::function<void()> before_result_;  // GradReducer::Options::before_result
};

// One rank's device timeline over two optimizer steps: the engine's schedules
// (GatherSchedule, ReduceSchedule, ShardLifecycle, BufferPolicy) executed on byte
// counts, driven in the order the GPT model calls the engine, with the model's
// activation tapes between the calls, plus the engine's init and step allocations.
// [Note: a recorded architecture]: a recording is of one dtype; a job computing in another
// needs another recording.
void check_recorded_dtype(const JobSpec& req) {
  const RecordedModel& r = *req.model.recorded;
  const int64_t e = gpt_compute_elem(req.cfg.precision, req.cpu_device);
  if (e == r.compute_bytes) return;
  const std::string want = e == 4 ? "fp32" : precision_name(req.cfg.precision);
  throw ConfigError("--model " + r.path + ": recorded in " + r.dtype + ", and this job computes in " + want +
                    (req.cpu_device && req.cfg.precision == Precision::fp16 ? " (fp16 on the CPU-emulated device)" : "") +
                    ": record it again: " + r.record_command(r.seq, want, r.attention));
}

class PlanSim {
 public:
  PlanSim(const JobSpec& req, MemoryPlan& plan)
      : req_(req), z_(req.cfg.zero), policy_(stage_policy(z_.stage)),
        buffers_(req.buffers ? *req.buffers : buffer_policy(z_)), ws_(req.world_size), plan_(plan), tl_(plan) {
    const Precision p = req.cfg.precision;
    pe_ = p == Precision::fp32 ? 4 : 2;
    ce_ = elem_size(comm_dtype_of(req.cfg));
    B_ = req.cfg.micro_batch;
    layers_ = layer_layouts(req.model, policy_, ws_, z_.stage3_param_persistence_threshold,
                            z_.offload_param.enabled());
    sym_ = gpt_tape_symbols(req.model, B_, p, req.cpu_device);
    fp16_cpu_ = p == Precision::fp16 && req.cpu_device;
    ckpt_ = req.activation_checkpointing;
    cpu_ckpt_ = ckpt_ && req.cfg.activation_checkpointing.cpu_checkpointing;
    if (cpu_ckpt_) plan_.host_bytes = req.model.layers * sym_.at("n");  // one block input per block
    std::vector<std::vector<int64_t>> numels;
    for (const auto& l : layers_) numels.push_back(l.param_numels);
    offloaded_ = offloaded_layers(numels, z_);
    param_offload_ = z_.offload_param.enabled();
    const int rank = req.rank ? *req.rank : rank_holding_most(req);  // this rank's, or the one that holds most
    grad_overhang_bytes_ = grad_overhang_bytes(rank);
    norm_copy_bytes_ = norm_copy_bytes(rank);
    const OffloadHostBytes host = offload_host_bytes(numels, z_, ws_, rank, pe_ == 4 ? torch::kFloat : torch::kBFloat16,
                                                     comm_dtype_of(req.cfg));
    plan_.host_pinned_bytes = host.pinned;
    plan_.host_pageable_bytes = host.pageable;
    offload_grad_temp_bytes_ = offload_grad_temp_numel(numels, z_) * pe_;
    std::vector<int64_t> owned;
    for (const auto& l : layers_) owned.push_back(l.owned_numel());
    step_ = step_schedule(policy_, owned, offloaded_, z_.sub_group_size);
    plan_.block_saved_bytes = block_activation_bytes(req.model, B_, p, req.cpu_device);
    plan_.activation_source = req.model.recorded
                                  ? req.model.recorded->source()
                                  : "zrepro's model: tapes of LibTorch " + planner_tapes().libtorch + " (" +
                                        gpt_tape_key(req.model, GptTape::block_forward, B_, p, req.cpu_device) + ")";
    grads_held_.assign(layers_.size(), false);
    moments_.assign(layers_.size(), false);
  }

  void run() {
    init();
    // The resume copies the checkpoint's host tensors into the engine's own: the device
    // holds what init allocated (trainer/checkpoint/ds_checkpoint.h load_checkpoint).
    // The resume creates the moments it loads into.
    if (req_.resumes) {
      tl_.phase(Phase::load);
      for (size_t l = 0; l < layers_.size(); ++l) create_moments(l);
    }
    int64_t retries_before = 0;
    for (int step = 0; step < 2; ++step) {
      retries_before = tl_.caching().retries();
      for (int64_t t = 0; t < req_.cfg.grad_accum; ++t) micro_step(t);
      optimizer_step();
    }
    if (req_.saves_checkpoints) save();
    plan_.reserved_peak_bytes = tl_.caching().reserved_peak();
    plan_.alloc_retries_per_step = tl_.caching().retries() - retries_before;
    plan_.reserved_fits = tl_.caching().fits();
    plan_.unbounded_reserved_peak_bytes = tl_.unbounded().reserved_peak();
    bind_verdict();
    for (size_t l = 0; l < layers_.size(); ++l) {
      plan_.model_states[static_cast<int>(MemCategory::params)] += layers_[l].param_device_numel(param_offload_) * pe_;
      plan_.model_states[static_cast<int>(MemCategory::grads)] += grad_bytes(l);
      plan_.model_states[static_cast<int>(MemCategory::optimizer_states)] += optimizer_bytes(l);
    }
    plan_.model_states[static_cast<int>(MemCategory::grads)] += grad_overhang_bytes_ + offload_grad_temp_bytes_;
  }

 private:
  // [Note: the capacity binds where PyTorch's OOM does]: the verdict on what the job's
  // allocator binds on. The caching allocator fails at or before the allocated bytes cross
  // the capacity (its reserved bytes are never fewer), so its failure is the first.
  void bind_verdict() {
    plan_.binds_on_reserved = req_.binds_on_reserved();
    plan_.fits = plan_.allocated_fits;
    if (!plan_.binds_on_reserved || plan_.reserved_fits || !tl_.caching_oom()) return;
    plan_.fits = false;
    plan_.oom_phase = tl_.caching_oom()->phase;
    plan_.oom_request = tl_.caching_oom()->request;
    plan_.at_oom = tl_.caching_oom()->at;
  }

  // Persistent gradient storage: the full layout (stages 0-1) or the owned part on
  // the device (offloaded layers accumulate on the host).
  int64_t grad_bytes(size_t l) const { return layers_[l].grad_storage_numel(offloaded_[l]) * pe_; }
  // The engine's gradient overhang (DeepSpeed's whole-parameter partition, stage 2) of `rank`.
  int64_t grad_overhang_bytes(int rank) const {
    for (bool off : offloaded_)
      if (off) return 0;
    std::vector<const LayerLayout*> layouts;
    for (const auto& l : layers_) layouts.push_back(&l);
    return grad_overhang_numel(layouts, ws_, rank) * pe_;
  }
  // The step's largest fp64 copy for the norm; none when the optimizer is offloaded (its
  // norms are taken in the backward).
  int64_t norm_copy_bytes(int rank) const {
    for (bool off : offloaded_)
      if (off) return 0;
    std::vector<const LayerLayout*> layouts;
    for (const auto& l : layers_) layouts.push_back(&l);
    return 8 * norm_copy_numel(layouts, ws_, rank);
  }
  // BufferPolicy::second_grad_partition: the owned gradients plus the overhang, once more.
  int64_t second_partition_bytes() const {
    int64_t n = 0;
    for (size_t l = 0; l < layers_.size(); ++l) n += grad_bytes(l);
    return n + grad_overhang_bytes_;
  }
  bool master_aliased() const { return policy_.owns_whole_flat() && pe_ == 4; }  // DeviceAdam updates in place
  int64_t optimizer_bytes(size_t l) const {
    if (offloaded_[l]) return 0;
    return (master_aliased() ? 2 : 3) * 4 * layers_[l].owned_numel();
  }
  int last() const { return static_cast<int>(layers_.size()) - 1; }

  // ZeroEngine's constructor: parameters per layer, then the fp32 masters, DeepSpeed's
  // transient zero gradient and (stage 3) the gradient partition (phase partition), then
  // the reducer's persistent buffers. The moments come with the first step, the gradients
  // of stages 0-2 with the step's first reduction ([Note: DeepSpeed's optimizer-state and
  // gradient lifetimes], zero/schedule/step_schedule.h).
  void init() {
    tl_.phase(Phase::init);
    // [Note: DeepSpeed flattens the module it was handed] (zero/engine.cpp): stages 1-2.
    const int64_t module_bytes = module_flatten_bytes(policy_, req_.model.param_count() * pe_, plan_.capacity, 0);
    tl_.add(MemCategory::params, module_bytes);
    for (size_t l = 0; l < layers_.size(); ++l) {
      tl_.add(MemCategory::params, layers_[l].resident_param_numel(param_offload_) * pe_);
      tl_.add(MemCategory::other, 4);  // the layer's autograd carrier
    }
    tl_.add(MemCategory::params, -module_bytes);
    tl_.phase(Phase::partition);
    tl_.add(MemCategory::grads, offload_grad_temp_bytes_);  // OptimizerOffload's device buffer
    for (size_t l = 0; l < layers_.size(); ++l)
      if (optimizer_bytes(l) != 0 && !master_aliased())  // offloaded: master and moments on the host
        tl_.add(MemCategory::optimizer_states, 4 * layers_[l].owned_numel());
    tl_.add(MemCategory::other, 4 * step_.init_transient_numel);
    tl_.add(MemCategory::other, -4 * step_.init_transient_numel);
    if (step_.grads_persist) hold_all_grads();
    tl_.phase(Phase::init);
    if (policy_.shard_params()) {
      std::vector<int64_t> dyn;
      for (const auto& l : layers_) dyn.push_back(l.dynamic_numel);
      gathers_ = std::make_unique<GatherSchedule>(
          dyn, GatherSchedule::Options{z_.stage3_prefetch_bucket_size, z_.stage3_max_live_parameters,
                                       z_.stage3_max_reuse_distance, buffers_.max_param_uploads});
      shards_ = std::make_unique<PlannedShards>(layers_, param_offload_, pe_, tl_);
    }
    if (policy_.uses_reducer()) {
      std::vector<std::pair<int, const LayerLayout*>> reverse;
      for (int g = last(); g >= 0; --g) reverse.emplace_back(g, &layers_[g]);
      reduce_ = std::make_unique<ReduceSchedule>(reverse, z_.reduce_bucket_size, ws_, buffers_);
      reduce_ops_ = std::make_unique<PlannedReduce>(*reduce_, bucket_reduce_scatters(z_), ce_, offloaded_, tl_,
                                                    [this] { hold_reduced_partitions(); });
      reduce_->prepare(*reduce_ops_);
    }
    std::vector<const LayerLayout*> layouts;
    for (const auto& l : layers_) layouts.push_back(&l);
    const int64_t hooked = pe_ * hook_gather_numel(layouts, param_offload_);  // ZeroEngine's constructor
    tl_.add(MemCategory::comm_buffers, hooked);
    tl_.add(MemCategory::comm_buffers, -hooked);
    // zrepro's model keeps its causal mask and rotary table from init; transformers' builds
    // them in each forward, which a recorded tape holds ([Note: a recorded architecture]).
    const ModelSpec& m = req_.model;
    if (m.recorded) return;
    tl_.add(MemCategory::other, m.seq * m.seq);  // causal mask (bool)
    if (m.family == Family::llama) tl_.add(MemCategory::other, 2 * m.seq * m.head_dim() * compute_elem());  // rotary
  }
  int64_t compute_elem() const { return gpt_compute_elem(req_.cfg.precision, req_.cpu_device); }

  // ZeroEngine::allocate_grad / allocate_grads: gradient storage from its first
  // reduction (stages 0-1: per layer; 2: the whole partition and the overhang at once).
  void hold_grad(size_t l) {
    if (grads_held_[l]) return;
    grads_held_[l] = true;
    tl_.add(MemCategory::grads, grad_bytes(l));
  }
  void hold_all_grads() {
    for (size_t l = 0; l < layers_.size(); ++l) hold_grad(l);
    if (!overhang_held_) tl_.add(MemCategory::grads, grad_overhang_bytes_);
    overhang_held_ = true;
  }
  // Stage 2's partition comes with the first bucket's result (PlannedReduce::complete,
  // as GradReducer::Options::before_result).
  void hold_grads_for(size_t l) {
    if (policy_.reduction() != GradReduction::reduce_scatter_per_micro_step) hold_grad(l);
  }
  // ZeroEngine::allocate_reduced_partitions.
  void hold_reduced_partitions() {
    if (policy_.reduction() == GradReduction::reduce_scatter_at_boundary) return hold_reduced_flat();
    hold_all_grads();
    if (second_held_ || second_partition_ == 0) return;
    second_held_ = true;
    tl_.add(MemCategory::grads, second_partition_);
  }
  // ZeroEngine::allocate_reduced_flat: stage 1's reduced partition, at its first bucket result.
  void hold_reduced_flat() {
    if (reduced_flat_held_ || step_.groups.empty()) return;
    reduced_flat_held_ = true;
    tl_.add(MemCategory::comm_buffers, step_.groups.front().numel * pe_);
  }
  void release_reduced_flat() {
    if (reduced_flat_held_) tl_.add(MemCategory::comm_buffers, -step_.groups.front().numel * pe_);
    reduced_flat_held_ = false;
  }
  // ZeroEngine::reduce_accumulated ([Note: ZeRO-1 reduces in the boundary's backward]).
  void reduce_accumulated() {
    hold_all_grads();
    for (int g = last(); g >= 0; --g) {
      reduce_->add(g, *reduce_ops_);
      release_grad(g);  // copied into the bucket
    }
    reduce_->finish(*reduce_ops_);
    boundary_reduced_ = true;
  }
  void release_grad(size_t l) {
    if (!grads_held_[l]) return;
    grads_held_[l] = false;
    tl_.add(MemCategory::grads, -grad_bytes(l));
  }
  void release_overhang() {
    if (overhang_held_) tl_.add(MemCategory::grads, -grad_overhang_bytes_);
    overhang_held_ = false;
  }
  // DeviceAdam::create_moments: the first update of a layer (or a resume's load).
  void create_moments(size_t l) {
    if (moments_[l] || optimizer_bytes(l) == 0) return;
    moments_[l] = true;
    tl_.add(MemCategory::optimizer_states, 4 * layers_[l].owned_numel());  // exp_avg
    tl_.add(MemCategory::optimizer_states, 4 * layers_[l].owned_numel());  // exp_avg_sq
  }

  // ---- the engine's entry points, as the model calls them
  void fetch(int l) {
    if (gathers_) gathers_->fetch(l, *shards_);
  }
  void release(int l) {
    if (gathers_) gathers_->release(l, *shards_);
  }
  void tape(GptTape which) {
    replay_tape(gpt_tape(req_.model, which, B_, req_.cfg.precision, req_.cpu_device, ckpt_), sym_,
                [&](int64_t b) { tl_.add(MemCategory::activations, b); },
                [&](int64_t b) {
                  tl_.add(MemCategory::activations, b);
                  param_grads_ += b;
                },
                which == GptTape::block_backward_mlp || which == GptTape::block_backward_recomputed_mlp
                    ? static_cast<int>(req_.model.experts)
                    : 0);
  }
  // A MoE block's routing, saved from its forward to its backward ([Note: MoE in the planner]).
  void moe_dispatch(int sign) {
    if (req_.model.moe()) tl_.add(MemCategory::activations, sign * moe_dispatch_bytes(req_.model, B_, compute_elem()));
  }
  // fp16 on the CPU: every layer's weights are cast to fp32 for compute and saved.
  void weight_copies(int l, int sign) {
    if (fp16_cpu_) tl_.add(MemCategory::activations, sign * 4 * layers_[l].numel);
  }
  // The layer's parameter gradients are complete (ZeroEngine::reduce_grad): reduce
  // (per micro-step stages) or add into the full gradient, then autograd frees them.
  void reduce(int l) {
    hold_grads_for(l);
    if (policy_.reduction() == GradReduction::reduce_scatter_per_micro_step) reduce_->add(l, *reduce_ops_);
    if (buffers_.reduce_buffers_at_first_grad) reduce_->open(*reduce_ops_);
    release(l);
    tl_.add(MemCategory::activations, -param_grads_);
    param_grads_ = 0;
    weight_copies(l, -1);
  }

  void forward() {
    const int L = last();
    tl_.phase(Phase::forward);
    fetch(0);
    weight_copies(0, +1);
    tape(GptTape::embed_forward);
    release(0);
    if (!req_.cpu_device && !cublas_workspace_) {  // the first matmul on a GPU
      cublas_workspace_ = true;
      tl_.add(MemCategory::other, kCublasWorkspaceBytes);
    }
    for (int l = 1; l < L; ++l) {
      fetch(l);
      if (!ckpt_) weight_copies(l, +1);  // a checkpointed block saves them in its recomputation
      tape(ckpt_ ? GptTape::block_forward_no_grad : GptTape::block_forward);
      if (!ckpt_) moe_dispatch(+1);
      // cpu checkpointing keeps the block's input on the host: the previous output dies.
      if (cpu_ckpt_) tl_.add(MemCategory::activations, -sym_.at("n"));
      release(l);
      tape(ckpt_ ? GptTape::between_checkpointed_blocks : GptTape::between_blocks);
    }
    if (tied()) {  // the LM head is the embedding: the embed group again (Gpt::loss)
      fetch(0);
      if (fp16_cpu_) tl_.add(MemCategory::activations, 4 * tied_numel());
    }
    fetch(L);
    weight_copies(L, +1);
    tape(GptTape::head_forward);
    if (tied()) release(0);
    release(L);
  }
  bool tied() const { return req_.model.tied; }
  int64_t tied_numel() const { return req_.model.vocab * req_.model.hidden; }

  void backward() {
    const int L = last();
    tl_.phase(Phase::backward);
    if (tied()) fetch(0);
    fetch(L);
    tape(GptTape::head_backward);
    if (tied()) {
      // The head's gradient of the embedding is kept until the embedding's own
      // (ZeroEngine::use_backward, [Note: a group used twice]).
      param_grads_ -= sym_.at("Wlm");
      kept_grads_ += sym_.at("Wlm");
    }
    reduce(L);
    if (tied()) {
      release(0);
      if (fp16_cpu_) tl_.add(MemCategory::activations, -4 * tied_numel());
    }
    for (int l = L - 1; l >= 1; --l) {
      fetch(l);
      if (ckpt_) {
        fetch(l);  // the recomputation acquires the layer again
        weight_copies(l, +1);
        tape(GptTape::block_recompute);
        moe_dispatch(+1);
        tape(GptTape::block_backward_recomputed_mlp);
        moe_dispatch(-1);  // the MLP's backward is done with the routing
        tape(GptTape::block_backward_recomputed_attn);
        reduce(l);
        tape(GptTape::block_recompute_release);
        // With cpu checkpointing one of those frees is the host copy of the input.
        if (cpu_ckpt_) tl_.add(MemCategory::activations, sym_.at("n"));
      } else {
        tape(GptTape::block_backward_mlp);
        moe_dispatch(-1);  // the MLP's backward is done with the routing
        tape(GptTape::block_backward_attn);
        reduce(l);
      }
    }
    fetch(0);
    tape(GptTape::embed_backward);
    reduce(0);
    tl_.add(MemCategory::activations, -kept_grads_);
    kept_grads_ = 0;
    tape(GptTape::backward_tail);
    // ZeroEngine::end_backward
    if (policy_.reduction() == GradReduction::reduce_scatter_per_micro_step)
      reduce_->finish(*reduce_ops_);
    else if (policy_.reduction() == GradReduction::reduce_scatter_at_boundary && boundary_micro_step_)
      reduce_accumulated();
    if (second_held_) tl_.add(MemCategory::grads, -second_partition_);
    second_held_ = false;
    if (gathers_) gathers_->end_backward(*shards_);
  }

  void micro_step(int64_t t) {
    const int64_t batch = B_ * (req_.model.seq + 1) * 8;  // int64 tokens
    tl_.add(MemCategory::other, batch);
    if (gathers_) gathers_->begin_micro_step();
    boundary_micro_step_ = t + 1 == req_.cfg.grad_accum;
    forward();
    second_partition_ = buffers_.second_grad_partition && t > 0 ? second_partition_bytes() : 0;
    backward();
    tl_.add(MemCategory::other, -batch);
  }

  // ZeroEngine::step: the gradients of layers no backward reached, stage 1's reduce when
  // the backward did not do it, per layer the fp32 copy the norm is taken of
  // (16-bit grads), then the update: a step group's flat fp32 gradient at once, a layer
  // outside any group (stage 0) its own fp32 copy, offloaded layers none on the device.
  void optimizer_step() {
    tl_.phase(Phase::step);
    if (!boundary_reduced_) hold_all_grads();
    if (policy_.reduction() == GradReduction::reduce_scatter_at_boundary && !boundary_reduced_) reduce_accumulated();
    // The norm: at stages 1-3 one fp64 copy of one gradient piece at a time ([Note: the
    // gradient norm's fp64 copies]); at stage 0 each layer's share of 16-bit gradients in fp32.
    tl_.add(MemCategory::other, norm_copy_bytes_);
    tl_.add(MemCategory::other, -norm_copy_bytes_);
    for (size_t l = 0; l < layers_.size() && policy_.owns_whole_flat(); ++l) {
      if (pe_ == 4 || offloaded_[l]) continue;
      tl_.add(MemCategory::other, 4 * layers_[l].flat.partition_numel);
      tl_.add(MemCategory::other, -4 * layers_[l].flat.partition_numel);
    }
    for (size_t l = 0; l < layers_.size(); ++l) {
      const int gi = step_.group_of[l];
      if (gi >= 0) {
        if (step_.groups[gi].layers.front() == static_cast<int>(l)) update_group(step_.groups[gi]);
        continue;
      }
      create_moments(l);
      if (pe_ == 4 || offloaded_[l]) continue;
      const int64_t g = policy_.owns_whole_flat() ? layers_[l].full_grad_numel() : layers_[l].owned_numel();
      tl_.add(MemCategory::other, 4 * g);
      tl_.add(MemCategory::other, -4 * g);
    }
    if (!step_.grads_persist) {  // ZeroEngine::zero_grads
      for (size_t l = 0; l < layers_.size(); ++l) release_grad(l);
      release_overhang();
    }
    boundary_reduced_ = false;
    if (shards_) shards_->mark_stale();  // persistent parameters are re-gathered
  }
  // ZeroEngine::update_group: the flat copy, its fp32 copy, the 16-bit gradients (stage 1:
  // the reduced partition) freed at stages 1-2, the moments of a first step, the fp32
  // gradient freed.
  void update_group(const StepGroup& group) {
    const int64_t S = group.numel;
    tl_.add(MemCategory::other, pe_ * S);
    if (pe_ != 4) {
      tl_.add(MemCategory::other, 4 * S);
      tl_.add(MemCategory::other, -pe_ * S);
    }
    if (!step_.grads_persist) {
      for (int l : group.layers) release_grad(l);
      if (group.layers.back() == step_.groups.back().layers.back()) {
        release_overhang();
        release_reduced_flat();
      }
    }
    for (int l : group.layers) create_moments(l);
    tl_.add(MemCategory::other, -4 * S);
  }


  // A checkpoint after the step: its copies are host memory; with ZeRO-3 and
  // stage3_gather_16bit_weights_on_model_save every group is gathered once more, one at a
  // time ([Note: the 16-bit consolidation at save], ds_checkpoint.h).
  void save() {
    tl_.phase(Phase::save);
    if (!shards_ || !z_.stage3_gather_16bit_weights_on_model_save) return;
    for (int l = 0; l <= last(); ++l) {
      shards_->unshard_start(l);
      shards_->unshard_wait(l);
      shards_->reshard(l);
    }
  }

  const JobSpec& req_;
  const ZeroConfig& z_;
  StagePolicy policy_;
  BufferPolicy buffers_;
  int ws_;
  MemoryPlan& plan_;
  Timeline tl_;
  int64_t pe_ = 4, ce_ = 4, B_ = 1;
  bool fp16_cpu_ = false, ckpt_ = false, cpu_ckpt_ = false;
  std::vector<LayerLayout> layers_;
  TapeSymbols sym_;
  std::unique_ptr<GatherSchedule> gathers_;
  std::unique_ptr<PlannedShards> shards_;
  std::unique_ptr<ReduceSchedule> reduce_;
  std::unique_ptr<PlannedReduce> reduce_ops_;
  std::vector<bool> offloaded_;  // optimizer on the host
  bool param_offload_ = false;
  int64_t grad_overhang_bytes_ = 0;
  int64_t norm_copy_bytes_ = 0;
  int64_t offload_grad_temp_bytes_ = 0;
  int64_t second_partition_ = 0;  // bytes held during this micro-step's backward
  bool second_held_ = false;      // from its first bucket result
  bool reduced_flat_held_ = false;     // stage 1: the reduced partition, from its first bucket result
  bool boundary_micro_step_ = false;   // the micro-step planned is the step's last
  bool boundary_reduced_ = false;      // stage 1: reduced at the end of the boundary's backward
  int64_t param_grads_ = 0;
  int64_t kept_grads_ = 0;  // tied: the head's embedding gradient, until the embedding's reduce
  StepSchedule step_;
  std::vector<bool> grads_held_, moments_;  // per layer: gradient storage held, moments created
  bool overhang_held_ = false;
  bool cublas_workspace_ = false;
};

json categories_json(const CategoryBytes& c) {
  json j = json::object();
  for (int i = 0; i < kNumMemCategories; ++i) j[mem_category_name(static_cast<MemCategory>(i))] = c[i];
  return j;
}

}  // namespace

std::vector<DeepSpeedEstimate> deepspeed_estimates(int64_t psi, int64_t largest, int gpn, int nodes, int stage) {
  const double P = static_cast<double>(psi), n = gpn, G = static_cast<double>(gpn) * nodes, f = 1.5;
  const double L = static_cast<double>(largest), per_node = 1.0 / nodes;
  std::vector<DeepSpeedEstimate> out;
  // DeepSpeed truncates each term to an integer as below (int(18 * psi / G), int(cpu)).
  auto add = [&](std::string setting, double gpu, double cpu, std::string formula) {
    out.push_back({std::move(setting), static_cast<int64_t>(gpu), static_cast<int64_t>(cpu), std::move(formula)});
  };
  auto trunc = [](double x) { return std::floor(x); };
  if (!stage_policy(stage).shard_params()) {  // estimate_zero2 vs estimate_zero3
    add("zero2, offload_optimizer=none", 2 * P + trunc(18 * P / G), P * 4 * n * f,
        "gpu 2psi + 18psi/G; cpu 4psi*gpus_per_node*1.5");
    add("zero2, offload_optimizer=cpu", 2 * P, P * std::max(4 * G, 16.0) * f, "gpu 2psi; cpu psi*max(4G,16)*1.5");
  } else {
    add("zero3, offload_param=none, offload_optimizer=none", 4 * L + trunc(18 * P / G), L * 4 * n * f,
        "gpu 4L + 18psi/G; cpu 4L*gpus_per_node*1.5");
    add("zero3, offload_param=none, offload_optimizer=cpu", 4 * L + trunc(2 * P / G), P * 16 * per_node * f,
        "gpu 4L + 2psi/G; cpu 16psi/nodes*1.5");
    add("zero3, offload_param=cpu, offload_optimizer=cpu", 4 * L, P * 18 * per_node * f, "gpu 4L; cpu 18psi/nodes*1.5");
  }
  return out;
}

int rank_holding_most(const JobSpec& job) {
  const StagePolicy policy = stage_policy(job.cfg.zero.stage);
  if (!policy.shard_optimizer() || policy.shard_params()) return 0;  // stages 0 and 3: every rank alike
  std::vector<std::vector<int64_t>> numels;
  for (const LayerSpec& layer : job.model.layer_shapes()) {
    numels.emplace_back();
    for (const auto& p : layer.params) numels.back().push_back(p.numel());
  }
  int most = 0;
  int64_t most_overhang = -1;
  for (int r = 0; r < job.world_size; ++r) {
    const int64_t n = whole_param_overhang_numel(numels, job.world_size, r);
    if (n > most_overhang) most = r, most_overhang = n;
  }
  return most;
}

MemoryPlan plan_memory(const JobSpec& req) {
  if (req.model.recorded) check_recorded_dtype(req);
  MemoryPlan plan;
  plan.world_size = req.world_size;
  plan.zero_stage = req.cfg.zero.stage;
  plan.capacity = req.device_capacity;
  PlanSim(req, plan).run();
  if (req.saves_checkpoints) {
    const int64_t params = req.model.param_count();
    plan.save_16bit_host_bytes =
        save_16bit_host_bytes(req.cfg.zero, params, req.cfg.precision == Precision::fp32 ? 4 : 2);
    // At the script's default --max_shard_size.
    const Fp32ConsolidationBytes b =
        zero_to_fp32_model_bytes(req.model, req.cfg.zero.stage, kZeroToFp32DefaultShardBytes);
    plan.zero_to_fp32_api_bytes = b.api;
    plan.zero_to_fp32_script_bytes = b.script;
    plan.zero_to_fp32_mapped_bytes = b.mapped;
  }
  const int gpn = req.gpus_per_node > 0 ? req.gpus_per_node : req.world_size;
  plan.deepspeed = deepspeed_estimates(req.model.param_count(), req.model.largest_module_params(), gpn,
                                       std::max(1, req.world_size / gpn), req.cfg.zero.stage);
  if (plan.host_pinned_bytes > 0 && req.cpu_device) {
    const MemlockInfo ml = memlock_info();
    plan.memlock_available = ml.available();
    plan.memlock_limit = ml.limit_bytes;
    plan.pinned_fits = plan.memlock_available < 0 || plan.host_pinned_bytes <= plan.memlock_available;
  }
  // [Note: tapes of this LibTorch]: oneDNN's bf16 GEMM scratch is not planned.
  const int64_t scratch = planner_tapes().bf16_gemm_scratch_bytes;
  if (req.cpu_device && req.cfg.precision == Precision::bf16 && scratch > 0)
    plan.not_planned = "this CPU's bf16 matmuls go through oneDNN, which allocates transient reorder buffers (" +
                       format_bytes(scratch) + " for one [800 x 256] x [256 x 1024] matmul) that no GPU has: a bf16 run "
                       "on this CPU-emulated device may peak a little above this plan (docs/guide/build.md)";
  return plan;
}

json MemoryPlan::to_json() const {
  json phases_j = json::array();
  for (const auto& p : phases)
    phases_j.push_back({{"phase", phase_name(p.phase)}, {"peak_bytes", p.peak}, {"by_category", categories_json(p.by_category)}});
  json ds = json::array();
  for (const auto& d : deepspeed)
    ds.push_back({{"setting", d.setting}, {"gpu_bytes", d.gpu_bytes}, {"cpu_bytes", d.cpu_bytes}, {"formula", d.formula}});
  json j = {{"world_size", world_size},
            {"zero_stage", zero_stage},
            {"device_capacity_bytes", capacity},
            {"peak_bytes", peak_bytes},
            {"peak_phase", phase_name(peak_phase)},
            {"by_category", categories_json(by_category)},
            {"category_peaks", categories_json(category_peaks)},
            {"model_states", categories_json(model_states)},
            {"phases", phases_j},
            {"host_bytes", host_bytes},
            {"activations", {{"block_saved_bytes", block_saved_bytes}, {"source", activation_source}}},
            {"checkpoint_host", {{"save_16bit_rank0_bytes", save_16bit_host_bytes},
                                 {"zero_to_fp32_api_anon_bytes", zero_to_fp32_api_bytes},
                                 {"zero_to_fp32_script_anon_bytes", zero_to_fp32_script_bytes},
                                 {"zero_to_fp32_mapped_bytes", zero_to_fp32_mapped_bytes}}},
            {"host_pinned_bytes", host_pinned_bytes},
            {"host_pageable_bytes", host_pageable_bytes},
            {"verdict", !pinned_fits ? "pinned-memory" : capacity == 0 || fits ? "fits" : "oom"},
            {"pinned_fits", pinned_fits},
            {"memlock_available_bytes", memlock_available < 0 ? json(nullptr) : json(memlock_available)},
            {"oom_phase", fits ? json(nullptr) : json(phase_name(oom_phase))},
            {"binds_on", binds_on_reserved ? "reserved" : "allocated"},
            {"allocated_fits", allocated_fits},
            {"not_planned", not_planned.empty() ? json(nullptr) : json(not_planned)},
            {"caching_allocator", {{"reserved_peak_bytes", reserved_peak_bytes},
                                   {"alloc_retries_per_step", alloc_retries_per_step},
                                   {"reserved_fits", reserved_fits},
                                   {"unbounded_reserved_peak_bytes", unbounded_reserved_peak_bytes}}},
            {"deepspeed_estimates", ds},
            // Every rank holds the same amounts (equal padded partitions and shards).
            {"ranks", "all ranks equal"}};
  if (!fits) {
    j["oom_request_bytes"] = oom_request;
    j["at_oom"] = categories_json(at_oom);
  }
  return j;
}

// [Note: which phase an OOM is in] The planner replays the step allocation by allocation:
// the verdict names the first allocation past the capacity and its phase, and the peak
// the run would reach were it to fit (often a later phase). A job's own OOM message may
// name another phase than the first allocation that does not fit: under activation
// checkpointing the forward is recomputed inside backward (PyTorch reports backward), and
// a caching allocator's reserve or fragmentation (docs/guide/run.md) makes an earlier,
// smaller allocation fail first. Both are said where they apply.
static std::string oom_verdict(const MemoryPlan& p, const JobSpec& req) {
  int top = 0;
  for (int c = 1; c < kNumMemCategories; ++c)
    if (p.at_oom[c] > p.at_oom[top]) top = c;
  std::ostringstream os;
  const std::string in_use = format_bytes(std::accumulate(p.at_oom.begin(), p.at_oom.end(), int64_t{0})) +
                             " in use (largest: " + mem_category_name(static_cast<MemCategory>(top)) + " " +
                             format_bytes(p.at_oom[top]) + ")";
  if (p.binds_on_reserved && p.allocated_fits) {  // the caching allocator's own OOM: fragmentation
    os << "  verdict: OOM in phase " << phase_name(p.oom_phase) << ": PyTorch's caching allocator finds no room for a "
       << format_bytes(p.oom_request) << " block even after flushing its cache, with " << in_use
       << "; the allocated bytes alone would peak at " << format_bytes(p.peak_bytes) << " ("
       << (100 * p.peak_bytes / p.capacity) << "% of the capacity, in phase " << phase_name(p.peak_phase)
       << "): its segments fragment (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True maps pages instead)\n";
    return os.str();
  }
  os << "  verdict: OOM in phase " << phase_name(p.oom_phase) << ": the first allocation "
     << (p.binds_on_reserved ? "PyTorch's caching allocator cannot place even after flushing its cache ("
                             : "past the capacity (")
     << format_bytes(p.oom_request) << ") comes in " << phase_name(p.oom_phase) << " with " << in_use;
  if (p.peak_phase != p.oom_phase)
    os << "; were it to fit, the run would peak at " << format_bytes(p.peak_bytes) << " in phase "
       << phase_name(p.peak_phase);
  else
    os << "; the run would need " << format_bytes(p.peak_bytes);
  os << "\n";
  if (req.activation_checkpointing && p.oom_phase == Phase::forward)
    os << "  (with activation checkpointing each block's forward runs again inside backward: the job's own OOM "
          "may be reported from backward)\n";
  else if (p.peak_phase != p.oom_phase)
    os << "  (a job whose allocator holds a reserve or fragments may fail at an earlier, smaller allocation; one "
          "that frees sooner than this plan may first fail at the peak in " << phase_name(p.peak_phase) << ")\n";
  return os.str();
}

// The plan through the caching allocator ([Note: the plan through the caching allocator]):
// how close its reserved peak comes to the capacity, and the cache flushes to expect.
static std::string caching_line(const MemoryPlan& p) {
  std::ostringstream os;
  os << "  caching allocator (PyTorch's default; emulated): reserved peak " << format_bytes(p.reserved_peak_bytes)
     << " (" << (100 * p.reserved_peak_bytes / p.capacity) << "% of the capacity)";
  if (p.unbounded_reserved_peak_bytes > p.reserved_peak_bytes)
    os << ", " << format_bytes(p.unbounded_reserved_peak_bytes) << " with room to spare";
  if (!p.reserved_fits)  // and the verdict binds on allocated bytes: this job's device accounts exactly
    os << "; a segment does not fit even after flushing the cache: on a GPU the caching allocator would run out of "
          "memory before the allocated bytes reach the capacity (fragmentation; "
          "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True); this device accounts exactly (run --allocator caching "
          "emulates a GPU's)";
  else if (p.alloc_retries_per_step > 0)
    os << "; " << p.alloc_retries_per_step
       << " cache flush(es) per step expected (DeepSpeed's ZeRO-3 warns \"pytorch allocator cache flushes since last "
          "step\"): memory pressure, an OOM one step away";
  else
    os << "; no cache flush expected";
  return os.str() + "\n";
}

// What checkpoints cost the host (trainer/checkpoint/host_bytes.h), beside the device phases.
static std::string checkpoint_host_line(const MemoryPlan& p, const JobSpec& req) {
  std::ostringstream os;
  os << "  checkpoints: the save and load phases are device phases above; host memory: ";
  if (p.save_16bit_host_bytes > 0)
    os << "rank 0 holds the whole 16-bit model, " << format_bytes(p.save_16bit_host_bytes)
       << ", at every save (stage3_gather_16bit_weights_on_model_save)";
  else
    os << "no 16-bit model is consolidated at a save";
  os << "; to consolidate it offline DeepSpeed's get_fp32_state_dict_from_zero_checkpoint needs "
     << format_bytes(p.zero_to_fp32_api_bytes) << " of anonymous host memory (the fp32 model), zero_to_fp32.py "
     << format_bytes(p.zero_to_fp32_script_bytes)
     << (stage_policy(req.cfg.zero.stage).shard_params()
             ? std::string(" (its largest ") + kZeroToFp32DefaultShardSize + " shard)"
             : std::string(" (stages 1-2 concatenate the whole model first)"))
     << ", each beside " << format_bytes(p.zero_to_fp32_mapped_bytes)
     << " of mapped checkpoint pages and ~550 MB for Python (zrepro run --zero-to-fp32 measures it)\n";
  return os.str();
}

namespace plan_text {

// The phase table: a row per phase and the peak, bytes by category.
std::string phase_table(const MemoryPlan& p) {
  std::ostringstream os;
  char line[256];
  std::snprintf(line, sizeof line, "  %-10s %12s", "phase", "peak");
  os << line;
  for (int c = 0; c < kNumMemCategories; ++c) {
    std::snprintf(line, sizeof line, " %14s", mem_category_name(static_cast<MemCategory>(c)));
    os << line;
  }
  os << "\n";
  auto row = [&](const std::string& name, int64_t total, const CategoryBytes& by) {
    std::snprintf(line, sizeof line, "  %-10s %12s", name.c_str(), format_bytes(total).c_str());
    os << line;
    for (int c = 0; c < kNumMemCategories; ++c) {
      std::snprintf(line, sizeof line, " %14s", format_bytes(by[c]).c_str());
      os << line;
    }
    os << "\n";
  };
  for (const auto& ph : p.phases) row(phase_name(ph.phase), ph.peak, ph.by_category);
  row("PEAK", p.peak_bytes, p.by_category);
  return os.str();
}

// Offload's host memory per rank, against this machine's memlock limit ("" without offload).
std::string offload_host_line(const MemoryPlan& p, const JobSpec& req) {
  if (p.host_pinned_bytes <= 0 && p.host_pageable_bytes <= 0) return "";
  std::ostringstream os;
  os << "  offload host memory per rank: " << format_bytes(p.host_pinned_bytes) << " pinned, "
     << format_bytes(p.host_pageable_bytes) << " pageable";
  if (p.host_pinned_bytes > 0 && req.cpu_device) {
    if (!p.pinned_fits)
      os << "\n  pinned-memory: this machine may lock only " << format_bytes(p.memlock_available) << " (ulimit -l "
         << p.memlock_limit / 1024 << " KiB, CAP_IPC_LOCK not held): the run would fail at init. Raise ulimit -l "
         << "or set pin_memory false";
    else
      os << " (fits this machine's memlock limit)";
  }
  return os.str() + "\n";
}

// The verdict against the capacity ("" without one).
std::string verdict_line(const MemoryPlan& p, const JobSpec& req) {
  std::ostringstream os;
  if (!p.pinned_fits) {
    os << "  verdict: fails at init: offload needs " << format_bytes(p.host_pinned_bytes) << " of pinned host memory, "
       << "this machine may lock " << format_bytes(p.memlock_available) << "\n";
    return os.str();
  }
  if (p.capacity <= 0) return "";
  if (p.fits && p.binds_on_reserved)
    os << "  verdict: fits (binding on reserved bytes, as PyTorch's caching allocator does: reserved peak "
       << format_bytes(p.reserved_peak_bytes) << ", " << format_bytes(p.capacity - p.reserved_peak_bytes)
       << " to spare; allocated peak " << format_bytes(p.peak_bytes) << ")\n";
  else if (p.fits)
    os << "  verdict: fits (" << format_bytes(p.capacity - p.peak_bytes) << " to spare at the peak)\n";
  else
    os << oom_verdict(p, req);
  if (p.fits) os << caching_line(p);
  return os.str();
}

std::string deepspeed_estimator_lines(const MemoryPlan& p) {
  std::ostringstream os;
  char line[256];
  os << "\nDeepSpeed's estimator for the same setting (model states only: no activations, buffers or gathers):\n";
  for (const auto& d : p.deepspeed) {
    std::snprintf(line, sizeof line, "  %-52s gpu %12s  cpu %12s   (%s)\n", d.setting.c_str(),
                  format_bytes(d.gpu_bytes).c_str(), format_bytes(d.cpu_bytes).c_str(), d.formula.c_str());
    os << line;
  }
  return os.str();
}

}  // namespace plan_text

std::string format_plan(const MemoryPlan& p, const JobSpec& req) {
  using namespace plan_text;
  std::ostringstream os;
  const ModelSpec& m = req.model;
  os << "[zrepro plan] model " << m.name << " (" << m.param_count() << " params, " << m.layers << " layers, hidden "
     << m.hidden << ", seq " << m.seq << ", vocab " << m.vocab << "), zero_stage " << p.zero_stage << ", "
     << precision_name(req.cfg.precision) << ", world_size " << p.world_size << ", micro " << req.cfg.micro_batch
     << " x gas " << req.cfg.grad_accum << (req.activation_checkpointing ? ", activation checkpointing" : "") << "\n";
  os << "[zrepro plan] assumed: " << m.assumptions() << "\n";
  os << "predicted device memory per rank (every rank the same)";
  if (p.capacity > 0) os << ", capacity " << format_bytes(p.capacity);
  os << "\n\n" << phase_table(p);
  int64_t states = 0;
  for (int64_t b : p.model_states) states += b;
  os << "\n  peak in phase " << phase_name(p.peak_phase) << "; model states " << format_bytes(states) << " (params "
     << format_bytes(p.model_states[0]) << ", grads " << format_bytes(p.model_states[1]) << ", optimizer_states "
     << format_bytes(p.model_states[2]) << ")";
  if (p.host_bytes > 0) os << "; host " << format_bytes(p.host_bytes) << " (cpu checkpoints)";
  os << "\n" << offload_host_line(p, req);
  if (req.saves_checkpoints) os << checkpoint_host_line(p, req);
  if (!p.not_planned.empty()) os << "  not planned: " << p.not_planned << "\n";
  os << verdict_line(p, req) << deepspeed_estimator_lines(p);
  return os.str();
}

}  // namespace zrepro
