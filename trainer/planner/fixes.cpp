// See fixes.h.
#include "trainer/planner/fixes.h"

#include <algorithm>
#include <functional>
#include <cstdio>

#include "zero/schedule/stage_policy.h"

namespace zrepro {

namespace {

std::string percent(double share) {
  char b[32];
  std::snprintf(b, sizeof b, "%.0f%%", 100 * share);
  return b;
}

}  // namespace

nlohmann::json FixPrediction::to_json() const {
  return {{"fix", fix},       {"flags", flags},   {"fits", fits}, {"peak_bytes", peak_bytes},
          {"peak_share", peak_share}, {"config_patch", config_patch}, {"args", args},
          {"trainer_args", trainer_args}, {"cost", cost}, {"cost_rank", cost_rank}, {"parts", parts}};
}

FixPrediction FixPrediction::from_json(const nlohmann::json& j) {
  FixPrediction f;
  f.fix = j.at("fix").get<std::string>();
  f.flags = j.at("flags").get<std::string>();
  f.fits = j.at("fits").get<bool>();
  f.peak_bytes = j.at("peak_bytes").get<int64_t>();
  f.peak_share = j.at("peak_share").get<double>();
  f.config_patch = j.at("config_patch");
  f.args = j.at("args").get<std::vector<std::string>>();
  f.trainer_args = j.at("trainer_args").get<std::string>();
  f.cost = j.at("cost").get<std::string>();
  f.cost_rank = j.at("cost_rank").get<int>();
  f.parts = j.at("parts").get<int>();
  return f;
}

namespace {

using json = nlohmann::json;

// One usual fix before it is planned: what it is, how to ask for it, what it costs, and
// what it does to the job.
struct Candidate {
  std::string fix, flags;
  json patch;
  std::vector<std::string> args;
  std::string trainer_args, cost;
  int cost_rank = 0;
  std::function<void(JobSpec&)> apply;
};

void add_batch_and_checkpointing(const JobSpec& req, std::vector<Candidate>& out) {
  if (!req.activation_checkpointing)
    out.push_back({"activation checkpointing", "--activation-checkpointing", nullptr, {"--activation-checkpointing"},
                   "gradient_checkpointing=True",
                   "about a third more compute: each block's forward runs again in backward", 4,
                   [](JobSpec& r) { r.activation_checkpointing = true; }});
  if (req.cfg.micro_batch % 2 == 0) {
    const int64_t mb = req.cfg.micro_batch / 2, gas = req.cfg.grad_accum * 2;
    out.push_back({"micro-batch " + std::to_string(mb) + " x gas " + std::to_string(gas),
                   "--micro-batch " + std::to_string(mb) + " --grad-accum " + std::to_string(gas),
                   {{"train_micro_batch_size_per_gpu", mb}, {"gradient_accumulation_steps", gas}}, {},
                   "per_device_train_batch_size=" + std::to_string(mb) + ", gradient_accumulation_steps=" +
                       std::to_string(gas),
                   "the same global batch in twice the micro-steps: smaller matrix products, lower throughput", 3,
                   [mb, gas](JobSpec& r) { r.cfg.micro_batch = mb, r.cfg.grad_accum = gas; }});
  }
}

void add_sharding(const JobSpec& req, std::vector<Candidate>& out) {
  const ZeroConfig& z = req.cfg.zero;
  if (!z.offload_optimizer.enabled()) {
    const int stage = std::max(z.stage, StagePolicy::first_sharding_stage(ModelState::optimizer_states));
    out.push_back({"optimizer offload to the host" + std::string(stage_policy(z.stage).shard_optimizer() ? "" : " (ZeRO stage 1)"),
                   "zero_optimization.offload_optimizer.device \"cpu\"",
                   {{"zero_optimization", {{"stage", stage}, {"offload_optimizer", {{"device", "cpu"}, {"pin_memory", true}}}}}},
                   {}, "",
                   "the optimizer step on the CPU, gradients down and parameters up the host link every step, "
                   "12 bytes per parameter of pinned host memory: usually the slowest",
                   6, [stage](JobSpec& r) {
                     r.cfg.zero.stage = std::max(r.cfg.zero.stage, stage);
                     r.cfg.zero.offload_optimizer.device = "cpu";
                   }});
  }
  if (!stage_policy(z.stage).shard_params())
    out.push_back({"ZeRO stage 3", "--zero-stage 3", {{"zero_optimization", {{"stage", 3}}}}, {}, "",
                   "every layer's parameters all-gathered in forward and again in backward: about 1.5x the "
                   "communication of stage 2",
                   5, [](JobSpec& r) { r.cfg.zero.stage = StagePolicy::first_sharding_stage(ModelState::parameters); }});
}

void add_buffers(const JobSpec& req, std::vector<Candidate>& out) {
  const ZeroConfig& z = req.cfg.zero;
  // Buckets of hidden^2 elements: the Hugging Face integration's "auto" for reduce_bucket_size.
  const int64_t h2 = req.model.hidden * req.model.hidden;
  const bool stage3 = stage_policy(z.stage).shard_params();
  if (stage_policy(z.stage).uses_reducer() && (z.reduce_bucket_size > h2 || (!stage3 && z.allgather_bucket_size > h2))) {
    const int64_t rb = std::min(z.reduce_bucket_size, h2), ab = std::min(z.allgather_bucket_size, h2);
    out.push_back({"buckets of hidden^2 = " + std::to_string(h2) + " elements",
                   "zero_optimization.reduce_bucket_size " + std::to_string(rb),
                   {{"zero_optimization", {{"reduce_bucket_size", rb}, {"allgather_bucket_size", ab}}}}, {}, "",
                   "smaller collectives: a little more launch overhead", 1, [rb, ab](JobSpec& r) {
                     r.cfg.zero.reduce_bucket_size = rb, r.cfg.zero.allgather_bucket_size = ab;
                   }});
  }
  // Stage 3 keeps at most one block's parameters gathered beyond the one computing.
  const int64_t block = req.model.block_params();
  if (stage3 && (z.stage3_max_live_parameters > block || z.stage3_prefetch_bucket_size > block)) {
    const int64_t live = std::min(z.stage3_max_live_parameters, block), pre = std::min(z.stage3_prefetch_bucket_size, block);
    out.push_back({"stage-3 live parameters of one block (" + std::to_string(block) + ")",
                   "zero_optimization.stage3_max_live_parameters " + std::to_string(block),
                   {{"zero_optimization", {{"stage3_max_live_parameters", live}, {"stage3_prefetch_bucket_size", pre},
                                           {"stage3_max_reuse_distance", 0}}}},
                   {}, "", "layers gathered again instead of kept: more all-gathers in stage 3", 2,
                   [live, pre](JobSpec& r) {
                     r.cfg.zero.stage3_max_live_parameters = live, r.cfg.zero.stage3_prefetch_bucket_size = pre;
                     r.cfg.zero.stage3_max_reuse_distance = 0;
                   }});
  }
}

FixPrediction planned(const JobSpec& req, const Candidate& c, const JobSpec& r) {
  const MemoryPlan p = plan_memory(r);
  return {c.fix, c.flags, p.fits && p.pinned_fits, p.peak_bytes,
          static_cast<double>(p.peak_bytes) / static_cast<double>(req.device_capacity), c.patch, c.args,
          c.trainer_args, c.cost, c.cost_rank, 1};
}

// Two fixes at once: the job changed by both, the patches merged (the later one's keys
// win: offload keeps stage 3 when both ask for a stage), the flags joined.
FixPrediction planned_pair(const JobSpec& req, const Candidate& a, const Candidate& b) {
  JobSpec r = req;
  a.apply(r);
  b.apply(r);
  Candidate both{a.fix + " + " + b.fix, a.flags + " + " + b.flags, nullptr, a.args, "", a.cost + "; " + b.cost,
                 a.cost_rank + b.cost_rank, nullptr};
  both.args.insert(both.args.end(), b.args.begin(), b.args.end());
  for (const json* p : {&a.patch, &b.patch})
    if (!p->is_null()) {
      if (both.patch.is_null()) both.patch = json::object();
      both.patch.merge_patch(*p);
    }
  both.trainer_args = a.trainer_args + (a.trainer_args.empty() || b.trainer_args.empty() ? "" : ", ") + b.trainer_args;
  FixPrediction f = planned(req, both, r);
  f.parts = 2;
  return f;
}

}  // namespace

std::vector<FixPrediction> predict_fixes(const JobSpec& req) {
  std::vector<FixPrediction> out;
  if (req.device_capacity <= 0) return out;
  std::vector<Candidate> cands;
  add_batch_and_checkpointing(req, cands);
  add_sharding(req, cands);
  add_buffers(req, cands);
  const int64_t own_peak = plan_memory(req).peak_bytes;
  std::vector<Candidate> useful;
  for (const Candidate& c : cands) {
    JobSpec r = req;
    c.apply(r);
    FixPrediction f = planned(req, c, r);
    if (f.peak_bytes == own_peak && !f.fits) continue;  // changes nothing the planner sees
    out.push_back(f);
    useful.push_back(c);
  }
  const bool one_fits = std::any_of(out.begin(), out.end(), [](const FixPrediction& f) { return f.fits; });
  if (!one_fits)
    for (size_t i = 0; i < useful.size(); ++i)
      for (size_t j = i + 1; j < useful.size(); ++j) out.push_back(planned_pair(req, useful[i], useful[j]));
  std::stable_sort(out.begin(), out.end(), [](const FixPrediction& a, const FixPrediction& b) {
    return a.fits != b.fits ? a.fits : a.peak_bytes < b.peak_bytes;
  });
  return out;
}

const FixPrediction* recommended_fix(const std::vector<FixPrediction>& fixes) {
  const FixPrediction* best = nullptr;
  for (const auto& f : fixes)
    if (f.fits && (!best || f.cost_rank < best->cost_rank ||
                   (f.cost_rank == best->cost_rank && f.peak_bytes < best->peak_bytes)))
      best = &f;
  return best;
}

std::string format_fixes(const std::vector<FixPrediction>& fixes) {
  std::string fit, not_fit;
  for (const auto& f : fixes) {
    std::string& s = f.fits ? fit : not_fit;
    s += (s.empty() ? "" : ", ") + f.fix + " (peak " + percent(f.peak_share) + ")";
  }
  std::string out = "planner: ";
  out += fit.empty() ? "none of the usual fixes fits, alone or two together" : "fits with " + fit;
  if (!not_fit.empty()) out += "; not with " + not_fit;
  if (const FixPrediction* r = recommended_fix(fixes)) out += "; recommended: " + r->fix + " (" + r->cost + ")";
  return out;
}

std::string format_fix_details(const std::vector<FixPrediction>& fixes) {
  std::string out;
  for (const auto& f : fixes) {
    out += std::string("  ") + (f.fits ? "fits " : "OOM  ") + " peak " + percent(f.peak_share) + "  " + f.fix +
           (&f == recommended_fix(fixes) ? "  [recommended]" : "") + "\n      cost: " + f.cost + "\n";
    if (!f.args.empty() || f.config_patch.is_null()) out += "      zrepro run: " + f.flags + "\n";
    if (!f.trainer_args.empty()) out += "      Hugging Face Trainer: " + f.trainer_args + "\n";
    if (!f.config_patch.is_null()) out += "      ds_config.json merge patch: " + f.config_patch.dump() + "\n";
  }
  return out;
}

}  // namespace zrepro
