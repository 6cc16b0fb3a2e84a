// See train.h.
#include "trainer/train.h"

#include <chrono>
#include <cmath>
#include <sstream>

#include "device/errors.h"
#include "trainer/data.h"
#include "trainer/gpt.h"
#include "zero/zero_optimizer.h"

namespace zrepro {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string fmt_scale(double s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

// DeepSpeed's loss-scaler lines, so users can match them with their logs.
std::string scale_log(const LossScaler::Event& ev, int rank) {
  switch (ev.kind) {
    case LossScaler::Event::reduced:
      return "[deepspeed] OVERFLOW! Rank " + std::to_string(rank) + " Skipping step. Attempted loss scale: " +
             fmt_scale(ev.old_scale) + ", reducing to " + fmt_scale(ev.new_scale);
    case LossScaler::Event::hysteresis:
      return "[deepspeed] OVERFLOW! Rank " + std::to_string(rank) + " Skipping step. Attempted loss scale: " +
             fmt_scale(ev.old_scale) + ", but hysteresis is " + std::to_string(ev.hysteresis_left + 1) +
             ". Reducing hysteresis to " + std::to_string(ev.hysteresis_left);
    case LossScaler::Event::grew:
      return "[deepspeed] No Grad overflow for loss_scale_window iterations. Increasing loss scale from " +
             fmt_scale(ev.old_scale) + " to " + fmt_scale(ev.new_scale);
    case LossScaler::Event::none: break;
  }
  return "";
}
}  // namespace

Injection parse_injection(const std::string& spec) {
  const std::string usage = " Expected KIND:RANK[:ARG], e.g. inf-grad:0:3- (kinds: inf-grad)";
  Injection inj;
  std::vector<std::string> parts;
  std::stringstream ss(spec);
  for (std::string p; std::getline(ss, p, ':');) parts.push_back(p);
  if (parts.size() < 2 || parts.size() > 3) throw ConfigError("--inject \"" + spec + "\": malformed." + usage);
  inj.kind = parts[0];
  if (inj.kind != "inf-grad") throw ConfigError("--inject \"" + spec + "\": unknown kind \"" + inj.kind + "\"." + usage);
  try {
    size_t used = 0;
    inj.rank = std::stoi(parts[1], &used);
    if (used != parts[1].size() || inj.rank < 0) throw std::invalid_argument("rank");
    if (parts.size() == 3) {
      const std::string& a = parts[2];
      const auto dash = a.find('-');
      inj.from = std::stoll(a.substr(0, dash));
      inj.to = dash == std::string::npos ? inj.from : dash + 1 == a.size() ? -1 : std::stoll(a.substr(dash + 1));
    } else {
      inj.to = -1;  // every step
    }
  } catch (const std::exception&) {
    throw ConfigError("--inject \"" + spec + "\": RANK must be a rank number and ARG a step, N-, or N-M." + usage);
  }
  return inj;
}

void train(const DsConfig& cfg, const ModelSpec& spec, const TrainOptions& opts, TrainResult& result,
           const StepCallback& on_step) {
  torch::manual_seed(opts.seed);
  Gpt model(spec, cfg.precision, opts.device, opts.seed);
  MarkovData data(spec.vocab, spec.seq, opts.seed);
  EngineConfig ecfg{cfg.precision, cfg.optimizer, cfg.scheduler, cfg.fp16, cfg.bf16_check_grad_overflow,
                    cfg.gradient_clipping};
  ZeroOptimizer optimizer(model.groups(), ecfg);

  for (auto& g : model.groups()) {
    result.params_bytes += g.flat().numel() * g.flat().element_size();
    result.grads_bytes += g.flat_grad().numel() * g.flat_grad().element_size();
    // fp32 master (unless it aliases the fp32 params) + exp_avg + exp_avg_sq.
    result.optimizer_states_bytes += g.numel() * 4 * (g.flat().scalar_type() == torch::kFloat ? 2 : 3);
  }

  const int64_t gas = cfg.grad_accum, micro = cfg.micro_batch;
  for (int64_t step = 0; step < opts.steps; ++step) {
    StepRecord rec;
    rec.step = step;
    const auto t_step = Clock::now();
    const double scale = optimizer.loss_scale();
    double loss_sum = 0;
    for (int64_t t = 0; t < gas; ++t) {
      auto t0 = Clock::now();
      torch::Tensor batch =
          data.samples(MarkovData::first_sample(step, t, opts.rank, opts.world_size, micro, gas), micro)
              .to(opts.device);
      torch::Tensor inputs = batch.narrow(1, 0, spec.seq), targets = batch.narrow(1, 1, spec.seq);
      rec.data_wait_s += since(t0);

      t0 = Clock::now();
      torch::Tensor loss = model.loss(inputs, targets);
      const double lv = loss.item<double>();
      rec.forward_s += since(t0);
      if (!std::isfinite(lv))
        throw NumericalError("loss is " + std::to_string(lv) + " at step " + std::to_string(step) + " micro-step " +
                             std::to_string(t) + " (parameters or activations diverged)");
      loss_sum += lv;

      t0 = Clock::now();
      (loss * (scale / static_cast<double>(gas))).backward();
      rec.backward_s += since(t0);
    }
    for (const auto& inj : opts.inject)
      if (inj.kind == "inf-grad" && inj.rank == opts.rank && inj.covers(step)) {
        torch::NoGradGuard no_grad;
        model.groups().front().flat_grad()[0] = INFINITY;
      }

    auto t0 = Clock::now();
    StepResult sr = optimizer.step();
    rec.optimizer_s = since(t0);
    rec.loss = loss_sum / static_cast<double>(gas);
    rec.grad_norm = sr.grad_norm;
    rec.loss_scale = sr.loss_scale;
    rec.skipped = sr.skipped;
    rec.lr = sr.lr;
    rec.step_s = since(t_step);
    result.skipped_steps += sr.skipped;
    result.steps.push_back(rec);
    if (on_step) on_step(rec, scale_log(sr.scale_event, opts.rank));
  }
}

}  // namespace zrepro
