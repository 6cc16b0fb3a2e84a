// See planner.h. PlanSim mirrors, event by event, what ZeroEngine, GradReducer,
// ParamGroup and the GPT model allocate on one rank (every rank of this trainer
// holds the same amounts: partitions and shards are padded to equal sizes), over
// two optimizer steps: the first records the stage-3 trace, the second is the
// steady state with prefetching and reuse.
#include "trainer/planner.h"

#include <algorithm>
#include <deque>
#include <memory>
#include <numeric>
#include <sstream>

#include "offload/host_memory.h"
#include "trainer/gpt.h"
#include "trainer/gpt_memory.h"
#include "trainer/train.h"
#include "zero/gather_schedule.h"
#include "zero/offload_plan.h"
#include "zero/partition.h"

namespace zrepro {

using json = nlohmann::json;

namespace {

int64_t elem_size(torch::ScalarType t) { return static_cast<int64_t>(c10::elementSize(t)); }

// The running device total and everything the plan reports about it.
class Timeline {
 public:
  explicit Timeline(MemoryPlan& plan) : p_(plan) {}
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
    if (bytes > 0 && p_.capacity > 0 && total_ + bytes > p_.capacity && p_.fits) {
      p_.fits = false;
      p_.oom_phase = phase_;
      p_.oom_request = bytes;
      p_.at_oom = now_;
    }
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
};

// Per-layer sizes from the partition arithmetic, as ParamGroup lays them out.
struct LayerSizes {
  int64_t numel = 0;
  int64_t param_numel = 0;    // persistent parameter storage (stage 3: shard; + persist below)
  int64_t persist_numel = 0;  // stage 3: full buffer of params under the persistence threshold
  int64_t dynamic_numel = 0;  // stage 3: gathered buffer freed by reshard
  int64_t full_grad_numel = 0, owned_numel = 0, partition_numel = 0;
  std::vector<int64_t> unit_slices;  // gradient units for the buckets (stage >= 1)
};

std::vector<LayerSizes> layer_sizes(const ModelSpec& m, int stage, int ws, int64_t persistence_threshold) {
  std::vector<LayerSizes> out;
  for (const LayerSpec& layer : gpt_layers(m)) {
    LayerSizes s;
    std::vector<int64_t> numels;
    for (const auto& p : layer.params) numels.push_back(p.numel()), s.numel += p.numel();
    const FlatPartition f = partition_flat(s.numel, ws);
    s.partition_numel = f.partition_numel;
    if (stage < 3) {
      s.param_numel = s.full_grad_numel = f.padded_numel;
      s.owned_numel = stage == 0 ? f.padded_numel : f.partition_numel;
      s.unit_slices = {f.partition_numel};
    } else {
      const ShardLayout sl = partition_params(numels, ws);
      for (const auto& p : sl.params) {
        (p.numel < persistence_threshold ? s.persist_numel : s.dynamic_numel) += p.padded_numel;
        s.unit_slices.push_back(p.slice_numel);
      }
      s.param_numel = s.owned_numel = sl.shard_numel;
      s.full_grad_numel = sl.full_numel;
    }
    out.push_back(s);
  }
  return out;
}

// GradReducer's buffer and in-flight bookkeeping (zero/grad_reducer.cpp).
// GradReducer's buffer and in-flight bookkeeping (zero/grad_reducer.cpp). With
// optimizer offload a bucket's output stays alive until its copy to the host
// landed, at the latest until its buffer is refilled (the planner assumes the copies
// keep up beyond that).
class ReducerSim {
 public:
  ReducerSim(const std::vector<LayerSizes>& layers, const ZeroConfig& z, int stage, int ws, int64_t comm_elem,
             const std::vector<bool>& offloaded, Timeline& tl)
      : tl_(tl), overlap_(z.overlap_comm), reduce_scatter_(z.reduce_scatter), persistent_(stage == 3),
        comm_elem_(comm_elem), nbuf_(z.overlap_comm ? 2 : 1) {
    std::vector<int64_t> slices;
    std::vector<int> unit_group;
    for (int g = static_cast<int>(layers.size()) - 1; g >= 0; --g)
      for (int64_t s : layers[g].unit_slices) slices.push_back(s), unit_group.push_back(g);
    buckets_ = make_buckets(slices, z.reduce_bucket_size, ws);
    int64_t buffer_numel = 0;
    group_buckets_.resize(layers.size());
    pieces_of_.assign(buckets_.size(), std::vector<int>(layers.size(), 0));
    offloaded_bucket_.assign(buckets_.size(), false);
    for (size_t b = 0; b < buckets_.size(); ++b) {
      buffer_numel = std::max(buffer_numel, buckets_[b].numel_per_rank * ws);
      for (const auto& p : buckets_[b].pieces) {
        const int g = unit_group[p.unit];
        if (group_buckets_[g].empty() || group_buckets_[g].back() != static_cast<int>(b))
          group_buckets_[g].push_back(static_cast<int>(b));
        ++pieces_of_[b][g];
        if (offloaded[g]) offloaded_bucket_[b] = true;
      }
    }
    if (z.contiguous_gradients) buffer_numel = std::max(buffer_numel, z.reduce_bucket_size);
    buffer_bytes_ = buffer_numel * comm_elem;
    remaining_.assign(buckets_.size(), 0);
    bucket_buffer_.assign(buckets_.size(), -1);
    busy_.assign(nbuf_, false);
    held_.assign(nbuf_, 0);
    if (persistent_) allocate();
  }
  void add(int g) {
    for (int b : group_buckets_[g]) {
      if (bucket_buffer_[b] < 0) {
        auto free_it = std::find(busy_.begin(), busy_.end(), false);
        while (free_it == busy_.end()) {
          complete_one();
          free_it = std::find(busy_.begin(), busy_.end(), false);
        }
        const int i = static_cast<int>(free_it - busy_.begin());
        release_held(i);  // the reducer waits for the copies of the buffer's previous bucket
        allocate();
        busy_[i] = true;
        bucket_buffer_[b] = i;
        remaining_[b] = static_cast<int>(buckets_[b].pieces.size());
      }
      remaining_[b] -= pieces_of_[b][g];
      if (remaining_[b] == 0) {
        const int64_t out = reduce_scatter_ ? buckets_[b].numel_per_rank * comm_elem_ : 0;
        tl_.add(MemCategory::comm_buffers, out);
        in_flight_.push_back({b, bucket_buffer_[b], out});
        bucket_buffer_[b] = -1;
        if (!overlap_) complete_one();
      }
    }
  }
  void finish() {
    while (!in_flight_.empty()) complete_one();
    for (int i = 0; i < nbuf_; ++i) release_held(i);
    if (!persistent_ && allocated_) {
      tl_.add(MemCategory::comm_buffers, -nbuf_ * buffer_bytes_);
      allocated_ = false;
    }
  }

 private:
  struct InFlight {
    int bucket, buffer;
    int64_t out;
  };
  void allocate() {
    if (allocated_) return;
    tl_.add(MemCategory::comm_buffers, nbuf_ * buffer_bytes_);
    allocated_ = true;
  }
  void release_held(int i) {
    tl_.add(MemCategory::comm_buffers, -held_[i]);
    held_[i] = 0;
  }
  void complete_one() {
    const InFlight f = in_flight_.front();
    in_flight_.pop_front();
    if (offloaded_bucket_[f.bucket])
      held_[f.buffer] += f.out;  // the copy to the host still reads it
    else
      tl_.add(MemCategory::comm_buffers, -f.out);
    busy_[f.buffer] = false;
  }
  Timeline& tl_;
  bool overlap_, reduce_scatter_, persistent_;
  int64_t comm_elem_, buffer_bytes_ = 0;
  int nbuf_;
  bool allocated_ = false;
  std::vector<Bucket> buckets_;
  std::vector<std::vector<int>> group_buckets_;
  std::vector<std::vector<int>> pieces_of_;  // [bucket][group] pieces
  std::vector<bool> offloaded_bucket_;
  std::vector<int> remaining_, bucket_buffer_;
  std::vector<bool> busy_;
  std::vector<int64_t> held_;  // per buffer: outputs waiting on their copy
  std::deque<InFlight> in_flight_;
};

class PlanSim {
 public:
  PlanSim(const PlanRequest& req, MemoryPlan& plan)
      : req_(req), z_(req.cfg.zero), stage_(z_.stage), ws_(req.world_size), plan_(plan), tl_(plan) {
    const Precision p = req.cfg.precision;
    pe_ = p == Precision::fp32 ? 4 : 2;
    ce_ = elem_size(comm_dtype_of(req.cfg));
    B_ = req.cfg.micro_batch;
    layers_ = layer_sizes(req.model, stage_, ws_, z_.stage3_param_persistence_threshold);
    sym_ = gpt_tape_symbols(req.model, B_, p, req.cpu_device);
    fp16_cpu_ = p == Precision::fp16 && req.cpu_device;
    ckpt_ = req.activation_checkpointing;
    cpu_ckpt_ = ckpt_ && req.cfg.activation_checkpointing.cpu_checkpointing;
    if (cpu_ckpt_) plan_.host_bytes = req.model.layers * sym_.at("n");  // one block input per block
    std::vector<std::vector<int64_t>> numels;
    for (const LayerSpec& layer : gpt_layers(req.model)) {
      numels.emplace_back();
      for (const auto& p : layer.params) numels.back().push_back(p.numel());
    }
    offloaded_ = offloaded_layers(numels, z_);
    param_offload_ = z_.offload_param.enabled();
    const OffloadHostBytes host = offload_host_bytes(numels, z_, ws_, pe_ == 4 ? torch::kFloat : torch::kBFloat16,
                                                     comm_dtype_of(req.cfg));
    plan_.host_pinned_bytes = host.pinned;
    plan_.host_pageable_bytes = host.pageable;
  }

  void run() {
    init();
    for (int step = 0; step < 2; ++step) {
      for (int64_t t = 0; t < req_.cfg.grad_accum; ++t) micro_step();
      optimizer_step();
    }
    for (const auto& l : layers_) {
      plan_.model_states[static_cast<int>(MemCategory::params)] += param_bytes(l) + l.persist_numel * pe_;
      plan_.model_states[static_cast<int>(MemCategory::grads)] += grad_bytes(l);
      plan_.model_states[static_cast<int>(MemCategory::optimizer_states)] += optimizer_bytes(l);
    }
  }

 private:
  // Device bytes of the layer's persistent state (offloaded parts live on the host).
  int64_t param_bytes(const LayerSizes& l) const { return (param_offload_ ? 0 : l.param_numel) * pe_; }
  int64_t grad_bytes(const LayerSizes& l) const {
    if (stage_ <= 1) return l.full_grad_numel * pe_;
    return offloaded_[&l - layers_.data()] ? 0 : l.owned_numel * pe_;
  }
  int64_t optimizer_bytes(const LayerSizes& l) const {
    if (offloaded_[&l - layers_.data()]) return 0;
    const bool aliased = stage_ == 0 && pe_ == 4;  // stage 0 fp32 updates the parameters in place
    return (aliased ? 2 : 3) * 4 * l.owned_numel;
  }
  int last() const { return static_cast<int>(layers_.size()) - 1; }

  void init() {
    tl_.phase(Phase::init);
    for (const auto& l : layers_) {
      tl_.add(MemCategory::params, param_bytes(l));
      tl_.add(MemCategory::other, 4);  // the layer's autograd carrier
      tl_.add(MemCategory::grads, grad_bytes(l));
    }
    tl_.phase(Phase::partition);
    for (const auto& l : layers_) {
      const int64_t o = 4 * l.owned_numel;
      if (optimizer_bytes(l) == 0) continue;  // offloaded: master and moments on the host
      if (!(stage_ == 0 && pe_ == 4)) {
        if (pe_ != 4) tl_.add(MemCategory::optimizer_states, o);  // owned.to(float) before the clone
        tl_.add(MemCategory::optimizer_states, o);
        if (pe_ != 4) tl_.add(MemCategory::optimizer_states, -o);
      }
      tl_.add(MemCategory::optimizer_states, 2 * o);  // Adam moments
    }
    tl_.phase(Phase::init);
    if (stage_ == 3) {
      std::vector<int64_t> dyn;
      for (const auto& l : layers_) dyn.push_back(l.dynamic_numel);
      sched_ = std::make_unique<GatherSchedule>(
          dyn, GatherSchedule::Options{z_.stage3_prefetch_bucket_size, z_.stage3_max_live_parameters,
                                       z_.stage3_max_reuse_distance});
      persist_allocated_.assign(layers_.size(), false);
      stale_.assign(layers_.size(), true);
      staged_.assign(layers_.size(), false);
      act_.assign(layers_.size(), false);
    }
    if (stage_ >= 1) reducer_ = std::make_unique<ReducerSim>(layers_, z_, stage_, ws_, ce_, offloaded_, tl_);
    tl_.add(MemCategory::other, req_.model.seq * req_.model.seq);  // causal mask (bool)
  }

  // ---- stage 3 gathers (ZeroEngine::fetch / release / end_backward)
  // ParamGroup's own gathered state (the schedule may count a prefetch the engine
  // skipped: offload_param's buffer_count bound).
  void gather(int l) {
    if (!act_[l]) tl_.add(MemCategory::comm_buffers, layers_[l].dynamic_numel * pe_);
    act_[l] = true;
  }
  // offload_param: a layer's shard comes up into a device copy (ParamGroup's
  // device_shard_) at unshard_start, freed once its gathers ran at unshard_wait.
  void stage_shard(int l, int sign) {
    if (param_offload_) tl_.add(MemCategory::comm_buffers, sign * layers_[l].param_numel * pe_);
  }
  void fetch(int l) {
    if (stage_ != 3) return;
    const bool was = act_[l];
    gather(l);
    if (!persist_allocated_[l]) {
      tl_.add(MemCategory::params, layers_[l].persist_numel * pe_);
      persist_allocated_[l] = true;
    }
    const bool upload = (!was || stale_[l]) && !staged_[l];
    if (upload) stage_shard(l, +1);
    int64_t uploading = 0;
    for (size_t k = 0; k < staged_.size(); ++k) uploading += staged_[k] || (static_cast<int>(k) == l && upload);
    for (int k : prefetch_of(l)) {
      if (param_offload_ && uploading >= z_.offload_param.buffer_count) continue;
      gather(k);
      stage_shard(k, +1);
      staged_[k] = true;
      stale_[k] = false;
      uploading += param_offload_;
    }
    if (upload || staged_[l]) stage_shard(l, -1);
    staged_[l] = stale_[l] = false;
  }
  std::vector<int> prefetch_of(int l) { return sched_->fetch(l); }
  void reshard(int l) {
    if (!act_[l]) return;
    tl_.add(MemCategory::comm_buffers, -layers_[l].dynamic_numel * pe_);
    act_[l] = false;
    if (staged_[l]) stage_shard(l, -1), staged_[l] = false;
  }
  void release(int l) {
    if (stage_ == 3 && sched_->release(l)) reshard(l);
  }

  void tape(GptTape which) {
    replay_tape(gpt_tape(which, B_, req_.cfg.precision, req_.cpu_device), sym_,
                [&](int64_t b) { tl_.add(MemCategory::activations, b); },
                [&](int64_t b) {
                  tl_.add(MemCategory::activations, b);
                  param_grads_ += b;
                });
  }
  // fp16 on the CPU: every layer's weights are cast to fp32 for compute and saved.
  void weight_copies(int l, int sign) {
    if (fp16_cpu_) tl_.add(MemCategory::activations, sign * 4 * layers_[l].numel);
  }
  // The layer's parameter gradients are complete: reduce (stage 2/3 buckets; stages
  // 0/1 add into the persistent full gradient), then autograd frees them.
  void reduce(int l) {
    if (stage_ >= 2) reducer_->add(l);
    if (stage_ == 3) release(l);
    tl_.add(MemCategory::activations, -param_grads_);
    param_grads_ = 0;
    weight_copies(l, -1);
  }

  void micro_step() {
    const int64_t batch = B_ * (req_.model.seq + 1) * 8;  // int64 tokens
    tl_.add(MemCategory::other, batch);
    if (sched_) sched_->begin_micro_step();
    const int L = last();
    tl_.phase(Phase::forward);
    fetch(0);
    weight_copies(0, +1);
    tape(GptTape::embed_forward);
    release(0);
    for (int l = 1; l < L; ++l) {
      fetch(l);
      if (!ckpt_) weight_copies(l, +1);  // a checkpointed block saves them in its recomputation
      tape(ckpt_ ? GptTape::block_forward_no_grad : GptTape::block_forward);
      // cpu checkpointing keeps the block's input on the host: the previous output dies.
      if (cpu_ckpt_) tl_.add(MemCategory::activations, -sym_.at("n"));
      release(l);
    }
    fetch(L);
    weight_copies(L, +1);
    tape(GptTape::head_forward);
    release(L);

    tl_.phase(Phase::backward);
    fetch(L);
    tape(GptTape::head_backward);
    reduce(L);
    for (int l = L - 1; l >= 1; --l) {
      fetch(l);
      if (ckpt_) {
        fetch(l);  // the recomputation acquires the layer again
        weight_copies(l, +1);
        tape(GptTape::block_forward);
        tape(GptTape::block_backward_recomputed);
        reduce(l);
        tape(GptTape::block_recompute_release);
        // With cpu checkpointing one of those frees is the host copy of the input.
        if (cpu_ckpt_) tl_.add(MemCategory::activations, sym_.at("n"));
      } else {
        tape(GptTape::block_backward);
        reduce(l);
      }
    }
    fetch(0);
    tape(GptTape::embed_backward);
    reduce(0);
    if (stage_ >= 2) reducer_->finish();
    if (stage_ == 3) {
      for (int l = 0; l <= L; ++l) reshard(l);
      sched_->end_backward();
    }
    tl_.add(MemCategory::other, -batch);
  }

  void optimizer_step() {
    tl_.phase(Phase::step);
    auto off = [&](const LayerSizes& l) { return bool(offloaded_[&l - layers_.data()]); };
    if (stage_ == 1) {
      for (const auto& l : layers_)
        if (!off(l)) tl_.add(MemCategory::comm_buffers, l.owned_numel * pe_);
      for (int g = last(); g >= 0; --g) reducer_->add(g);
      reducer_->finish();
    }
    // Per layer, one at a time: the fp32 copy the norm is taken of (16-bit grads),
    // then the fp32 gradient the optimizer reads (offloaded layers: on the host).
    for (const auto& l : layers_) {
      if (pe_ == 4 || off(l)) continue;
      const int64_t norm_numel = stage_ == 0 ? l.partition_numel : l.owned_numel;
      tl_.add(MemCategory::other, 4 * norm_numel);
      tl_.add(MemCategory::other, -4 * norm_numel);
    }
    for (const auto& l : layers_) {
      if (pe_ == 4 || off(l)) continue;
      const int64_t g = stage_ == 0 ? l.full_grad_numel : l.owned_numel;
      tl_.add(MemCategory::other, 4 * g);
      tl_.add(MemCategory::other, -4 * g);
    }
    if (stage_ == 1)
      for (const auto& l : layers_)
        if (!off(l)) tl_.add(MemCategory::comm_buffers, -l.owned_numel * pe_);
    if (stage_ == 3) stale_.assign(layers_.size(), true);  // persistent parameters are re-gathered
  }

  const PlanRequest& req_;
  const ZeroConfig& z_;
  int stage_, ws_;
  MemoryPlan& plan_;
  Timeline tl_;
  int64_t pe_ = 4, ce_ = 4, B_ = 1;
  bool fp16_cpu_ = false, ckpt_ = false, cpu_ckpt_ = false;
  std::vector<LayerSizes> layers_;
  TapeSymbols sym_;
  std::unique_ptr<GatherSchedule> sched_;
  std::vector<bool> persist_allocated_;
  std::vector<bool> stale_, staged_;  // stage 3: persistent params to refresh; shard copies up
  std::vector<bool> act_;             // stage 3: layers gathered now
  std::vector<bool> offloaded_;        // optimizer on the host
  bool param_offload_ = false;
  std::unique_ptr<ReducerSim> reducer_;
  int64_t param_grads_ = 0;
};

json categories_json(const CategoryBytes& c) {
  json j = json::object();
  for (int i = 0; i < kNumMemCategories; ++i) j[mem_category_name(static_cast<MemCategory>(i))] = c[i];
  return j;
}

}  // namespace

std::vector<DeepSpeedEstimate> deepspeed_estimates(int64_t psi, int64_t largest, int gpus, int stage) {
  const double P = static_cast<double>(psi), G = gpus, f = 1.5;
  std::vector<DeepSpeedEstimate> out;
  auto add = [&](std::string setting, double gpu, double cpu, std::string formula) {
    out.push_back({std::move(setting), static_cast<int64_t>(gpu), static_cast<int64_t>(cpu), std::move(formula)});
  };
  if (stage <= 2) {
    add("zero2, offload_optimizer=none", 2 * P + 18 * P / G, P * 4 * G * f, "gpu 2psi + 18psi/G; cpu 4psi*g*1.5");
    add("zero2, offload_optimizer=cpu", 2 * P, P * std::max(4 * G, 16.0) * f, "gpu 2psi; cpu psi*max(4G,16)*1.5");
  } else {
    const double L4 = 4.0 * static_cast<double>(largest);
    add("zero3, offload_param=none, offload_optimizer=none", L4 + 18 * P / G, static_cast<double>(largest) * 4 * G * f,
        "gpu 4L + 18psi/G; cpu 4L*g*1.5");
    add("zero3, offload_param=none, offload_optimizer=cpu", L4 + 2 * P / G, P * 16 * f,
        "gpu 4L + 2psi/G; cpu 16psi*1.5");
    add("zero3, offload_param=cpu, offload_optimizer=cpu", L4, P * 18 * f, "gpu 4L; cpu 18psi*1.5");
  }
  return out;
}

MemoryPlan plan_memory(const PlanRequest& req) {
  MemoryPlan plan;
  plan.world_size = req.world_size;
  plan.zero_stage = req.cfg.zero.stage;
  plan.capacity = req.device_capacity;
  PlanSim(req, plan).run();
  int64_t largest = 0;
  for (const auto& l : gpt_layers(req.model)) {
    int64_t n = 0;
    for (const auto& p : l.params) n += p.numel();
    largest = std::max(largest, n);
  }
  plan.deepspeed = deepspeed_estimates(req.model.param_count(), largest, req.world_size, req.cfg.zero.stage);
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
            {"host_pinned_bytes", host_pinned_bytes},
            {"host_pageable_bytes", host_pageable_bytes},
            {"verdict", capacity == 0 ? "fits" : fits ? "fits" : "oom"},
            {"oom_phase", fits ? json(nullptr) : json(phase_name(oom_phase))},
            {"deepspeed_estimates", ds},
            // Every rank holds the same amounts (equal padded partitions and shards).
            {"ranks", "all ranks equal"}};
  if (!fits) {
    j["oom_request_bytes"] = oom_request;
    j["at_oom"] = categories_json(at_oom);
  }
  return j;
}

std::string format_plan(const MemoryPlan& p, const PlanRequest& req) {
  std::ostringstream os;
  const ModelSpec& m = req.model;
  os << "[zrepro plan] model " << m.name << " (" << m.param_count() << " params, " << m.layers << " layers, hidden "
     << m.hidden << ", seq " << m.seq << ", vocab " << m.vocab << "), zero_stage " << p.zero_stage << ", "
     << precision_name(req.cfg.precision) << ", world_size " << p.world_size << ", micro " << req.cfg.micro_batch
     << " x gas " << req.cfg.grad_accum << (req.activation_checkpointing ? ", activation checkpointing" : "") << "\n";
  os << "predicted device memory per rank (every rank the same)";
  if (p.capacity > 0) os << ", capacity " << format_bytes(p.capacity);
  os << "\n\n";
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
  int64_t states = 0;
  for (int64_t b : p.model_states) states += b;
  os << "\n  peak in phase " << phase_name(p.peak_phase) << "; model states " << format_bytes(states) << " (params "
     << format_bytes(p.model_states[0]) << ", grads " << format_bytes(p.model_states[1]) << ", optimizer_states "
     << format_bytes(p.model_states[2]) << ")";
  if (p.host_bytes > 0) os << "; host " << format_bytes(p.host_bytes) << " (cpu checkpoints)";
  os << "\n";
  if (p.host_pinned_bytes > 0 || p.host_pageable_bytes > 0) {
    os << "  offload host memory per rank: " << format_bytes(p.host_pinned_bytes) << " pinned, "
       << format_bytes(p.host_pageable_bytes) << " pageable";
    // The memlock preflight `zrepro run` does on the CPU-emulated device (mlock pinning).
    const MemlockInfo ml = memlock_info();
    const int64_t avail = ml.available();
    if (p.host_pinned_bytes > 0 && req.cpu_device) {
      if (avail >= 0 && p.host_pinned_bytes > avail)
        os << "\n  pinned-memory: this machine may lock only " << format_bytes(avail) << " (ulimit -l "
           << ml.limit_bytes / 1024 << " KiB, CAP_IPC_LOCK not held): the run would fail at init. Raise ulimit -l "
           << "or set pin_memory false";
      else
        os << " (fits this machine's memlock limit)";
    }
    os << "\n";
  }
  if (p.capacity > 0) {
    if (p.fits)
      os << "  verdict: fits (" << format_bytes(p.capacity - p.peak_bytes) << " to spare at the peak)\n";
    else
      os << "  verdict: OOM in phase " << phase_name(p.oom_phase) << " (allocating " << format_bytes(p.oom_request)
         << " with " << format_bytes(std::accumulate(p.at_oom.begin(), p.at_oom.end(), int64_t{0}))
         << " in use; the run would need " << format_bytes(p.peak_bytes) << ")\n";
  }
  os << "\nDeepSpeed's estimator for the same setting (model states only: no activations, buffers or gathers):\n";
  for (const auto& d : p.deepspeed) {
    std::snprintf(line, sizeof line, "  %-52s gpu %12s  cpu %12s   (%s)\n", d.setting.c_str(),
                  format_bytes(d.gpu_bytes).c_str(), format_bytes(d.cpu_bytes).c_str(), d.formula.c_str());
    os << line;
  }
  return os.str();
}

}  // namespace zrepro
