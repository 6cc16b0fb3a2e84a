// Dynamic loss scaling with DeepSpeed's semantics (runtime/fp16/loss_scaler.py):
// on overflow the scale is divided by 2 once hysteresis is used up; after
// loss_scale_window clean steps it doubles; at min_loss_scale an overflow aborts.
// A static scale (fp16.loss_scale > 0) never changes and checks nothing.
#pragma once
#include <cstdint>
#include "device/base/errors.h"
#include "zero/zero_config.h"

namespace zrepro {

class LossScaler {
 public:
  // What update() did, for the caller's log line.
  struct Event {
    enum Kind { none, reduced, hysteresis, grew } kind = none;
    double old_scale = 0, new_scale = 0;
    int hysteresis_left = 0;
  };

  LossScaler(const LossScaleConfig& cfg, bool enabled);

  double scale() const { return scale_; }
  bool dynamic() const { return dynamic_; }
  int hysteresis_left() const { return cur_hysteresis_; }
  // Throws NumericalError ("Current loss scale already at minimum") on an overflow at the minimum scale.
  Event update(bool overflow);

  // What a checkpoint keeps of it (DeepSpeed pickles its DynamicLossScaler's attributes:
  // cur_scale, cur_iter, last_overflow_iter, cur_hysteresis).
  struct State {
    double scale = 1;
    int64_t cur_iter = 0, last_overflow_iter = -1;
    int cur_hysteresis = 0;
  };
  State state() const { return {scale_, cur_iter_, last_overflow_iter_, cur_hysteresis_}; }
  void restore(const State& s) {
    scale_ = s.scale, cur_iter_ = s.cur_iter, last_overflow_iter_ = s.last_overflow_iter;
    cur_hysteresis_ = s.cur_hysteresis;
  }

 private:
  bool dynamic_;
  double scale_;
  double min_scale_;
  int64_t window_;
  int delayed_shift_;
  int cur_hysteresis_;
  bool consecutive_hysteresis_;
  int64_t cur_iter_ = 0;
  int64_t last_overflow_iter_ = -1;
};

}  // namespace zrepro
