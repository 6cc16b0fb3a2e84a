// See loss_scaler.h. Mirrors DeepSpeed's DynamicLossScaler.update_scale step by step,
// including the iteration counter that governs growth after a window of clean steps.
#include "zero/loss_scaler.h"

#include <cmath>
#include <string>

namespace zrepro {

LossScaler::LossScaler(const LossScaleConfig& cfg, bool enabled)
    : dynamic_(enabled && cfg.loss_scale == 0),
      scale_(!enabled ? 1.0 : cfg.loss_scale > 0 ? cfg.loss_scale : std::ldexp(1.0, cfg.initial_scale_power)),
      min_scale_(cfg.min_loss_scale),
      window_(cfg.loss_scale_window),
      delayed_shift_(cfg.hysteresis),
      cur_hysteresis_(cfg.hysteresis),
      consecutive_hysteresis_(cfg.consecutive_hysteresis) {}

LossScaler::Event LossScaler::update(bool overflow) {
  Event ev;
  ev.old_scale = ev.new_scale = scale_;
  if (!dynamic_) return ev;
  if (overflow) {
    if (delayed_shift_ == 1 || cur_hysteresis_ == 1) {
      if (scale_ <= min_scale_)
        throw NumericalError("Current loss scale already at minimum - cannot decrease scale anymore. "
                                 "Exiting run. (loss scale " + std::to_string(scale_) + ")");
      scale_ = std::max(scale_ / 2.0, min_scale_);
      ev.kind = Event::reduced;
    } else {
      --cur_hysteresis_;
      ev.kind = Event::hysteresis;
    }
    last_overflow_iter_ = cur_iter_;
  } else {
    if (consecutive_hysteresis_) cur_hysteresis_ = delayed_shift_;
    if ((cur_iter_ - last_overflow_iter_) % window_ == 0) {
      if (!consecutive_hysteresis_) cur_hysteresis_ = delayed_shift_;
      scale_ *= 2.0;
      ev.kind = Event::grew;
    }
  }
  ++cur_iter_;
  ev.new_scale = scale_;
  ev.hysteresis_left = cur_hysteresis_;
  return ev;
}

}  // namespace zrepro
