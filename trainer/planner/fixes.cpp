// See fixes.h.
#include "trainer/planner/fixes.h"

#include <algorithm>
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
          {"peak_share", peak_share}, {"config_patch", config_patch}, {"args", args}};
}

std::vector<FixPrediction> predict_fixes(const JobSpec& req) {
  using json = nlohmann::json;
  std::vector<FixPrediction> out;
  if (req.device_capacity <= 0) return out;
  auto plan = [&](const std::string& fix, const std::string& flags, const json& patch,
                  std::vector<std::string> args, JobSpec r) {
    const MemoryPlan p = plan_memory(r);
    out.push_back({fix, flags, p.fits && p.pinned_fits, p.peak_bytes,
                   static_cast<double>(p.peak_bytes) / static_cast<double>(req.device_capacity), patch, std::move(args)});
  };
  const ZeroConfig& z = req.cfg.zero;
  if (!req.activation_checkpointing) {
    JobSpec r = req;
    r.activation_checkpointing = true;
    plan("activation checkpointing", "--activation-checkpointing", nullptr, {"--activation-checkpointing"}, r);
  }
  if (req.cfg.micro_batch % 2 == 0) {
    JobSpec r = req;
    r.cfg.micro_batch /= 2;
    r.cfg.grad_accum *= 2;
    plan("micro-batch " + std::to_string(r.cfg.micro_batch) + " x gas " + std::to_string(r.cfg.grad_accum),
         "--micro-batch " + std::to_string(r.cfg.micro_batch) + " --grad-accum " + std::to_string(r.cfg.grad_accum),
         {{"train_micro_batch_size_per_gpu", r.cfg.micro_batch}, {"gradient_accumulation_steps", r.cfg.grad_accum}},
         {}, r);
  }
  if (!stage_policy(z.stage).shard_params()) {
    JobSpec r = req;
    r.cfg.zero.stage = StagePolicy::first_sharding_stage(ModelState::parameters);
    plan("ZeRO stage 3", "--zero-stage 3", {{"zero_optimization", {{"stage", 3}}}}, {}, r);
  }
  if (!z.offload_optimizer.enabled()) {
    JobSpec r = req;
    r.cfg.zero.stage = std::max(r.cfg.zero.stage, StagePolicy::first_sharding_stage(ModelState::optimizer_states));
    r.cfg.zero.offload_optimizer.device = "cpu";
    plan("optimizer offload to the host" + std::string(stage_policy(req.cfg.zero.stage).shard_optimizer() ? "" : " (ZeRO stage 1)"),
         "zero_optimization.offload_optimizer.device \"cpu\"",
         {{"zero_optimization",
           {{"stage", r.cfg.zero.stage}, {"offload_optimizer", {{"device", "cpu"}, {"pin_memory", true}}}}}},
         {}, r);
  }
  // Buckets of hidden^2 elements: the Hugging Face integration's "auto" for reduce_bucket_size.
  const int64_t h2 = req.model.hidden * req.model.hidden;
  const bool stage3 = stage_policy(z.stage).shard_params();
  if (stage_policy(z.stage).uses_reducer() && (z.reduce_bucket_size > h2 || (!stage3 && z.allgather_bucket_size > h2))) {
    JobSpec r = req;
    r.cfg.zero.reduce_bucket_size = std::min(z.reduce_bucket_size, h2);
    r.cfg.zero.allgather_bucket_size = std::min(z.allgather_bucket_size, h2);
    plan("buckets of hidden^2 = " + std::to_string(h2) + " elements",
         "zero_optimization.reduce_bucket_size " + std::to_string(r.cfg.zero.reduce_bucket_size),
         {{"zero_optimization", {{"reduce_bucket_size", r.cfg.zero.reduce_bucket_size},
                                 {"allgather_bucket_size", r.cfg.zero.allgather_bucket_size}}}},
         {}, r);
  }
  // Stage 3 keeps at most one block's parameters gathered beyond the one computing.
  const int64_t block = req.model.block_params();
  if (stage3 && (z.stage3_max_live_parameters > block || z.stage3_prefetch_bucket_size > block)) {
    JobSpec r = req;
    r.cfg.zero.stage3_max_live_parameters = std::min(z.stage3_max_live_parameters, block);
    r.cfg.zero.stage3_prefetch_bucket_size = std::min(z.stage3_prefetch_bucket_size, block);
    r.cfg.zero.stage3_max_reuse_distance = 0;
    plan("stage-3 live parameters of one block (" + std::to_string(block) + ")",
         "zero_optimization.stage3_max_live_parameters " + std::to_string(block),
         {{"zero_optimization", {{"stage3_max_live_parameters", r.cfg.zero.stage3_max_live_parameters},
                                 {"stage3_prefetch_bucket_size", r.cfg.zero.stage3_prefetch_bucket_size},
                                 {"stage3_max_reuse_distance", 0}}}},
         {}, r);
  }
  std::stable_sort(out.begin(), out.end(), [](const FixPrediction& a, const FixPrediction& b) {
    return a.fits != b.fits ? a.fits : a.peak_bytes < b.peak_bytes;
  });
  return out;
}

std::string format_fixes(const std::vector<FixPrediction>& fixes) {
  std::string fit, not_fit;
  for (const auto& f : fixes) {
    std::string& s = f.fits ? fit : not_fit;
    s += (s.empty() ? "" : ", ") + f.fix + " (peak " + percent(f.peak_share) + ")";
  }
  std::string out = "planner: ";
  out += fit.empty() ? "none of the usual fixes fits alone" : "fits with " + fit;
  if (!not_fit.empty()) out += "; not with " + not_fit;
  return out;
}

}  // namespace zrepro
