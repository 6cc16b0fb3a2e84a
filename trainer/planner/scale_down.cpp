// See scale_down.h.
#include "trainer/planner/scale_down.h"

#include <cmath>
#include <cstdio>
#include <sstream>

#include "device/base/errors.h"
#include "trainer/checkpoint/host_bytes.h"

namespace zrepro {

using json = nlohmann::json;

namespace {

ModelSpec shrink(const ModelSpec& t, int64_t hidden) {
  const double s = static_cast<double>(t.hidden) / static_cast<double>(hidden);
  auto scaled = [&](int64_t v, int64_t lo) { return std::max(lo, static_cast<int64_t>(std::llround(v / s))); };
  ModelSpec m = t;
  m.name = t.name + "/scaled";
  m.hidden = hidden;
  m.seq = scaled(t.seq, 2);
  if (t.positions > 0) m.positions = std::max(m.seq, scaled(t.positions, 2));  // the learned table shrinks as seq
  m.vocab = scaled(t.vocab, 8);
  m.intermediate = scaled(t.intermediate, 1);
  if (t.moe()) {  // the experts' widths shrink as the dense MLP's; their count and top-k stay
    m.moe_intermediate = scaled(t.moe_intermediate, 1);
    if (t.shared_intermediate > 0) m.shared_intermediate = scaled(t.shared_intermediate, 1);
  }
  // sdpa's transient is heads x tile x seq scores per tile against seq x hidden per
  // token: with seq and hidden divided by s, the tile must be too, or the toy's
  // attention holds s times more of its capacity than the target's (a toy tile of 128
  // rows over a 64-token sequence is the whole score matrix).
  m.attention_tile = scaled(t.attention_tile, 1);
  return m;
}

// Toy hidden size: a multiple of the head count (head dimension >= 1; even for
// rotary embeddings).
int64_t toy_hidden(const ModelSpec& t, double K) {
  const int64_t a = t.heads * (t.family == Family::llama ? 2 : 1);
  if (K > 0) {
    const double want = static_cast<double>(t.hidden) / std::sqrt(K);
    return std::max<int64_t>(a, std::llround(want / a) * a);
  }
  for (int64_t h = t.hidden; h >= a; h -= a)
    if (shrink(t, h).param_count() <= kAutoToyParams) return h;
  return a;
}

int64_t divide(int64_t v, double k) { return std::max<int64_t>(1, std::llround(static_cast<double>(v) / k)); }

}  // namespace

ScaleDown scale_down(const ScaleRequest& req) {
  if (req.target.device_capacity <= 0)
    throw ConfigError("--target-device-memory: required with --target-model (scale-down keeps each memory category's "
                      "share of the target's capacity), e.g. --target-device-memory 80GB");
  if (req.scale != 0 && req.scale < 1)
    throw ConfigError("--scale: got " + std::to_string(req.scale) + ", expected auto or a factor >= 1");
  if (req.target.model.recorded)  // [Note: a recorded architecture]: no toy of it can be trained
    throw ConfigError("--target-model " + req.target.model.name + ": a recorded architecture (" +
                      req.target.model.model_type + ") is planned only: zrepro has no model of it to scale down and "
                      "train; zrepro plan --model " + req.target.model.name + " gives its memory at target");
  ScaleDown sd;
  sd.target = req.target.model;
  const ModelSpec& t = req.target.model;
  const int64_t h = req.scale == 1 ? t.hidden : toy_hidden(t, req.scale);
  sd.toy = h == t.hidden ? t : shrink(t, h);
  sd.linear = static_cast<double>(t.hidden) / static_cast<double>(h);
  sd.factor = static_cast<double>(t.param_count()) / static_cast<double>(sd.toy.param_count());
  if (req.scale == 0 && sd.toy.param_count() > kAutoToyParams)
    sd.warnings.push_back("--scale auto: even the smallest toy with " + std::to_string(t.heads) + " heads has " +
                          std::to_string(sd.toy.param_count()) + " parameters (> " + std::to_string(kAutoToyParams) +
                          "); the run will be slow");

  sd.toy_cfg = req.target.cfg;
  ZeroConfig& z = sd.toy_cfg.zero;
  auto scale_key = [&](const char* name, int64_t& v, double k) {
    const int64_t before = v;
    v = divide(v, k);
    sd.scaled_keys.push_back(std::string(name) + " " + std::to_string(before) + " -> " + std::to_string(v));
  };
  scale_key("reduce_bucket_size", z.reduce_bucket_size, sd.factor);
  scale_key("allgather_bucket_size", z.allgather_bucket_size, sd.factor);
  scale_key("stage3_prefetch_bucket_size", z.stage3_prefetch_bucket_size, sd.factor);
  scale_key("stage3_max_live_parameters", z.stage3_max_live_parameters, sd.factor);
  scale_key("stage3_max_reuse_distance", z.stage3_max_reuse_distance, sd.factor);
  scale_key("stage3_param_persistence_threshold", z.stage3_param_persistence_threshold, sd.linear);
  // Stage 3 steps one sub-group at a time: the toy keeps the target's count of sub-groups
  // and so the step's fp32 copy's share ([Note: DeepSpeed's optimizer-state and gradient
  // lifetimes]).
  if (stage_policy(z.stage).shard_params()) scale_key("sub_group_size", z.sub_group_size, sd.factor);
  sd.toy_capacity = divide(req.target.device_capacity, sd.factor);

  sd.target_job = req.target;
  sd.target_job.cpu_device = false;  // the target runs on GPUs
  sd.target_plan = plan_memory(sd.target_job);
  JobSpec toy_req = sd.target_job;
  toy_req.model = sd.toy;
  toy_req.cfg = sd.toy_cfg;
  toy_req.device_capacity = sd.toy_capacity;
  toy_req.cpu_device = true;
  sd.toy_plan = plan_memory(toy_req);

  auto share = [](int64_t b, int64_t cap) { return static_cast<double>(b) / static_cast<double>(cap); };
  for (int c = 0; c < kNumMemCategories; ++c)
    sd.fidelity.push_back({mem_category_name(static_cast<MemCategory>(c)),
                           share(sd.target_plan.by_category[c], req.target.device_capacity),
                           share(sd.toy_plan.by_category[c], sd.toy_capacity)});
  sd.fidelity.push_back({"peak", share(sd.target_plan.peak_bytes, req.target.device_capacity),
                         share(sd.toy_plan.peak_bytes, sd.toy_capacity)});
  for (const auto& r : sd.fidelity) {
    const double big = std::max(r.target_share, r.toy_share);
    if (big > 0.01 && std::abs(r.toy_share - r.target_share) > 0.1 * big) {
      char buf[200];
      std::snprintf(buf, sizeof buf, "%s: %.1f%% of capacity in the toy vs %.1f%% in the target", r.category.c_str(),
                    100 * r.toy_share, 100 * r.target_share);
      sd.warnings.push_back(std::string("scale-down cannot keep the share of ") + buf);
    }
  }
  if (sd.target_plan.fits != sd.toy_plan.fits ||
      (!sd.target_plan.fits && sd.target_plan.oom_phase != sd.toy_plan.oom_phase))
    sd.warnings.push_back(
        !sd.target_plan.fits && sd.target_plan.allocated_fits
            ? "the target runs out of memory only through PyTorch's caching allocator (its segments fragment: "
              "[Note: the capacity binds where PyTorch's OOM does]), which the toy's exact accounting does not "
              "emulate: run the toy with --allocator caching"
            : "the planner's verdict differs between the target and the toy; the toy may not reproduce it");
  if (req.target.cfg.precision == Precision::fp16)
    sd.warnings.push_back("fp16 computes in fp32 on the CPU-emulated device (LibTorch 1.13 has no CPU fp16 matmul): "
                          "the toy's activations are larger than the target's");
  return sd;
}

// ---------------------------------------------------------------- limits at target

namespace {

TargetLimit make_limit(std::string flag, std::string need, int64_t target_limit, int64_t target_need,
                       int64_t toy_need, double factor) {
  TargetLimit l{std::move(flag), std::move(need), target_limit, target_need, 0, toy_need};
  // [Note: a limit the user gives is the target's]: the same share of the toy's need.
  l.toy_limit = target_need > 0 && toy_need > 0
                    ? std::llround(static_cast<double>(target_limit) * static_cast<double>(toy_need) /
                                   static_cast<double>(target_need))
                    : divide(target_limit, factor);
  return l;
}

// What zero_to_fp32 holds (anonymous) consolidating a checkpoint of this model, by the
// API or by the script at this shard size.
int64_t consolidation_need(const ModelSpec& m, int stage, bool api, int64_t shard) {
  const Fp32ConsolidationBytes b = zero_to_fp32_model_bytes(m, stage, shard);
  return api ? b.api : b.script;
}

}  // namespace

std::vector<TargetLimit> limits_at_target(const ScaleDown& sd, int zero_stage, const TargetLimitFlags& f) {
  std::vector<TargetLimit> out;
  const int64_t toy_shard = divide(f.zero_to_fp32_shard, sd.factor);  // as make_limit scales a limit with no need
  if (f.zero_to_fp32 && !f.zero_to_fp32_api)
    out.push_back(make_limit("--zero-to-fp32-shard", "zero_to_fp32.py's --max_shard_size: the shards it merges one at a time",
                             f.zero_to_fp32_shard, 0, 0, sd.factor));
  if (f.host_memory > 0) {
    // The save's gather and the offline consolidation both bound by one host: the larger need.
    int64_t target = 0, toy = 0;
    std::string need;
    if (f.saves && sd.target_plan.save_16bit_host_bytes > 0) {
      target = sd.target_plan.save_16bit_host_bytes, toy = sd.toy_plan.save_16bit_host_bytes;
      need = "rank 0's host at a save: the whole 16-bit model gathered (stage3_gather_16bit_weights_on_model_save)";
    }
    if (f.zero_to_fp32) {
      const int64_t t = consolidation_need(sd.target, zero_stage, f.zero_to_fp32_api, f.zero_to_fp32_shard);
      if (t > target) {
        target = t, toy = consolidation_need(sd.toy, zero_stage, f.zero_to_fp32_api, toy_shard);
        need = std::string("the host consolidating the checkpoint: ") +
               (f.zero_to_fp32_api ? "get_fp32_state_dict_from_zero_checkpoint's whole fp32 model"
                                   : "zero_to_fp32.py's anonymous bytes at its largest merge");
      }
    }
    if (need.empty()) need = "rank 0's host for the checkpoints (nothing gathered to it at this config)";
    out.push_back(make_limit("--host-memory", need, f.host_memory, target, toy, sd.factor));
  }
  if (f.memlock)
    out.push_back(make_limit("--memlock-limit", "the offload buffers pinned per rank (ulimit -l)", *f.memlock,
                             sd.target_plan.host_pinned_bytes, sd.toy_plan.host_pinned_bytes, sd.factor));
  return out;
}

json TargetLimit::to_json() const {
  return {{"flag", flag},         {"need", need},         {"target_limit_bytes", target_limit},
          {"target_need_bytes", target_need}, {"toy_limit_bytes", toy_limit}, {"toy_need_bytes", toy_need},
          {"fits_at_target", fits_at_target()}};
}

std::string TargetLimit::line() const {
  if (flag == "--zero-to-fp32-shard")
    return flag + " " + format_bytes(target_limit) + " is the target's: the toy's shards are " +
           format_bytes(toy_limit) + " (the same count of shards)";
  std::string s = flag + " " + format_bytes(target_limit) + " is the target's: " + need;
  if (target_need <= 0) return s + ", nothing at target scale; the toy runs under " + format_bytes(toy_limit);
  return s + ", " + format_bytes(target_need) + " at target scale: " +
         (fits_at_target() ? "within it" : "past it, the target fails there") + "; the toy runs under " +
         format_bytes(toy_limit) + ", the same share of its own " + format_bytes(toy_need);
}

std::string TargetLimit::at_target() const {
  return "at target scale: " + format_bytes(target_need) + " of the " + format_bytes(target_limit) + " " + flag +
         " (the toy's " + format_bytes(toy_need) + " of its " + format_bytes(toy_limit) + ")";
}

const TargetLimit* ScaleDown::limit(const std::string& flag) const {
  for (const TargetLimit& l : limits)
    if (l.flag == flag) return &l;
  return nullptr;
}

json ScaleDown::to_json() const {
  json rows = json::array();
  for (const auto& r : fidelity) rows.push_back({{"category", r.category}, {"target_share", r.target_share},
                                                  {"toy_share", r.toy_share}});
  auto verdict = [](const MemoryPlan& p) {
    return json{{"verdict", p.fits ? "fits" : "oom"}, {"oom_phase", p.fits ? json(nullptr) : json(phase_name(p.oom_phase))},
                {"peak_bytes", p.peak_bytes}, {"peak_phase", phase_name(p.peak_phase)}};
  };
  return {{"target_model", target.to_json()},
          {"toy_model", toy.to_json()},
          {"parameter_factor", factor},
          {"linear_factor", linear},
          {"toy_capacity_bytes", toy_capacity},
          {"scaled_keys", scaled_keys},
          {"fidelity", rows},
          {"target_planned", verdict(target_plan)},
          {"target_band", target_band},
          {"toy_planned", verdict(toy_plan)},
          {"limits", [&] {
             json a = json::array();
             for (const TargetLimit& l : limits) a.push_back(l.to_json());
             return a;
           }()},
          {"warnings", warnings}};
}

std::string ScaleDown::target_verdict() const {
  const MemoryPlan& p = target_plan;
  return "at target scale (" + target.name + ", " + format_bytes(p.capacity) + " per rank) the plan " +
         (p.fits ? std::string("fits") : "runs out of memory in " + std::string(phase_name(p.oom_phase))) +
         ": peak " + format_bytes(p.peak_bytes);
}

std::string ScaleDown::table() const {
  std::ostringstream os;
  char line[160];
  std::snprintf(line, sizeof line, "  %-18s %14s %14s\n", "share of capacity", "target", "toy");
  os << line;
  for (const auto& r : fidelity) {
    std::snprintf(line, sizeof line, "  %-18s %13.1f%% %13.1f%%\n", r.category.c_str(), 100 * r.target_share,
                  100 * r.toy_share);
    os << line;
  }
  return os.str();
}

}  // namespace zrepro
