// See train.h.
#include "trainer/loop/train.h"

#include "trainer/config/leaf_modules.h"

#include <chrono>
#include <memory>
#include <csignal>
#include <cmath>
#include <sstream>
#include <thread>

#include "device/cuda_memory.h"
#include "offload/host_memory.h"
#include "device/base/errors.h"
#include "trainer/checkpoint/ds_checkpoint.h"
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

namespace {

// [Note: injections are resolved once per step] Each --inject is parsed once into an
// InjectKind (the table below), and before the first step faults_at() turns the
// injections that cover this rank and each step into one StepFaults per step: the
// loader's batch keys and the loop ask those records, never compare kind names.
struct InjectKindInfo {
  InjectKind kind;
  const char* name;
  enum class Arg { none, steps, step, ms, factor } arg;
};
constexpr InjectKindInfo kInjectKinds[] = {
    {InjectKind::inf_grad, "inf-grad", InjectKindInfo::Arg::steps},
    {InjectKind::gas_mismatch, "gas-mismatch", InjectKindInfo::Arg::none},
    {InjectKind::skip_forward, "skip-forward", InjectKindInfo::Arg::step},
    {InjectKind::straggler, "straggler", InjectKindInfo::Arg::ms},
    {InjectKind::drop_accumulated_grads, "drop-accumulated-grads", InjectKindInfo::Arg::none},
    {InjectKind::loss_spike, "loss-spike", InjectKindInfo::Arg::factor},
};

// Whole numbers only ("3x", "-1" and "1e9" are refused, not read as 3, -1, 1).
int64_t whole(const std::string& s) {
  if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos)
    throw std::invalid_argument(s);
  return std::stoll(s);
}

double number(const std::string& s) {
  size_t used = 0;
  const double v = std::stod(s, &used);
  if (used != s.size() || !std::isfinite(v)) throw std::invalid_argument(s);
  return v;
}

// ARG of one kind into inj (throws std::invalid_argument).
void parse_injection_arg(InjectKindInfo::Arg kind, const std::string& arg, Injection& inj) {
  using Arg = InjectKindInfo::Arg;
  switch (kind) {
    case Arg::ms:
      inj.ms = number(arg);
      if (inj.ms < 0) throw std::invalid_argument("ms");
      return;
    case Arg::factor:
      inj.factor = number(arg);
      if (!(inj.factor > 0)) throw std::invalid_argument("factor");
      return;
    case Arg::step:
      inj.from = inj.to = arg.empty() ? 1 : whole(arg);
      return;
    case Arg::steps:
      if (arg.empty()) return;
      {
        const auto dash = arg.find('-');
        inj.from = whole(arg.substr(0, dash));
        inj.to = dash == std::string::npos ? inj.from : dash + 1 == arg.size() ? -1 : whole(arg.substr(dash + 1));
      }
      return;
    case Arg::none:
      if (!arg.empty()) throw std::invalid_argument("arg");
      return;
  }
}

}  // namespace

const char* inject_kind_name(InjectKind k) {
  for (const auto& i : kInjectKinds)
    if (i.kind == k) return i.name;
  return "?";
}

bool Injection::changes_collectives() const {
  return kind == InjectKind::gas_mismatch || kind == InjectKind::skip_forward || kind == InjectKind::straggler;
}

Injection parse_injection(const std::string& spec) {
  const std::string usage =
      " Expected KIND:RANK[:ARG]: inf-grad:R[:STEPS], gas-mismatch:R, skip-forward:R[:STEP], straggler:R:MS, "
      "drop-accumulated-grads:R, loss-spike:R:FACTOR";
  std::vector<std::string> parts;
  std::stringstream ss(spec);
  for (std::string p; std::getline(ss, p, ':');) parts.push_back(p);
  if (parts.size() < 2 || parts.size() > 3) throw ConfigError("--inject \"" + spec + "\": malformed." + usage);
  const InjectKindInfo* info = nullptr;
  for (const auto& i : kInjectKinds)
    if (parts[0] == i.name) info = &i;
  if (!info) throw ConfigError("--inject \"" + spec + "\": unknown kind \"" + parts[0] + "\"." + usage);
  Injection inj;
  inj.kind = info->kind;
  try {
    inj.rank = static_cast<int>(whole(parts[1]));
    parse_injection_arg(info->arg, parts.size() == 3 ? parts[2] : "", inj);
  } catch (const std::exception&) {
    throw ConfigError("--inject \"" + spec + "\": bad RANK or ARG." + usage);
  }
  if (inj.to >= 0 && inj.to < inj.from)
    throw ConfigError("--inject \"" + spec + "\": the step range " + std::to_string(inj.from) + "-" +
                      std::to_string(inj.to) + " is reversed (no step would be hit); write it FIRST-LAST, e.g. " +
                      std::to_string(inj.to) + "-" + std::to_string(inj.from));
  return inj;
}

StepFaults faults_at(const std::vector<Injection>& inject, int rank, int64_t step, int64_t grad_accum) {
  StepFaults f;
  f.gas = grad_accum;
  for (const auto& inj : inject) {
    if (inj.rank != rank || !inj.covers(step)) continue;
    switch (inj.kind) {
      case InjectKind::gas_mismatch: f.gas = grad_accum + 1; break;
      case InjectKind::skip_forward: f.skip_first = true; break;
      case InjectKind::straggler: if (f.straggle_ms == 0) f.straggle_ms = inj.ms; break;
      case InjectKind::loss_spike: if (f.grad_factor == 1) f.grad_factor = inj.factor; break;
      case InjectKind::inf_grad: f.inf_grad = true; break;
      case InjectKind::drop_accumulated_grads: break;  // the engine's, for the whole run (EngineConfig)
    }
  }
  return f;
}

int64_t dynamic_seq_len(int64_t step, int64_t min_len, int64_t max_len) {
  uint64_t h = static_cast<uint64_t>(step) * 0x9E3779B97F4A7C15ULL;  // splitmix64
  h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ULL;
  h = (h ^ (h >> 27)) * 0x94D049BB133111EBULL;
  h ^= h >> 31;
  return min_len + static_cast<int64_t>(h % static_cast<uint64_t>(max_len - min_len + 1));
}

namespace {

// The engine's configuration: the job's, on this run's device (the one place a JobSpec
// becomes an EngineConfig).
std::unique_ptr<ZeroEngine> make_engine(const JobSpec& job, const ModelSpec& model, const TrainOptions& opts,
                                        Communicator& comm) {
  const DsConfig& cfg = job.cfg;
  EngineConfig ecfg;
  static_cast<EngineSettings&>(ecfg) = cfg;  // [Note: what a config gives the engine]
  ecfg.comm_dtype = comm_dtype_of(cfg);
  ecfg.device = opts.device;
  ecfg.host_link_gbps = job.host_link_gbps;
  ecfg.pageable_ratio = job.pageable_ratio;
  ecfg.buffers = job.buffers;
  for (const auto& inj : opts.inject)
    if (inj.kind == InjectKind::drop_accumulated_grads && inj.rank == comm.rank()) ecfg.drop_accumulated_grads = true;
  // Initial values come from the host (like a checkpoint) and are not device memory.
  std::vector<torch::Tensor> init;
  {
    DeviceMemory::HostScope host;
    init = gpt_init(model, opts.seed);
  }
  return std::make_unique<ZeroEngine>(model.layer_shapes(), init, ecfg, comm, *opts.engine_observer);
}

// Every micro-batch this rank will load, in order (the loader prefetches them), from
// each step's faults (which micro-steps run).
// The micro-batch this rank trains on at (step, t) of a step of `gas` micro-steps (rank 0's
// under --data-rule same).
BatchKey batch_key(const DsConfig& cfg, const TrainOptions& opts, int64_t step, int64_t t, int64_t gas, int rank,
                   int world) {
  return {MarkovData::first_sample(step, t, opts.same_data ? 0 : rank, world, cfg.micro_batch, gas), cfg.micro_batch};
}

std::vector<BatchKey> batch_keys(const DsConfig& cfg, const TrainOptions& opts, const std::vector<StepFaults>& faults,
                                 int rank, int world, int64_t first_step) {
  std::vector<BatchKey> keys;
  for (int64_t step = first_step; step < static_cast<int64_t>(faults.size()); ++step) {
    const StepFaults& f = faults[step];
    for (int64_t t = 0; t < f.gas; ++t)
      if (f.runs(t)) keys.push_back(batch_key(cfg, opts, step, t, f.gas, rank, world));
  }
  return keys;
}

// The step's measurements around the engine: collective and copy deltas, the memory after
// the step, the trace's spans and memory counter. start() before the first micro-step,
// finish() after the optimizer step.
class StepObserver {
 public:
  StepObserver(const TrainOptions& opts, Communicator& comm, ZeroEngine& engine)
      : opts_(opts), comm_(comm), engine_(engine) {}
  void start() {
    comm_before_ = comm_.stats();
    copies_before_ = engine_.copier() ? engine_.copier()->stats() : CopyStats{};
    t_step_ = Clock::now();
  }
  // One micro-step's data / forward / backward spans (wall-clock marks) and memory.
  void micro_step(int64_t step, int64_t t, double w_data, double w_fwd, double w_bwd) const {
    if (!opts_.trace) return;
    const json pos = {{"step", step}, {"micro_step", t}};
    opts_.trace->span("data", w_data, w_fwd, pos);
    opts_.trace->span("forward", w_fwd, w_bwd, pos);
    opts_.trace->span("backward", w_bwd, wall_seconds(), pos);
    const MemorySnapshot m = device_memory_snapshot(opts_.device);
    opts_.trace->memory(wall_seconds(), m.allocated, m.reserved);
  }
  void finish(StepRecord& rec, double w_step) const {
    rec.step_s = since(t_step_);
    rec.comm = comm_.stats().minus(comm_before_);
    if (engine_.copier()) rec.copies = engine_.copier()->stats().minus(copies_before_);
    rec.memory = device_memory_snapshot(opts_.device);
    rec.windows = DeviceMemory::instance().take_windows();
    if (opts_.trace) {
      opts_.trace->span("step", w_step, wall_seconds(), json{{"step", rec.step}, {"skipped", rec.skipped}});
      opts_.trace->memory(wall_seconds(), rec.memory.allocated, rec.memory.reserved);
    }
    rec.comm_wait_s = rec.comm.wait_seconds;
  }

 private:
  const TrainOptions& opts_;
  Communicator& comm_;
  ZeroEngine& engine_;
  CommStats comm_before_;
  CopyStats copies_before_;
  Clock::time_point t_step_;
};

// What one rank's loop works with.
struct Loop {
  const DsConfig& cfg;
  const ModelSpec& spec;
  const TrainOptions& opts;
  Communicator& comm;
  ZeroEngine& engine;
  Gpt& model;
  const MarkovData& data;
  BatchLoader& loader;
  TrainResult& result;
};

// The sequence length step `step` runs at (dynamic padding's, or the model's).
int64_t step_len(const Loop& l, int64_t step) {
  return l.opts.dynamic_seq_min > 0 ? dynamic_seq_len(step, l.opts.dynamic_seq_min, l.spec.seq) : l.spec.seq;
}

// The weights of the step's micro-steps on this rank. A token normalisation counts the
// scored tokens of the rank's micro-batches of the step before the first runs (the
// Trainer's get_batch_samples); token sums them over the ranks (its gather of
// num_items_in_batch), a blocking all-reduce every rank issues.
MicroWeights step_weights(Loop& l, int64_t step, const StepFaults& f) {
  const int rank = l.comm.rank(), world = l.comm.world_size();
  int64_t run = 0, tokens = 0;
  for (int64_t t = 0; t < f.gas; ++t) {
    if (!f.runs(t)) continue;
    ++run;
    if (l.opts.loss_normalization == LossNormalization::mean) continue;
    const BatchKey k = batch_key(l.cfg, l.opts, step, t, f.gas, rank, world);
    tokens += l.data.target_tokens(k.first_sample, k.count, step_len(l, step));
  }
  int64_t global = tokens;
  if (l.opts.loss_normalization == LossNormalization::token && world > 1) {
    torch::Tensor n = torch::tensor({static_cast<double>(tokens)}, torch::kDouble);
    l.comm.all_reduce_wait(n, "num_items_in_batch");
    global = static_cast<int64_t>(n.item<double>());
  }
  return micro_weights(l.opts.loss_normalization, f.gas, run, world, tokens, global);
}

std::string stop_name(int sig) { return sig == SIGTERM ? "SIGTERM" : "SIGINT"; }

// An injected straggler's delay, slept in slices: a stop signal ends it (Interrupted) rather
// than the whole delay ([Note: stopping on a signal], trainer/runtime/liveness.h).
void injected_delay(const TrainOptions& opts, double ms, int64_t step) {
  const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(ms));
  for (auto now = Clock::now(); now < until; now = Clock::now()) {
    if (const int sig = opts.signal_seen ? opts.signal_seen() : 0)
      throw Interrupted(sig, stop_name(sig) + " inside step " +
                                 std::to_string(step + 1) + " of " + std::to_string(opts.steps) +
                                 ", in the injected straggler delay: stopped there, the step unfinished");
    const Clock::duration slice = std::chrono::milliseconds(50);
    std::this_thread::sleep_for(std::min<Clock::duration>(until - now, slice));
  }
}

// Micro-step t of step `step`: load, forward, backward (the loss times its normalisation
// divisor, the loss scale and any loss-spike factor). Returns the micro-batch's loss (its
// mean, or its sum under a token normalisation).
double micro_step(Loop& l, StepRecord& rec, const StepFaults& f, int64_t t, double scale, const MicroWeights& w,
                  const StepObserver& obs) {
  l.engine.begin_micro_step(rec.step, t, f.gas);
  if (f.straggle_ms > 0) injected_delay(l.opts, f.straggle_ms, rec.step);
  auto t0 = Clock::now();
  const double w_data = wall_seconds();
  torch::Tensor batch = l.loader.next().to(l.opts.device, /*non_blocking=*/l.opts.loader.pin_memory);
  l.result.input_pinned_peak = std::max(l.result.input_pinned_peak, HostMemory::instance().input_pinned_bytes());
  const int64_t len = step_len(l, rec.step);
  torch::Tensor inputs = batch.narrow(1, 0, len), targets = batch.narrow(1, 1, len);
  if (l.data.padded()) inputs = inputs.clamp_min(0);  // padding goes in as token 0, unscored
  rec.data_wait_s += since(t0);
  const double w_fwd = wall_seconds();

  t0 = Clock::now();
  l.engine.begin_forward();
  torch::Tensor loss = l.model.loss(inputs, targets, l.engine, w.sum, w.forward_div);
  const double lv = loss.item<double>();
  rec.forward_s += since(t0);

  const double w_bwd = wall_seconds();
  t0 = Clock::now();
  l.engine.begin_backward();
  // loss-spike: gradients FACTOR times larger than the data gives (a loss spike, an
  // outlier batch); the reported loss is the real one. fp16 overflows at any scale
  // once FACTOR x |grad| passes 65504; bf16 and fp32 hold them (Adam is scale-free).
  (loss * (scale * f.grad_factor / w.grad_div)).backward();
  l.engine.end_backward();
  rec.backward_s += since(t0);
  obs.micro_step(rec.step, t, w_data, w_fwd, w_bwd);
  return lv;
}

// The optimizer step at the accumulation boundary, its numerics checked, into rec.
StepResult optimizer_step(Loop& l, StepRecord& rec, double mean_loss) {
  const auto t0 = Clock::now();
  StepResult sr = l.engine.step(mean_loss);
  check_numerics(sr, l.cfg, rec.step);
  rec.optimizer_s = since(t0);
  rec.loss = sr.loss;
  rec.grad_norm = sr.grad_norm;
  rec.loss_scale = sr.loss_scale;
  rec.skipped = sr.skipped;
  rec.lr = sr.lr;
  if (l.opts.verify_replicas && l.engine.policy().replicated_params()) {
    torch::Tensor mine = torch::tensor({l.engine.replica_fingerprint()}, torch::kLong);
    torch::Tensor all = torch::empty({l.comm.world_size()}, torch::kLong);
    l.comm.all_gather_wait(all, mine, "verify replicas");
    rec.replicas_identical = (all == all[0]).all().item<bool>() ? 1 : 0;
    if (!rec.replicas_identical)
      throw std::runtime_error("parameters differ between ranks after step " + std::to_string(rec.step) +
                               " (zrepro bug: replicas must stay bit-identical)");
  }
  return sr;
}

// --resume: the checkpoint's state into the engine (memory phase load). Returns the step
// the run starts at (0 without a resume).
int64_t resume(const JobSpec& job, const ModelSpec& spec, const TrainOptions& opts, ZeroEngine& engine,
               TrainResult& result) {
  if (opts.resume_dir.empty()) return 0;
  DeviceMemory::instance().set_phase(Phase::load);
  const Resumed r = load_checkpoint(engine, spec, job.cfg, opts.resume_dir);
  result.resumed = TrainResult::Resume{r.folder, r.tag, r.meta.global_steps, r.universal};
  result.skipped_steps = r.meta.skipped_steps;
  if (r.meta.global_steps >= opts.steps)
    throw ConfigError("--resume " + opts.resume_dir + ": " + r.tag + " has " + std::to_string(r.meta.global_steps) +
                      " steps done and --steps is " + std::to_string(opts.steps) +
                      " (the total, as the Trainer's max_steps): give more steps to train after it");
  return r.meta.global_steps;
}

// --save-every N: a checkpoint after every N-th step (memory phase save).
void save_if_due(const JobSpec& job, const ModelSpec& spec, const TrainOptions& opts, ZeroEngine& engine, int64_t step,
                 TrainResult& result) {
  if (opts.save_every <= 0 || (step + 1) % opts.save_every != 0) return;
  const auto t0 = Clock::now();
  DeviceMemory::instance().set_phase(Phase::save);
  const CheckpointMeta meta{step + 1, result.skipped_steps, (step + 1) * job.cfg.train_batch_size};
  // The Hugging Face Trainer's order (_save_checkpoint): save_model's 16-bit consolidation
  // first, then the ZeRO checkpoint; a rank 0 killed in the first leaves no checkpoint.
  const int64_t consolidated = save_16bit_model(engine, spec, job.cfg, opts.save_dir, opts.host_memory);
  const std::string folder = save_checkpoint(engine, spec, job.cfg, opts.save_dir, meta);
  result.saved.push_back({step + 1, folder, since(t0), consolidated});
}

// The stop check at a step boundary (TrainOptions::stop_signal): throws Interrupted.
void stop_if_asked(const TrainOptions& opts, int64_t step) {
  if (!opts.stop_signal || step + 1 >= opts.steps) return;
  if (const int sig = opts.stop_signal())
    throw Interrupted(sig, stop_name(sig) + " after step " +
                               std::to_string(step + 1) + " of " + std::to_string(opts.steps) +
                               ": stopped at the step boundary");
}

}  // namespace

void train(const JobSpec& job, const TrainOptions& opts, TrainResult& result, const StepCallback& on_step,
           bool keep_final_params) {
  SelfCommunicator self;
  Communicator& comm = opts.comm ? *opts.comm : self;
  const int rank = comm.rank(), world = comm.world_size();
  if (job.world_size != world)
    throw ConfigError("the job is for " + std::to_string(job.world_size) + " rank(s) and the communicator has " +
                      std::to_string(world) + ": resolve the config for the ranks that train it");
  const DsConfig& cfg = job.cfg;
  // The model's groups as this run's ZeRO-3 fetches them ([Note: which experts a rank fetches]).
  const ModelSpec spec = with_expert_fetch(job.model, cfg.zero);
  torch::manual_seed(opts.seed);
  DeviceMemory::instance().take_windows();  // [Note: phase windows]: this run's timeline starts here
  const std::unique_ptr<ZeroEngine> engine = make_engine(job, spec, opts, comm);
  Gpt model(spec, compute_dtype(cfg.precision, opts.device), opts.device,
            Checkpointing{job.activation_checkpointing, cfg.activation_checkpointing.cpu_checkpointing});
  MarkovData data(spec.vocab, spec.seq, opts.seed, opts.seq_len_dist);
  const int64_t first_step = resume(job, spec, opts, *engine, result);
  std::vector<StepFaults> faults;  // every step's, resolved once: the loader's keys and the loop read them
  for (int64_t step = 0; step < opts.steps; ++step) faults.push_back(faults_at(opts.inject, rank, step, cfg.grad_accum));
  BatchLoader loader(data, batch_keys(cfg, opts, faults, rank, world, first_step), opts.loader);
  Loop l{cfg, spec, opts, comm, *engine, model, data, loader, result};
  StepObserver obs(opts, comm, *engine);
  for (int64_t step = first_step; step < opts.steps; ++step) {
    const StepFaults& f = faults[step];
    StepRecord rec;
    rec.step = step;
    obs.start();
    const double scale = engine->loss_scale();
    const MicroWeights w = step_weights(l, step, f);
    double loss = 0;
    for (int64_t t = 0; t < f.gas; ++t)
      if (f.runs(t)) loss += micro_step(l, rec, f, t, scale, w, obs);
    if (f.inf_grad) engine->inject_inf_grad();
    const double w_step = wall_seconds();
    const StepResult sr = optimizer_step(l, rec, loss / w.report_div);
    obs.finish(rec, w_step);
    result.skipped_steps += sr.skipped;
    result.steps.push_back(rec);
    result.memory = engine->memory();
    if (on_step) on_step(rec, scale_log(sr.scale_event, rank));
    save_if_due(job, spec, opts, *engine, step, result);
    stop_if_asked(opts, step);
    // After the step and the stop check: a rank that does not take part goes on to its next
    // step's collectives ([Note: a forward on some ranks]).
    if (opts.rank_work.any()) run_rank_work(opts.rank_work, step, opts.seed, model, *engine, data, comm, opts.device);
  }
  if (engine->copier()) {
    result.copies = engine->copier()->stats();
    result.copy_log = engine->copier()->records();
  }
  if (keep_final_params)
    for (size_t l2 = 0; l2 < engine->groups().size(); ++l2) result.final_params.push_back(engine->gather_layer(l2));
}

}  // namespace zrepro
