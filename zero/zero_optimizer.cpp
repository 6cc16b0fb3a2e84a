// See zero_optimizer.h.
#include "zero/zero_optimizer.h"

#include <cmath>
#include <limits>

namespace zrepro {

void torch_adam_step(torch::Tensor& p, const torch::Tensor& g, torch::Tensor& m, torch::Tensor& v,
                     const AdamHyper& h, int64_t step) {
  torch::NoGradGuard no_grad;
  const double bc1 = h.bias_correction ? 1.0 - std::pow(h.beta1, step) : 1.0;
  const double bc2 = h.bias_correction ? 1.0 - std::pow(h.beta2, step) : 1.0;
  torch::Tensor grad = h.adam_w_mode || h.weight_decay == 0 ? g : g.add(p, h.weight_decay);
  if (h.adam_w_mode && h.weight_decay != 0) p.mul_(1.0 - h.lr * h.weight_decay);
  m.mul_(h.beta1).add_(grad, 1.0 - h.beta1);
  v.mul_(h.beta2).addcmul_(grad, grad, 1.0 - h.beta2);
  torch::Tensor denom = (v.sqrt() / std::sqrt(bc2)).add_(h.eps);
  p.addcdiv_(m, denom, -h.lr / bc1);
}

ZeroOptimizer::ZeroOptimizer(std::vector<ParamGroup>& groups, const EngineConfig& cfg)
    : groups_(groups),
      cfg_(cfg),
      scaler_(cfg.loss_scale, cfg.precision == Precision::fp16),
      schedule_(cfg.scheduler, cfg.optimizer.lr) {
  torch::NoGradGuard no_grad;
  for (auto& g : groups_) {
    State s;
    s.master = g.flat().scalar_type() == torch::kFloat ? g.flat() : g.flat().to(torch::kFloat);
    s.exp_avg = torch::zeros_like(s.master);
    s.exp_avg_sq = torch::zeros_like(s.master);
    states_.push_back(std::move(s));
  }
}

void ZeroOptimizer::zero_grad() {
  for (auto& g : groups_) g.zero_grad();
}

bool ZeroOptimizer::check_overflow() const {
  for (auto& g : groups_)
    if (!torch::isfinite(g.flat_grad()).all().item<bool>()) return true;
  return false;
}

void ZeroOptimizer::adam(State& s, const torch::Tensor& grad, ParamGroup& g, double lr) {
  AdamHyper h{lr, cfg_.optimizer.beta1, cfg_.optimizer.beta2, cfg_.optimizer.eps, cfg_.optimizer.weight_decay,
              cfg_.optimizer.adam_w_mode, cfg_.optimizer.bias_correction};
  const bool aliased = s.master.data_ptr() == g.flat().data_ptr();
  if (s.master.device().is_cpu()) {
    cpu_adam_step(s.master, grad, s.exp_avg, s.exp_avg_sq, h, adam_steps_, aliased ? torch::Tensor() : g.flat());
  } else {
    torch_adam_step(s.master, grad, s.exp_avg, s.exp_avg_sq, h, adam_steps_);
    if (!aliased) g.flat().copy_(s.master);
  }
}

StepResult ZeroOptimizer::step() {
  torch::NoGradGuard no_grad;
  StepResult r;
  r.loss_scale = scaler_.scale();
  r.lr = schedule_.lr();
  const bool check = (cfg_.precision == Precision::fp16 && scaler_.dynamic()) ||
                     (cfg_.precision == Precision::bf16 && cfg_.bf16_check_grad_overflow);
  if (check && check_overflow()) {
    r.skipped = true;
    r.grad_norm = std::numeric_limits<double>::quiet_NaN();
    r.scale_event = scaler_.update(true);  // throws at the minimum scale
    zero_grad();
    return r;
  }
  // Unscale into fp32 (in place when the gradients already are fp32).
  std::vector<torch::Tensor> grads;
  double sq = 0;
  for (auto& g : groups_) {
    torch::Tensor g32 = g.flat_grad().to(torch::kFloat);
    if (r.loss_scale != 1.0) g32.mul_(1.0 / r.loss_scale);
    const double n = g32.norm().item<double>();
    sq += n * n;
    grads.push_back(g32);
  }
  r.grad_norm = std::sqrt(sq);
  if (cfg_.gradient_clipping > 0 && r.grad_norm > cfg_.gradient_clipping) {
    const double coef = cfg_.gradient_clipping / (r.grad_norm + 1e-6);
    for (auto& g32 : grads) g32.mul_(coef);
  }
  ++adam_steps_;
  for (size_t i = 0; i < groups_.size(); ++i) adam(states_[i], grads[i], groups_[i], r.lr);
  r.scale_event = scaler_.update(false);
  schedule_.step();
  zero_grad();
  return r;
}

}  // namespace zrepro
