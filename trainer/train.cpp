// See train.h.
#include "trainer/train.h"

#include <chrono>
#include <cmath>
#include <sstream>

#include "device/errors.h"
#include "trainer/data.h"
#include "trainer/gpt.h"
#include "zero/engine.h"

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

torch::ScalarType comm_dtype_of(const DsConfig& cfg) {
  const std::string& t = cfg.communication_data_type;
  return t == "fp16" ? torch::kHalf : t == "bf16" ? torch::kBFloat16 : torch::kFloat;
}

void train(const DsConfig& cfg, const ModelSpec& spec, const TrainOptions& opts, TrainResult& result,
           const StepCallback& on_step, bool keep_final_params) {
  SelfCommunicator self;
  Communicator& comm = opts.comm ? *opts.comm : self;
  const int rank = comm.rank(), world = comm.world_size();
  torch::manual_seed(opts.seed);
  EngineConfig ecfg;
  ecfg.precision = cfg.precision;
  ecfg.zero = cfg.zero;
  ecfg.optimizer = cfg.optimizer;
  ecfg.scheduler = cfg.scheduler;
  ecfg.loss_scale = cfg.fp16;
  ecfg.bf16_check_grad_overflow = cfg.bf16_check_grad_overflow;
  ecfg.gradient_clipping = cfg.gradient_clipping;
  ecfg.comm_dtype = comm_dtype_of(cfg);
  ecfg.device = opts.device;
  ZeroEngine engine(gpt_layers(spec), gpt_init(spec, opts.seed), ecfg, comm);
  Gpt model(spec, compute_dtype(cfg.precision, opts.device), opts.device);
  MarkovData data(spec.vocab, spec.seq, opts.seed);

  const int64_t gas = cfg.grad_accum, micro = cfg.micro_batch;
  for (int64_t step = 0; step < opts.steps; ++step) {
    StepRecord rec;
    rec.step = step;
    const CommStats comm_before = comm.stats();
    const auto t_step = Clock::now();
    const double scale = engine.loss_scale();
    double loss_sum = 0;
    for (int64_t t = 0; t < gas; ++t) {
      engine.begin_micro_step(step, t);
      auto t0 = Clock::now();
      torch::Tensor batch =
          data.samples(MarkovData::first_sample(step, t, rank, world, micro, gas), micro).to(opts.device);
      torch::Tensor inputs = batch.narrow(1, 0, spec.seq), targets = batch.narrow(1, 1, spec.seq);
      rec.data_wait_s += since(t0);

      t0 = Clock::now();
      torch::Tensor loss = model.loss(inputs, targets, engine);
      const double lv = loss.item<double>();
      rec.forward_s += since(t0);
      if (!std::isfinite(lv))
        throw NumericalError("loss is " + std::to_string(lv) + " at step " + std::to_string(step) + " micro-step " +
                             std::to_string(t) + " on rank " + std::to_string(rank) +
                             " (parameters or activations diverged)");
      loss_sum += lv;

      t0 = Clock::now();
      (loss * (scale / static_cast<double>(gas))).backward();
      engine.end_backward();
      rec.backward_s += since(t0);
    }
    for (const auto& inj : opts.inject)
      if (inj.kind == "inf-grad" && inj.rank == rank && inj.covers(step)) engine.inject_inf_grad();

    auto t0 = Clock::now();
    StepResult sr = engine.step(loss_sum / static_cast<double>(gas));
    rec.optimizer_s = since(t0);
    rec.loss = sr.loss;
    rec.grad_norm = sr.grad_norm;
    rec.loss_scale = sr.loss_scale;
    rec.skipped = sr.skipped;
    rec.lr = sr.lr;
    rec.step_s = since(t_step);
    rec.comm = comm.stats().minus(comm_before);
    rec.comm_wait_s = rec.comm.wait_seconds;
    result.skipped_steps += sr.skipped;
    result.steps.push_back(rec);
    result.memory = engine.memory();
    if (on_step) on_step(rec, scale_log(sr.scale_event, rank));
  }
  if (keep_final_params)
    for (size_t l = 0; l < engine.groups().size(); ++l) result.final_params.push_back(engine.gather_layer(l));
}

}  // namespace zrepro
