// See lr_schedule.h.
#include "zero/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace zrepro {

LrSchedule::LrSchedule(const SchedulerConfig& cfg, double base_lr)
    : cfg_(cfg), base_lr_(base_lr), warmup_steps_(std::max<int64_t>(2, cfg.warmup_num_steps)) {}

double LrSchedule::cosine_ratio(int64_t it) const {
  if (it < 0) return 0.0;  // DeepSpeed: "before it has started"
  if (it < warmup_steps_) {
    const double r = cfg_.warmup_type == "linear" ? static_cast<double>(it) / warmup_steps_
                                                  : std::log(static_cast<double>(it + 1)) / std::log(double(warmup_steps_));
    return cfg_.warmup_min_ratio + r * (1.0 - cfg_.warmup_min_ratio);
  }
  const double done = static_cast<double>(it - warmup_steps_ + 1);
  const double span = std::max<double>(1.0, static_cast<double>(cfg_.total_num_steps - warmup_steps_));
  const double progress = std::min(1.0, done / span);
  const double r = (1.0 + std::cos(M_PI * progress)) / 2.0;
  return std::max(0.0, cfg_.cos_min_ratio + (1.0 - cfg_.cos_min_ratio) * r);
}

// transformers' optimization.py lambdas (get_scheduler's defaults and the kwargs above).
double LrSchedule::trainer_lambda(int64_t s) const {
  const int64_t w = cfg_.warmup_num_steps, total = cfg_.total_num_steps;
  const std::string& t = cfg_.type;
  if (t == "constant") return 1.0;
  if (s < w) return static_cast<double>(s) / static_cast<double>(std::max<int64_t>(1, w));
  if (t == "constant_with_warmup") return 1.0;
  const double span = static_cast<double>(std::max<int64_t>(1, total - w));
  if (t == "linear") return std::max(0.0, static_cast<double>(total - s) / span);
  const double progress = static_cast<double>(s - w) / span;
  const double factor = 0.5 * (1.0 + std::cos(M_PI * cfg_.num_cycles * 2.0 * progress));
  if (t == "cosine") return std::max(0.0, factor);
  return std::max(0.0, factor * (1 - cfg_.min_lr_rate) + cfg_.min_lr_rate);  // cosine_with_min_lr
}

double LrSchedule::lr_at(int64_t it) const {
  if (cfg_.type.empty()) return base_lr_;
  if (cfg_.trainer) return base_lr_ * trainer_lambda(it + 1);
  if (cfg_.type == "WarmupCosineLR") return base_lr_ * cosine_ratio(it);
  const double lo = cfg_.warmup_min_lr, delta = cfg_.warmup_max_lr - cfg_.warmup_min_lr;
  if (it < 0) return lo;
  double gamma;
  if (it < warmup_steps_) {
    gamma = cfg_.warmup_type == "linear" ? static_cast<double>(it) / warmup_steps_
                                         : std::log(static_cast<double>(it + 1)) / std::log(double(warmup_steps_));
  } else if (cfg_.type == "WarmupDecayLR") {
    gamma = std::max(0.0, static_cast<double>(cfg_.total_num_steps - it) /
                              std::max<double>(1.0, cfg_.total_num_steps - warmup_steps_));
  } else {
    gamma = 1.0;
  }
  return lo + delta * gamma;
}

}  // namespace zrepro
