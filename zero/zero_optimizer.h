// The optimizer side of the engine at the accumulation boundary: unscale the
// accumulated gradients, check overflow, take the global gradient norm, clip,
// run Adam on the fp32 master weights and write the 16-bit parameters back;
// loss scaling and the lr schedule follow DeepSpeed (a skipped step does not
// advance the scheduler). Stage 0 on one rank: every rank owns every group.
#pragma once
#include <vector>

#include "offload/cpu_adam.h"
#include "zero/loss_scaler.h"
#include "zero/lr_schedule.h"
#include "zero/param_group.h"
#include "zero/zero_config.h"

namespace zrepro {

struct EngineConfig {
  Precision precision = Precision::fp32;
  OptimizerConfig optimizer;
  SchedulerConfig scheduler;
  LossScaleConfig loss_scale;
  bool bf16_check_grad_overflow = true;
  double gradient_clipping = 1.0;
};

struct StepResult {
  bool skipped = false;       // overflow: no update, scale reduced (or hysteresis used)
  double grad_norm = 0;       // global L2 norm of the unscaled gradients, before clipping
  double loss_scale = 1;      // the scale the gradients of this step were computed with
  double lr = 0;              // learning rate applied (or that would have been)
  LossScaler::Event scale_event;
};

class ZeroOptimizer {
 public:
  ZeroOptimizer(std::vector<ParamGroup>& groups, const EngineConfig& cfg);

  double loss_scale() const { return scaler_.scale(); }
  double lr() const { return schedule_.lr(); }
  // Throws NumericalError when an overflow happens at the minimum loss scale.
  StepResult step();
  void zero_grad();

 private:
  struct State {
    torch::Tensor master, exp_avg, exp_avg_sq;  // fp32; master aliases the params in fp32 runs
  };
  bool check_overflow() const;
  void adam(State& s, const torch::Tensor& grad, ParamGroup& g, double lr);

  std::vector<ParamGroup>& groups_;
  EngineConfig cfg_;
  std::vector<State> states_;
  LossScaler scaler_;
  LrSchedule schedule_;
  int64_t adam_steps_ = 0;
};

// Adam with LibTorch ops, for device tensors (CUDA); same math as cpu_adam_step.
void torch_adam_step(torch::Tensor& p, const torch::Tensor& g, torch::Tensor& m, torch::Tensor& v,
                     const AdamHyper& h, int64_t step);

}  // namespace zrepro
