// Learning-rate schedules of DeepSpeed's lr_schedules.py: constant (no scheduler),
// WarmupLR, WarmupDecayLR and WarmupCosineLR, indexed by last_batch_iteration
// exactly as there: the first optimizer step runs at iteration -1 (warmup_min_lr;
// WarmupCosineLR: 0), and the scheduler only advances after a step that was
// applied (not skipped). Also the Hugging Face Trainer's own schedules, where the config
// has none ([Note: the Trainer's schedule], zero_config.h): lambda(iteration + 1).
#pragma once
#include <cstdint>

#include "zero/zero_config.h"

namespace zrepro {

class LrSchedule {
 public:
  LrSchedule(const SchedulerConfig& cfg, double base_lr);
  double lr() const { return lr_at(iteration_); }
  double lr_at(int64_t last_batch_iteration) const;
  double cosine_ratio(int64_t last_batch_iteration) const;  // WarmupCosineLR's factor of the base lr
  double trainer_lambda(int64_t applied_steps) const;       // the Trainer's LambdaLR factor
  void step() { ++iteration_; }
  // DeepSpeed's last_batch_iteration (a checkpoint's lr_scheduler state).
  int64_t iteration() const { return iteration_; }
  void set_iteration(int64_t it) { iteration_ = it; }

 private:
  SchedulerConfig cfg_;
  double base_lr_;
  int64_t warmup_steps_;
  int64_t iteration_ = -1;
};

}  // namespace zrepro
