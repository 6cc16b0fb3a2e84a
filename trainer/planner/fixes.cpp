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

std::vector<FixPrediction> predict_fixes(const PlanRequest& req) {
  std::vector<FixPrediction> out;
  if (req.device_capacity <= 0) return out;
  auto plan = [&](const std::string& fix, const std::string& flags, PlanRequest r) {
    const MemoryPlan p = plan_memory(r);
    out.push_back({fix, flags, p.fits && p.pinned_fits, p.peak_bytes,
                   static_cast<double>(p.peak_bytes) / static_cast<double>(req.device_capacity)});
  };
  if (!req.activation_checkpointing) {
    PlanRequest r = req;
    r.activation_checkpointing = true;
    plan("activation checkpointing", "--activation-checkpointing", r);
  }
  if (req.cfg.micro_batch % 2 == 0) {
    PlanRequest r = req;
    r.cfg.micro_batch /= 2;
    r.cfg.grad_accum *= 2;
    plan("micro-batch " + std::to_string(r.cfg.micro_batch) + " x gas " + std::to_string(r.cfg.grad_accum),
         "--micro-batch " + std::to_string(r.cfg.micro_batch) + " --grad-accum " + std::to_string(r.cfg.grad_accum), r);
  }
  if (!stage_policy(req.cfg.zero.stage).shard_params()) {
    PlanRequest r = req;
    r.cfg.zero.stage = 3;
    plan("ZeRO stage 3", "--zero-stage 3", r);
  }
  if (!req.cfg.zero.offload_optimizer.enabled()) {
    PlanRequest r = req;
    r.cfg.zero.stage = std::max(r.cfg.zero.stage, 1);
    r.cfg.zero.offload_optimizer.device = "cpu";
    plan("optimizer offload to the host" + std::string(req.cfg.zero.stage == 0 ? " (ZeRO stage 1)" : ""),
         "zero_optimization.offload_optimizer.device \"cpu\"", r);
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
