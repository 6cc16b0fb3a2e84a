// See train.h.
#include "trainer/loop/train.h"

#include <chrono>
#include <csignal>
#include <cmath>
#include <sstream>
#include <thread>

#include "device/cuda_memory.h"
#include "offload/host_memory.h"
#include "device/base/errors.h"
#include "trainer/model/data.h"
#include "trainer/model/gpt.h"
#include "zero/engine.h"

namespace zrepro {

using json = nlohmann::json;

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
// [Note: when a run is numerically dead] Checked at every step boundary, on every rank
// alike (the loss and the norm are global after the step's all-reduce):
// - a non-finite loss ends the run, unless fp16's loss scaler skipped the step (the
//   scaler's own rule then ends it at min_loss_scale): under bf16 or fp32 no scaler can
//   recover non-finite parameters or activations, even when bf16.check_grad_overflow
//   skips the update as DeepSpeed's does;
// - a non-finite gradient norm on a step that was not skipped means the update applied
//   inf/NaN gradients (fp32, and bf16 without check_grad_overflow, pass them through as
//   DeepSpeed does): the parameters are no longer finite.
void check_numerics(const StepResult& sr, const DsConfig& cfg, int64_t step) {
  const std::string at = " at step " + std::to_string(step + 1) + " (counted from 1, as the step log)";
  const bool scaler_skip = sr.skipped && cfg.precision == Precision::fp16;
  if (!std::isfinite(sr.loss) && !scaler_skip)
    throw NumericalError("loss is " + std::to_string(sr.loss) + at + ": parameters or activations diverged" +
                         (sr.skipped ? " (bf16.check_grad_overflow skipped the update, which cannot bring them back)"
                                     : ""));
  if (!sr.skipped && !std::isfinite(sr.grad_norm))
    throw NumericalError("gradient norm is not finite" + at + " and the update applied it (" +
                         std::string(cfg.precision == Precision::bf16
                                         ? "bf16 without check_grad_overflow passes inf/NaN gradients through, as "
                                           "DeepSpeed does; \"bf16\": {\"check_grad_overflow\": true} skips such steps"
                                         : cfg.precision == Precision::fp16
                                         ? "fp16 with a static loss scale does not skip overflowing steps, as in DeepSpeed"
                                         : "fp32 has no overflow check, as in DeepSpeed") +
                         "): the parameters are no longer finite");
}

}  // namespace

Injection parse_injection(const std::string& spec) {
  const std::string usage =
      " Expected KIND:RANK[:ARG]: inf-grad:R[:STEPS], gas-mismatch:R, skip-forward:R[:STEP], straggler:R:MS, "
      "drop-accumulated-grads:R, loss-spike:R:FACTOR";
  std::vector<std::string> parts;
  std::stringstream ss(spec);
  for (std::string p; std::getline(ss, p, ':');) parts.push_back(p);
  if (parts.size() < 2 || parts.size() > 3) throw ConfigError("--inject \"" + spec + "\": malformed." + usage);
  Injection inj;
  inj.kind = parts[0];
  if (inj.kind != "inf-grad" && inj.kind != "gas-mismatch" && inj.kind != "skip-forward" && inj.kind != "straggler" &&
      inj.kind != "drop-accumulated-grads" && inj.kind != "loss-spike")
    throw ConfigError("--inject \"" + spec + "\": unknown kind \"" + inj.kind + "\"." + usage);
  // Whole numbers only ("3x", "-1" and "1e9" are refused, not read as 3, -1, 1).
  auto whole = [](const std::string& s) -> int64_t {
    if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos)
      throw std::invalid_argument(s);
    return std::stoll(s);
  };
  auto number = [](const std::string& s) {
    size_t used = 0;
    const double v = std::stod(s, &used);
    if (used != s.size() || !std::isfinite(v)) throw std::invalid_argument(s);
    return v;
  };
  try {
    inj.rank = static_cast<int>(whole(parts[1]));
    const std::string arg = parts.size() == 3 ? parts[2] : "";
    if (inj.kind == "straggler") {
      inj.ms = number(arg);
      if (inj.ms < 0) throw std::invalid_argument("ms");
    } else if (inj.kind == "loss-spike") {
      inj.factor = number(arg);
      if (!(inj.factor > 0)) throw std::invalid_argument("factor");
    } else if (inj.kind == "skip-forward") {
      inj.from = inj.to = arg.empty() ? 1 : whole(arg);
    } else if (inj.kind == "inf-grad" && !arg.empty()) {
      const auto dash = arg.find('-');
      inj.from = whole(arg.substr(0, dash));
      inj.to = dash == std::string::npos ? inj.from : dash + 1 == arg.size() ? -1 : whole(arg.substr(dash + 1));
    } else if (!arg.empty()) {
      throw std::invalid_argument("arg");
    }
  } catch (const std::exception&) {
    throw ConfigError("--inject \"" + spec + "\": bad RANK or ARG." + usage);
  }
  if (inj.to >= 0 && inj.to < inj.from)
    throw ConfigError("--inject \"" + spec + "\": the step range " + std::to_string(inj.from) + "-" +
                      std::to_string(inj.to) + " is reversed (no step would be hit); write it FIRST-LAST, e.g. " +
                      std::to_string(inj.to) + "-" + std::to_string(inj.from));
  return inj;
}

int64_t dynamic_seq_len(int64_t step, int64_t min_len, int64_t max_len) {
  uint64_t h = static_cast<uint64_t>(step) * 0x9E3779B97F4A7C15ULL;  // splitmix64
  h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ULL;
  h = (h ^ (h >> 27)) * 0x94D049BB133111EBULL;
  h ^= h >> 31;
  return min_len + static_cast<int64_t>(h % static_cast<uint64_t>(max_len - min_len + 1));
}

void train(const DsConfig& cfg, const ModelSpec& spec, const TrainOptions& opts, TrainResult& result,
           const StepCallback& on_step, bool keep_final_params) {
  SelfCommunicator self;
  Communicator& comm = opts.comm ? *opts.comm : self;
  DeviceMemory& mem = DeviceMemory::instance();
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
  ecfg.host_link_gbps = opts.host_link_gbps;
  ecfg.pageable_ratio = opts.pageable_ratio;
  ecfg.buffers = opts.buffer_policy;
  for (const auto& inj : opts.inject)
    if (inj.kind == "drop-accumulated-grads" && inj.rank == rank) ecfg.drop_accumulated_grads = true;
  // Initial values come from the host (like a checkpoint) and are not device memory.
  std::vector<torch::Tensor> init;
  {
    DeviceMemory::HostScope host;
    init = gpt_init(spec, opts.seed);
  }
  ZeroEngine engine(gpt_layers(spec), init, ecfg, comm);
  init.clear();
  Gpt model(spec, compute_dtype(cfg.precision, opts.device), opts.device,
            Checkpointing{opts.activation_checkpointing, cfg.activation_checkpointing.cpu_checkpointing});
  MarkovData data(spec.vocab, spec.seq, opts.seed);

  const int64_t micro = cfg.micro_batch;
  auto injected = [&](const char* kind, int64_t step) -> const Injection* {
    for (const auto& inj : opts.inject)
      if (inj.kind == kind && inj.rank == rank && inj.covers(step)) return &inj;
    return nullptr;
  };
  // Faults that make this rank's collective sequence differ from its peers'.
  auto gas_of = [&](int64_t step) { return cfg.grad_accum + (injected("gas-mismatch", step) ? 1 : 0); };
  auto skipped = [&](int64_t step, int64_t t) { return t == 0 && injected("skip-forward", step); };
  std::vector<BatchKey> keys;
  for (int64_t step = 0; step < opts.steps; ++step)
    for (int64_t t = 0; t < gas_of(step); ++t)
      if (!skipped(step, t)) keys.push_back({MarkovData::first_sample(step, t, opts.same_data ? 0 : rank, world, micro, gas_of(step)), micro});
  BatchLoader loader(data, std::move(keys), opts.loader);
  for (int64_t step = 0; step < opts.steps; ++step) {
    const int64_t gas = gas_of(step);
    const Injection* straggle = injected("straggler", step);
    StepRecord rec;
    rec.step = step;
    const CommStats comm_before = comm.stats();
    const CopyStats copies_before = engine.copier() ? engine.copier()->stats() : CopyStats{};
    const auto t_step = Clock::now();
    const double scale = engine.loss_scale();
    double loss_sum = 0;
    int64_t micro_steps = 0;
    for (int64_t t = 0; t < gas; ++t) {
      if (skipped(step, t)) continue;
      engine.begin_micro_step(step, t);
      if (straggle) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(straggle->ms));
      auto t0 = Clock::now();
      const double w_data = wall_seconds();
      torch::Tensor batch = loader.next().to(opts.device, /*non_blocking=*/opts.loader.pin_memory);
      result.input_pinned_peak = std::max(result.input_pinned_peak, HostMemory::instance().input_pinned_bytes());
      const int64_t len = opts.dynamic_seq_min > 0 ? dynamic_seq_len(step, opts.dynamic_seq_min, spec.seq) : spec.seq;
      torch::Tensor inputs = batch.narrow(1, 0, len), targets = batch.narrow(1, 1, len);
      rec.data_wait_s += since(t0);
      const double w_fwd = wall_seconds();

      t0 = Clock::now();
      mem.set_phase(Phase::forward);
      torch::Tensor loss = model.loss(inputs, targets, engine);
      const double lv = loss.item<double>();
      rec.forward_s += since(t0);
      loss_sum += lv;
      ++micro_steps;

      const double w_bwd = wall_seconds();
      t0 = Clock::now();
      mem.set_phase(Phase::backward);
      // loss-spike: gradients FACTOR times larger than the data gives (a loss spike, an
      // outlier batch); the reported loss is the real one. fp16 overflows at any scale
      // once FACTOR x |grad| passes 65504; bf16 and fp32 hold them (Adam is scale-free).
      const Injection* spike = injected("loss-spike", step);
      (loss * (scale * (spike ? spike->factor : 1.0) / static_cast<double>(gas))).backward();
      engine.end_backward();
      rec.backward_s += since(t0);
      if (opts.trace) {
        const json pos = {{"step", step}, {"micro_step", t}};
        opts.trace->span("data", w_data, w_fwd, pos);
        opts.trace->span("forward", w_fwd, w_bwd, pos);
        opts.trace->span("backward", w_bwd, wall_seconds(), pos);
        const MemorySnapshot m = device_memory_snapshot(opts.device);
        opts.trace->memory(wall_seconds(), m.allocated, m.reserved);
      }
    }
    if (injected("inf-grad", step)) engine.inject_inf_grad();

    auto t0 = Clock::now();
    const double w_step = wall_seconds();
    mem.set_phase(Phase::step);
    StepResult sr = engine.step(loss_sum / static_cast<double>(std::max<int64_t>(micro_steps, 1)));
    check_numerics(sr, cfg, step);
    rec.optimizer_s = since(t0);
    rec.loss = sr.loss;
    rec.grad_norm = sr.grad_norm;
    rec.loss_scale = sr.loss_scale;
    rec.skipped = sr.skipped;
    rec.lr = sr.lr;
    if (opts.verify_replicas && engine.policy().replicated_params()) {
      torch::Tensor mine = torch::tensor({engine.replica_fingerprint()}, torch::kLong);
      torch::Tensor all = torch::empty({world}, torch::kLong);
      comm.all_gather(all, mine, "verify replicas")->wait();
      rec.replicas_identical = (all == all[0]).all().item<bool>() ? 1 : 0;
      if (!rec.replicas_identical)
        throw std::runtime_error("parameters differ between ranks after step " + std::to_string(step) +
                                 " (zrepro bug: replicas must stay bit-identical)");
    }
    rec.step_s = since(t_step);
    rec.comm = comm.stats().minus(comm_before);
    if (engine.copier()) rec.copies = engine.copier()->stats().minus(copies_before);
    rec.memory = device_memory_snapshot(opts.device);
    if (opts.trace) {
      opts.trace->span("step", w_step, wall_seconds(), json{{"step", step}, {"skipped", sr.skipped}});
      opts.trace->memory(wall_seconds(), rec.memory.allocated, rec.memory.reserved);
    }
    rec.comm_wait_s = rec.comm.wait_seconds;
    result.skipped_steps += sr.skipped;
    result.steps.push_back(rec);
    result.memory = engine.memory();
    if (on_step) on_step(rec, scale_log(sr.scale_event, rank));
    if (opts.stop_signal && step + 1 < opts.steps)
      if (const int sig = opts.stop_signal())
        throw Interrupted(sig, std::string(sig == SIGTERM ? "SIGTERM" : "SIGINT") + " after step " +
                                   std::to_string(step + 1) + " of " + std::to_string(opts.steps) +
                                   ": stopped at the step boundary");
  }
  if (engine.copier()) {
    result.copies = engine.copier()->stats();
    result.copy_log = engine.copier()->records();
  }
  if (keep_final_params)
    for (size_t l = 0; l < engine.groups().size(); ++l) result.final_params.push_back(engine.gather_layer(l));
}

}  // namespace zrepro
