// See train.h.
#include "trainer/loop/train.h"

#include <chrono>
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
  try {
    size_t used = 0;
    inj.rank = std::stoi(parts[1], &used);
    if (used != parts[1].size() || inj.rank < 0) throw std::invalid_argument("rank");
    const std::string arg = parts.size() == 3 ? parts[2] : "";
    if (inj.kind == "straggler") {
      inj.ms = std::stod(arg);
      if (inj.ms < 0) throw std::invalid_argument("ms");
    } else if (inj.kind == "loss-spike") {
      inj.factor = std::stod(arg);
      if (!(inj.factor > 0)) throw std::invalid_argument("factor");
    } else if (inj.kind == "skip-forward") {
      inj.from = inj.to = arg.empty() ? 1 : std::stoll(arg);
    } else if (inj.kind == "inf-grad" && !arg.empty()) {
      const auto dash = arg.find('-');
      inj.from = std::stoll(arg.substr(0, dash));
      inj.to = dash == std::string::npos ? inj.from : dash + 1 == arg.size() ? -1 : std::stoll(arg.substr(dash + 1));
    } else if (!arg.empty()) {
      throw std::invalid_argument("arg");
    }
  } catch (const std::exception&) {
    throw ConfigError("--inject \"" + spec + "\": bad RANK or ARG." + usage);
  }
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
    // The loss is global after the step's all-reduce, so every rank decides alike.
    // fp16/bf16 turn a non-finite loss into an overflow-skipped step instead.
    if (!std::isfinite(sr.loss) && !sr.skipped)
      throw NumericalError("loss is " + std::to_string(sr.loss) + " at step " + std::to_string(step) +
                           " (parameters or activations diverged)");
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
  }
  if (engine.copier()) {
    result.copies = engine.copier()->stats();
    result.copy_log = engine.copier()->records();
  }
  if (keep_final_params)
    for (size_t l = 0; l < engine.groups().size(); ++l) result.final_params.push_back(engine.gather_layer(l));
}

}  // namespace zrepro
