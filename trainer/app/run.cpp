// `zrepro run`: train under a DeepSpeed config on 1..N ranks and record what
// happens. Under mpirun (or with --ranks N, which starts mpirun) every rank runs
// this; rank 0 alone prints for humans and writes summary.json, gathering the
// other ranks' reports. A watchdog turns a stuck collective into a diagnosed hang
// (exit 4 on every rank); every other failure becomes a summary and its exit code
// (the failure table in trainer/report/report.h).
//
// The command is a sequence of steps on one RunState: parse the flags into a
// RunSpec (run_spec.h), set up (ranks, output folder, config and model, device,
// plan, host link), print the header, train, gather the ranks' reports, write the
// outputs. Failures unwind to run_command, which maps each to its table row.
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <memory>
#include <optional>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <thread>

#include "device/base/errors.h"
#include "device/cuda_memory.h"
#include "device/device.h"
#include "offload/host_memory.h"
#include "trainer/app/cli.h"
#include "trainer/app/env.h"
#include "trainer/runtime/launch.h"
#include "trainer/runtime/out_dir.h"
#include "trainer/runtime/liveness.h"
#include "trainer/app/run_spec.h"
#include "trainer/config/rank_configs.h"
#include "trainer/loop/virtual_ranks.h"
#include "trainer/model/data.h"
#include "trainer/model/gpt.h"
#include "trainer/planner/fixes.h"
#include "trainer/planner/link_profile.h"
#include "trainer/report/hang.h"
#include "trainer/report/inputs_export.h"
#include "trainer/report/report.h"
#include "zero/comm/mpi_communicator.h"
#include "zero/comm/watchdog.h"

namespace zrepro {

using json = nlohmann::json;

namespace {

// One-line progress on a terminal (stderr), overwritten in place.
class Progress {
 public:
  explicit Progress(bool enabled) : on_(enabled && ::isatty(STDERR_FILENO)) {}
  void update(const StepRecord& s, int64_t total) {
    if (!on_) return;
    std::fprintf(stderr, "\r[zrepro] step %lld/%lld  loss %.4f  %.3f s/step  ETA %.0fs   ",
                 static_cast<long long>(s.step + 1), static_cast<long long>(total), s.loss, s.step_s,
                 s.step_s * static_cast<double>(total - s.step - 1));
    std::fflush(stderr);
    dirty_ = true;
  }
  void clear() {
    if (dirty_) std::fprintf(stderr, "\r%80s\r", "");
    dirty_ = false;
  }

 private:
  bool on_;
  bool dirty_ = false;
};

// What to try, from the phase and the category that filled the device (checkpoint zero-stage, docs/design/ARCHITECTURE.md).
std::string oom_hint(const MemorySnapshot& at, Phase phase, const StagePolicy& policy) {
  int top = 0;
  for (int c = 1; c < kNumMemCategories; ++c)
    if (at.by_category[c] > at.by_category[top]) top = c;
  const std::string largest = std::string("largest category: ") + mem_category_name(static_cast<MemCategory>(top)) +
                              " (" + format_bytes(at.by_category[top]) + "). ";
  const int64_t params = at.by_category[static_cast<int>(MemCategory::params)];
  switch (phase) {
    case Phase::init:
      return largest + "The 16-bit parameters do not fit: ZeRO stage 3 shards them (stage 1/2 keep a full copy per rank).";
    case Phase::partition:
      return largest + "Optimizer states (fp32 master + Adam moments, 12 bytes/param) do not fit: more ranks with "
                       "stage >= 1, or offload_optimizer to cpu.";
    case Phase::forward:
    case Phase::backward:
      // Replicated parameters: every 16-bit parameter on every rank (configs/scenarios/zero2-params-dont-fit).
      if (policy.replicated_params() && at.capacity > 0 && params * 4 > at.capacity)
        return largest + "The full 16-bit parameters take " + std::to_string(100 * params / at.capacity) +
               "% of the device on every rank (stage " + std::to_string(policy.stage) +
               " does not shard them): ZeRO stage 3 keeps 1/N of them per rank; otherwise activation "
               "checkpointing or a smaller micro-batch.";
      return largest + "Model states fit but this micro-batch's activations or buffers do not: activation "
                       "checkpointing, or a smaller micro-batch with more gradient accumulation (same global batch); "
                       "if comm_buffers dominate, smaller reduce_bucket_size / stage3_prefetch_bucket_size.";
    default:
      return largest + "Out of memory in the optimizer step: optimizer offload, or more ranks.";
  }
}

bool wait_for(const std::function<bool()>& ready, double seconds) {
  const double until = wall_seconds() + seconds;
  while (!ready()) {
    if (wall_seconds() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

// trace.json from one rank's events, under that rank's process (pid) in the viewer.
json one_rank_trace(int rank, const json& events) {
  std::vector<json> per_rank(static_cast<size_t>(rank) + 1, json::array());
  per_rank[rank] = events;
  return merge_traces(per_rank);
}

// Everything one rank's run holds, filled step by step.
struct RunState {
  RunSpec spec;
  int rank = 0, world = 1;
  std::unique_ptr<Ranks> ranks;
  std::unique_ptr<VirtualRanks> vranks;           // --world-size: every rank in this process
  std::optional<DeviceMemory::OwnerScope> owner;  // virtual: whose ledger this thread reads
  std::vector<RankReport> virtual_reports;        // virtual: every rank's view, for a failure's summary
  bool out_claimed = false;                       // --out locked for this run (trainer/runtime/out_dir.h)
  std::unique_ptr<TraceRecorder> trace;           // this rank's spans, kept for a failure's trace.json
  bool trace_complete = false;                    // its collectives and copies added (trace_events)
  std::vector<std::string> config_mismatch;       // keys where the ranks' effective configs differ
  std::vector<Peer> peers;                        // several processes: every rank's host and pid
  DsConfig cfg;
  ModelSpec model;
  bool have_cfg = false, have_model = false;
  std::unique_ptr<ScaleDown> scaled;     // --target-model: the toy derived from the target
  std::optional<MemoryPlan> planned;     // the planner's prediction for this run (CPU-emulated device)
  DeviceInfo dev;
  TrainOptions topt;
  TrainResult result;
  Progress progress{true};
  std::unique_ptr<MetricsWriter> metrics;

  Communicator& comm() { return vranks ? vranks->comm(rank) : *ranks->comm; }
  // This process prints and writes the run's files: rank 0, or the one process of virtual ranks.
  bool speaks() const { return rank == 0 || vranks; }
  // This run is one of several processes (mpirun), not virtual ranks in one.
  bool several_processes() const { return ranks && !vranks && world > 1; }
  // The emulated or fractioned device capacity: the toy's under scale-down, else the flag's.
  int64_t capacity() const { return scaled ? scaled->toy_capacity : spec.device_memory.value_or(0); }
  std::string flight_dir() const { return (spec.out_dir.empty() ? std::string("zrepro_flight") : spec.out_dir) + "/flight"; }

  // Rank 0 writes the summary from every rank's report. A run that fails writes the
  // failing rank's own view: with one process, summary.json; with several, each failing
  // rank its summary_rank<r>.json, merged into summary.json ([Note: every rank's view]).
  // Never throws: it runs inside the failure handlers, where an exception would end the
  // process in terminate with nothing written; a write that fails is said on stderr.
  void write_summary(const std::string& status, json failure, std::vector<RankReport> reports, bool all_ranks) {
    if (spec.out_dir.empty() || (all_ranks && !speaks())) return;
    try {
      write_summary_or_throw(status, std::move(failure), std::move(reports), !all_ranks && several_processes());
    } catch (const std::exception& e) {
      std::cerr << "[zrepro] rank " << rank << ": could not write the summary in " << spec.out_dir << ": " << e.what()
                << std::endl;
    }
  }

  void write_summary_or_throw(const std::string& status, json failure, std::vector<RankReport> reports,
                              bool own_view_of_many = false) {
    if (reports.empty()) reports = virtual_reports;
    if (reports.empty()) reports.push_back(rank_report(rank, result, device_memory_snapshot(dev.device)));
    SummaryInput in{status, have_cfg ? &cfg : nullptr, have_model ? &model : nullptr, dev.description,
                    have_cfg ? &result : nullptr, std::move(reports), std::move(failure), topt.host_link_gbps,
                    topt.pageable_ratio, planned ? &*planned : nullptr, scaled.get(), &topt.loader,
                    spec.interconnect_gbps, environment_json(), virtual_json(), config_mismatch};
    const json summary = build_summary(in);
    if (own_view_of_many) return publish_rank_view(spec.out_dir, rank, world, summary);
    write_summary_and_report(spec.out_dir, summary);
    if (out_claimed) seal_out_dir(spec.out_dir);  // [Note: only zrepro's files move]
  }

  // summary.json's virtual_ranks (null for real processes).
  json virtual_json() const {
    if (!vranks) return nullptr;
    return {{"world_size", world},
            {"as_rank", vranks->subject()},
            {"data_rule", spec.same_data ? "same" : "distinct"},
            {"peer_host_bytes_peak", HostMemory::instance().peak_peer_bytes()},
            {"note", "one process stood in for every rank: each rank's memory and numerics are exact; step times "
                     "are not (the ranks shared this process's cores)"}};
  }

  // This rank's trace events, its collectives and copies added once (a run that fails
  // after its trace was written must not add them twice).
  json trace_events() {
    if (!trace_complete) {
      trace->add_collectives(comm().recorder().snapshot());
      trace->add_copies(result.copy_log);
      trace_complete = true;
    }
    return trace->events();
  }

  // A failed run's trace.json: this rank's spans and collectives up to the failure
  // (the speaking rank's view; never throws).
  void write_trace_so_far() {
    if (!trace || spec.out_dir.empty() || !speaks()) return;
    try {
      write_file_atomic(spec.out_dir + "/trace.json", one_rank_trace(rank, trace_events()).dump());
    } catch (const std::exception& e) {
      std::cerr << "[zrepro] could not write trace.json: " << e.what() << std::endl;
    }
  }

  // A failure in one call: its line on stderr (empty: none), the failure record
  // (make_failure plus `extra`), then fail().
  int fail_with(FailureKind kind, const std::string& phase, const std::string& line, const std::string& message,
                const std::string& hint, const json& extra = json::object(), int exit_code = -1) {
    progress.clear();  // before the line (fail() clears it too, for its other callers)
    if (!line.empty()) std::cerr << line << std::endl;
    json failure = make_failure(kind, rank, phase, message, hint);
    failure.update(extra);
    return fail(kind, std::move(failure), exit_code);
  }

  // The end of a failed run: this rank's summary and the failure's exit code, the row's
  // unless given (SIGTERM's 143 beside SIGINT's 130).
  int fail(FailureKind kind, json failure, int exit_code = -1) {
    progress.clear();
    const FailureRow& row = failure_row(kind);
    const int code = exit_code >= 0 ? exit_code : row.exit_code;
    try {
      if (metrics) metrics->close();  // the completed steps' records, whole lines
    } catch (const std::exception& e) {
      std::cerr << "[zrepro] could not close metrics.jsonl: " << e.what() << std::endl;
    }
    write_summary(row.status, std::move(failure), {}, false);
    write_trace_so_far();
    // With peers, never finalize MPI on a failure (peers may be inside a collective
    // and MPI_Finalize would wait for them): exit now, and mpirun ends the others.
    if (ranks && ranks->comm->world_size() > 1) {
      std::fflush(nullptr);
      std::_Exit(code);
    }
    return code;
  }
};

// ---------------------------------------------------------------- signals

// The step boundary's stop check (TrainOptions::stop_signal, trainer/runtime/liveness.h).
int stop_signal_at_boundary(RunState& s) {
  return stop_at_boundary(s.several_processes() ? &s.comm() : nullptr, s.peers, s.rank);
}

// ---------------------------------------------------------------- set-up

// --out for this run; when it cannot be made it is forgotten (no summary can go there).
void make_run_out_dir(RunState& s) {
  if (s.spec.out_dir.empty()) return;
  try {
    make_out_dir(s.spec.out_dir);
    if (s.speaks() && !s.out_claimed) {
      const std::vector<std::string> moved = claim_out_dir(s.spec.out_dir);
      s.out_claimed = true;
      if (!moved.empty())
        std::cout << "[zrepro] --out " << s.spec.out_dir << ": an earlier run's files (" << moved.size()
                  << ") moved to " << s.spec.out_dir << "/previous/\n";
    }
  } catch (const ConfigError&) {
    s.spec.out_dir.clear();
    throw;
  }
}

// A flag error found before set-up still leaves its summary in --out, if it can be made.
void make_out_dir_quietly(RunState& s) {
  try {
    make_run_out_dir(s);
  } catch (const ConfigError&) {
  }
}

ConfigFlags flags_for(const RunSpec& spec, const ModelSpec& m, int world) {
  ConfigFlags f = spec.flags;
  f.hidden_size = m.hidden;
  f.world_size = world;
  f.total_steps = spec.steps;
  return f;
}

// The config and the model: as given, or a toy scaled down from the target.
void resolve_config(RunState& s) {
  const RunSpec& spec = s.spec;
  if (spec.target_model) {
    const int target_world = spec.target_world_size.value_or(s.world);
    if (target_world != s.world)
      throw ConfigError("--target-world-size " + std::to_string(target_world) + ": this run has " +
                        std::to_string(s.world) + " rank(s); ZeRO's per-rank partitions depend on the world size, so "
                        "run the toy as that many ranks: --world-size " + std::to_string(target_world) +
                        " (one process) or --ranks " + std::to_string(target_world));
    ScaleRequest sr;
    sr.target = resolve_model(*spec.target_model, spec.model_overrides);
    sr.cfg = load_ds_config(require_config(spec.config_path), flags_for(spec, sr.target, s.world));
    sr.world_size = s.world;
    sr.target_capacity = *spec.target_device_memory;
    if (spec.scale) sr.scale = *spec.scale;
    sr.activation_checkpointing = spec.activation_checkpointing;
    s.scaled = std::make_unique<ScaleDown>(scale_down(sr));
    s.model = s.scaled->toy;
    s.cfg = s.scaled->toy_cfg;
  } else {
    s.model = resolve_model(spec.model, spec.model_overrides);
    s.cfg = load_ds_config(require_config(spec.config_path), flags_for(spec, s.model, s.world));
  }
  s.have_model = s.have_cfg = true;
  if (spec.export_inputs && (s.model.family != Family::gpt2 || s.model.tied || s.model.attention != Attention::eager))
    throw ConfigError("--export-inputs: the conformance network (conformance/ds_model.py) is the GPT-2 family with an "
                      "untied LM head and eager attention; got " + std::string(family_name(s.model.family)) +
                      (s.model.tied ? ", tied" : "") + ", " + attention_name(s.model.attention) +
                      " (use --model tiny or small)");
  // LibTorch indexes some kernels with 32 bits: a micro-batch past that is refused here,
  // not left to fail inside a kernel.
  if (s.cfg.micro_batch > std::numeric_limits<int32_t>::max() / std::max<int64_t>(s.model.seq + 1, 1))
    throw ConfigError("train_micro_batch_size_per_gpu: got " + std::to_string(s.cfg.micro_batch) + " with sequence " +
                      std::to_string(s.model.seq) + ": more than 2^31 tokens per micro-batch, past what one device "
                      "step can index; use a micro-batch of at most " +
                      std::to_string(std::numeric_limits<int32_t>::max() / (s.model.seq + 1)));
  if (spec.dynamic_seq_min && (*spec.dynamic_seq_min < 1 || *spec.dynamic_seq_min > s.model.seq))
    throw ConfigError("--dynamic-seq: got " + std::to_string(*spec.dynamic_seq_min) + ", expected 1.." +
                      std::to_string(s.model.seq) + " (the model's sequence length)");
}

// What the planner is asked about this run (CPU-emulated device).
PlanRequest plan_request(const RunState& s) {
  PlanRequest pr;
  pr.model = s.model;
  pr.cfg = s.cfg;
  pr.world_size = s.world;
  pr.device_capacity = s.capacity();
  pr.activation_checkpointing = s.spec.activation_checkpointing;
  pr.rank = s.rank;  // ranks differ at stage 2 (DeepSpeed's whole-parameter gradient partition)
  return pr;
}

// [Note: the emulated device lives in host memory] On the CPU-emulated device every rank's
// device bytes are this machine's RAM: a run whose planned peak (and offload buffers) for
// the ranks on this host exceeds what the host has available would be killed by the
// kernel's OOM killer part-way, with no summary (exit 137). It is refused before the
// first allocation instead: a host OOM, exit 3, with the figures.
struct HostShortfall : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void preflight_host_memory(const RunState& s, int64_t cap) {
  if (!s.dev.device.is_cpu() || !s.planned) return;
  const int64_t available = meminfo_bytes("MemAvailable:");
  if (available <= 0) return;  // not Linux, or not readable: nothing to compare with
  const MemoryPlan& p = *s.planned;
  const int64_t device = cap > 0 ? std::min(p.peak_bytes, cap) : p.peak_bytes;  // a capacity stops the run there
  const int64_t per_rank = device + p.host_bytes + p.host_pinned_bytes + p.host_pageable_bytes;
  const int ranks_here = s.vranks ? s.world : mpi_local_size();
  const double need = static_cast<double>(per_rank) * ranks_here;
  if (need <= static_cast<double>(available)) return;
  throw HostShortfall("the run would need " + format_bytes(static_cast<int64_t>(need)) + " of this host's memory (" +
                      std::to_string(ranks_here) + " rank(s) here x " + format_bytes(per_rank) +
                      ": the planned device peak" + (cap > 0 ? " up to the capacity" : "") +
                      " plus offload buffers), and it has " + format_bytes(available) + " available (MemAvailable)");
}

// The device: the emulated one (tracking / caching allocator, capacity, memory log,
// the planner's figures for this run) or CUDA (the caching allocator's memory fraction).
void install_device(RunState& s) {
  const RunSpec& spec = s.spec;
  s.dev = for_flag("--device " + spec.device, [&] { return select_device(spec.device, mpi_local_rank()); });
  s.topt.device = s.dev.device;
  const int64_t cap = s.capacity();
  if (!s.dev.device.is_cpu()) {
    if (cap > 0) {
      for_flag("--device-memory", [&] { cuda_set_capacity(s.dev.device.index(), cap); });
      s.dev.description += ", capacity " + format_bytes(cap) + " (memory fraction)";
    }
    if (s.vranks) {  // the other virtual ranks compute on the CPU: their bytes measured, uncapped
      DeviceMemory::instance().install(0);
      s.dev.description += "; the other " + std::to_string(s.world - 1) + " virtual ranks on the CPU (measured, no capacity)";
    }
    return;
  }
  DeviceMemory& mem = DeviceMemory::instance();
  // The caching emulation honours PyTorch's own switch for expandable segments.
  const char* conf = std::getenv("PYTORCH_CUDA_ALLOC_CONF");
  const bool expandable = spec.allocator == "caching" && conf && std::strstr(conf, "expandable_segments:True");
  if (spec.allocator != "plain") mem.install(cap, spec.allocator == "caching", expandable);
  if (spec.memory_log) {
    const std::string path = *spec.memory_log + (s.world > 1 ? ".rank" + std::to_string(s.rank) : "");
    try {
      mem.log_to(path, s.vranks ? s.rank : 0);
    } catch (const std::exception& e) {
      throw ConfigError("--memory-log: " + std::string(e.what()));
    }
  }
  s.dev.description += ", " + spec.allocator + " allocator" + (expandable ? " (expandable segments)" : "") +
                       (cap > 0 ? ", capacity " + format_bytes(cap) : "");
  s.planned = plan_memory(plan_request(s));
  preflight_host_memory(s, cap);
}

// --host-link-profile: the modelled link from a target GPU and this CPU's speed.
void derive_host_link(RunState& s) {
  if (!s.spec.host_link_profile) return;
  if (!s.dev.device.is_cpu()) throw ConfigError("--host-link-profile: only the CPU-emulated device models the link");
  const DerivedLink d = derive_link(*s.spec.host_link_profile, compute_dtype(s.cfg.precision, s.dev.device),
                                    s.cfg.micro_batch * s.model.seq, s.model.hidden, s.model.intermediate);
  // Every rank must model the same link: rank 0's measurement decides.
  torch::Tensor v = torch::tensor({d.link_gbps}, torch::kDouble);
  if (!s.vranks) s.comm().broadcast(v, 0, "host link profile")->wait();  // virtual: one measurement already
  s.topt.host_link_gbps = v.item<double>();
  if (s.speaks())
    std::cout << "[zrepro] host link " << d.profile.name << ": target " << fmt(d.profile.link_gbps) << " GB/s for "
              << fmt(d.profile.achieved_tflops) << " achieved TFLOPS; this CPU " << fmt(d.cpu_gflops)
              << " GFLOPS -> modelled link " << fmt(s.topt.host_link_gbps) << " GB/s\n";
}

// Each --inject names a rank of this world and a step of this run.
void check_injections(const RunSpec& spec, int world) {
  for (size_t i = 0; i < spec.injections.size(); ++i) {
    const Injection& inj = spec.injections[i];
    if (inj.rank >= world)
      throw ConfigError("--inject \"" + spec.inject_specs[i] + "\": rank " + std::to_string(inj.rank) +
                        " does not exist in a world of " + std::to_string(world));
    if (inj.from >= spec.steps)
      throw ConfigError("--inject \"" + spec.inject_specs[i] + "\": step " + std::to_string(inj.from) +
                        " is past the run's --steps " + std::to_string(spec.steps) +
                        " (injection steps count from 0: the last is " + std::to_string(spec.steps - 1) +
                        "); it would have no effect");
  }
}

// --ranks N: the config, the model and the injections are checked once here, before
// mpirun starts N processes that would each refuse them.
void precheck_before_launch(const RunSpec& spec, int world) {
  check_ranks_fit_slots(world, spec.oversubscribe, cpu_slots());
  const ModelSpec m = resolve_model(spec.target_model.value_or(spec.model), spec.model_overrides);
  load_ds_config(require_config(spec.config_path), flags_for(spec, m, world));
  check_injections(spec, world);
}

// --world-size N, or a scale-down to an N-rank target with one process: the N ranks
// run in this process (trainer/loop/virtual_ranks.h).
void start_virtual_ranks(RunState& s) {
  const RunSpec& spec = s.spec;
  int n = spec.world_size.value_or(1);
  if (!spec.world_size && spec.target_model && s.world == 1) n = spec.target_world_size.value_or(1);
  if (n == 1 && !spec.world_size) return;
  if (s.world > 1)
    throw ConfigError("--world-size: runs every rank in one process; this one is rank " + std::to_string(s.rank) +
                      " of " + std::to_string(s.world) + " under an MPI launcher: drop --ranks (or mpirun)");
  if (spec.world_size && spec.target_world_size && *spec.target_world_size != n)
    throw ConfigError("--target-world-size " + std::to_string(*spec.target_world_size) + " and --world-size " +
                      std::to_string(n) + ": the toy runs as the target's ranks; give one");
  s.vranks = std::make_unique<VirtualRanks>(n, spec.as_rank, spec.comm_timeout);
  s.rank = spec.as_rank;
  s.world = n;
  s.owner.emplace(s.rank);
}

// Every rank's effective config against the others': ranks that disagree (a per-rank
// config file, an edited copy on one node) issue different collectives and hang, so the
// differing keys are said at start-up and kept for the summary and the hang report.
void compare_rank_configs(RunState& s) {
  if (s.world == 1 || s.vranks || !s.ranks->mpi) return;
  std::vector<json> per_rank;
  for (const std::string& t :
       mpi_all_gather_text(s.cfg.resolved_json().dump(-1, ' ', false, json::error_handler_t::replace)))
    per_rank.push_back(json::parse(t, nullptr, false));
  s.config_mismatch = config_mismatch(per_rank);
  if (s.rank == 0)
    for (const std::string& line : s.config_mismatch)
      std::cerr << "[zrepro] warning: the ranks' effective configs differ: " << line << std::endl;
}

void set_up(RunState& s, int* argc, char*** argv) {
  const RunSpec& spec = s.spec;
  s.ranks = std::make_unique<Ranks>(argc, argv, spec.device == "cuda");
  s.rank = s.comm().rank();
  s.world = s.comm().world_size();
  make_run_out_dir(s);
  start_virtual_ranks(s);
  s.topt.comm = &s.comm();
  s.topt.same_data = spec.same_data;
  s.topt.steps = spec.steps;
  s.topt.seed = spec.seed;
  s.topt.verify_replicas = spec.verify_replicas;
  s.topt.activation_checkpointing = spec.activation_checkpointing;
  s.topt.dynamic_seq_min = spec.dynamic_seq_min.value_or(0);
  s.topt.loader = spec.loader;
  s.topt.host_link_gbps = spec.host_link_gbps;
  s.topt.pageable_ratio = spec.pageable_ratio;
  if (spec.memlock_limit) {
    for_flag("--memlock-limit", [&] { restrict_memlock(*spec.memlock_limit); });
    if (s.speaks())
      std::cout << "[zrepro] memlock: ulimit -l " << *spec.memlock_limit / 1024
                << " KiB without CAP_IPC_LOCK (--memlock-limit), as a container's non-root user\n";
  }
  set_compute_threads(spec.threads);
  check_injections(spec, s.world);
  s.topt.inject = spec.injections;
  resolve_config(s);
  compare_rank_configs(s);
  if (s.world > 1 && !s.vranks && s.ranks->mpi) s.peers = gather_peers();
  install_device(s);
  derive_host_link(s);
  if (spec.interconnect_gbps > 0) {
    if (!s.dev.device.is_cpu())
      throw ConfigError("--interconnect-gbps: models the interconnect of the CPU-emulated device; a GPU run uses its own");
    if (s.vranks) s.vranks->model_busbw(spec.interconnect_gbps);
    else s.comm().model_busbw(spec.interconnect_gbps);
    if (s.speaks())
      std::cout << "[zrepro] interconnect: collectives modelled at " << fmt(spec.interconnect_gbps)
                << " GB/s bus bandwidth (--interconnect-gbps)\n";
  }
}

void print_header(RunState& s) {
  if (!s.speaks()) return;
  if (s.vranks)
    std::cout << "[zrepro] virtual ranks: this process stands in for all " << s.world << " ranks (one thread, engine "
              << "and device-memory ledger each; collectives in-process); reporting as rank " << s.rank
              << ", data rule " << (s.spec.same_data ? "same" : "distinct")
              << "; memory and numerics are the N-rank job's, step times are not\n";
  if (!s.vranks && s.world > 1 && s.ranks->mpi && mpi_local_size() > cpu_slots())
    std::cout << "[zrepro] oversubscribed: " << mpi_local_size() << " ranks on " << cpu_slots()
              << " core(s) of this node share them ([Note: oversubscribed ranks]): memory and losses are exact, step "
              << "times measure the sharing\n";
  const DsConfig& cfg = s.cfg;
  const ModelSpec& model = s.model;
  for (const auto& w : cfg.warnings) std::cout << "[zrepro] warning: " << w << "\n";
  if (s.spec.print_config) std::cout << format_config_dump(cfg);
  if (s.scaled) {
    const ScaleDown& sd = *s.scaled;
    const MemoryPlan& tp = sd.target_plan;
    std::cout << "[zrepro] scale-down: target " << sd.target.name << " (" << sd.target.param_count() << " params) on "
              << s.world << " rank(s) with " << format_bytes(tp.capacity) << " -> toy " << model.param_count()
              << " params (factor " << fmt(sd.factor, 5) << ", hidden " << model.hidden << ", seq " << model.seq
              << ", vocab " << model.vocab << ") with " << format_bytes(sd.toy_capacity) << "\n[zrepro] scaled:";
    for (const auto& k : sd.scaled_keys) std::cout << " " << k << ";";
    std::cout << "\n[zrepro] planner, target: "
              << (tp.fits ? std::string("fits") : "OOM in phase " + std::string(phase_name(tp.oom_phase)))
              << " (peak " << format_bytes(tp.peak_bytes) << " per rank); fidelity (planned, at the peak):\n"
              << sd.table();
    for (const auto& w : sd.warnings) std::cout << "[zrepro] warning: " << w << "\n";
  }
  std::cout << "[zrepro] world_size=" << s.world << " zero_stage=" << cfg.zero.stage
            << " precision=" << precision_name(cfg.precision) << " deepspeed=" << cfg.deepspeed_version
            << " device=" << s.dev.description
            << " comm=" << s.comm().backend() << "\n"
            << "[zrepro] model " << model.name << ": " << model.param_count() << " params, " << model.layers
            << " layers, hidden " << model.hidden << ", heads " << model.heads << ", seq " << model.seq << ", vocab "
            << model.vocab << "\n"
            << "[zrepro] batch: micro " << cfg.micro_batch << " x gas " << cfg.grad_accum << " x world " << s.world
            << " = " << cfg.train_batch_size << " samples/step; data: Markov chain, a perfect model reaches "
            << fmt(MarkovData::entropy_floor(), 3) << " nats\n";
  for (const auto& [name, o] : {std::pair<const char*, const OffloadConfig&>{"offload_optimizer", cfg.zero.offload_optimizer},
                                {"offload_param", cfg.zero.offload_param}})
    if (o.enabled())  // the form diagnose reads: DeepSpeed prints the same keys in its config dump
      std::cout << "[zrepro] " << name << "=" << o.device << " (pin_memory=" << (o.pin_memory ? "true" : "false")
                << ", buffer_count=" << o.buffer_count << ")\n";
  const LoaderOptions& l = s.topt.loader;
  if (l.workers > 0 || l.sample_ms > 0 || l.pin_memory)
    std::cout << "[zrepro] data loader: " << l.workers << " worker(s) x prefetch " << l.prefetch_factor << ", "
              << fmt(l.sample_ms) << " ms/sample preparation (emulated), pin_memory "
              << (l.pin_memory ? "true" : "false") << " (input batches only; the offload buffers follow the config)\n";
  std::cout << std::flush;
}

// ---------------------------------------------------------------- hang path

// Dumps this rank's flight recorder; rank 0 merges the dumps, diagnoses and writes
// the summary; every rank exits 4. Runs on the watchdog thread (or the thread that
// saw a collective fail) while the training thread may be blocked.
[[noreturn]] void on_hang(RunState& s, const std::string& reason) {
  static std::atomic<bool> once{false};
  if (once.exchange(true)) {
    // Another thread is already reporting: it exits the process.
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  s.progress.clear();
  const std::string flight = s.flight_dir(), out = s.spec.out_dir;
  const double timeout = s.spec.comm_timeout;
  std::error_code ec;
  std::filesystem::create_directories(flight, ec);
  write_file_atomic(flight + "/rank" + std::to_string(s.rank) + ".json",
                    json{{"rank", s.rank}, {"reason", reason}, {"entries", flight_json(s.comm().recorder().snapshot())}}
                        .dump(1));
  if (s.rank == 0) {
    if (s.metrics) s.metrics->close();  // the training thread is blocked in a collective
    auto dump = [&](int k) { return flight + "/rank" + std::to_string(k) + ".json"; };
    wait_for([&] {
      for (int k = 0; k < s.world; ++k)
        if (!std::filesystem::exists(dump(k))) return false;
      return true;
    }, std::min(timeout, 30.0) + 5.0);
    std::vector<std::vector<FlightEntry>> all(s.world);
    for (int k = 0; k < s.world; ++k) {
      std::ifstream in(dump(k));
      if (in) all[k] = flight_from_json(json::parse(in).at("entries"));
    }
    const HangDiagnosis d = diagnose_hang(all, s.cfg.grad_accum);
    // A mismatch caught by the collective signatures ([Note: collective signatures])
    // ends here at once; a collective that simply never completes, at the timeout.
    const bool mismatch = reason.find("ranks disagree") != std::string::npos;
    std::cerr << (mismatch ? "[zrepro] Collective mismatch caught before any data moved (under NCCL the ranks block here until "
                             "\"Watchdog caught collective operation timeout\"): "
                           : "[zrepro] Watchdog caught collective operation timeout: ")
              << reason << "\n"
              << "[zrepro] hang diagnosis: " << d.text << std::endl;
    json report{{"reason", reason}, {"timeout_s", timeout}, {"diagnosis", d.to_json()}};
    std::string configs;  // the ranks' differing config keys, if any: the likely cause
    for (const auto& line : s.config_mismatch) configs += (configs.empty() ? "" : "; ") + line;
    if (!configs.empty()) {
      report["config_mismatch"] = s.config_mismatch;
      std::cerr << "[zrepro] the ranks ran different configs: " << configs << std::endl;
    }
    if (!out.empty()) {
      try {
        write_file_atomic(out + "/hang_report.json", report.dump(2));
      } catch (const std::exception& e) {
        std::cerr << "[zrepro] could not write hang_report.json: " << e.what() << std::endl;
      }
    }
    json failure = make_failure(FailureKind::hang, d.culprits.empty() ? s.rank : d.culprits.front(),
                                 "collective #" + std::to_string(d.seq),
                                 reason + ". " + d.text +
                                     (configs.empty() ? "" : " The ranks ran different configs: " + configs + "."),
                                 "ranks issued different collectives (per-rank gradient accumulation, a rank that "
                                 "stops early or skips a forward): make every rank run the same micro-steps; see "
                                 "flight/ and hang_report.json");
    failure["hang"] = d.to_json();  // suspects and every rank's collective position, for report.html
    s.write_summary(failure_row(FailureKind::hang).status, std::move(failure), {}, true);
  } else {
    wait_for([&] { return out.empty() || std::filesystem::exists(out + "/hang_report.json"); },
             std::min(timeout, 30.0) + 10.0);
  }
  std::fflush(nullptr);
  std::_Exit(failure_row(FailureKind::hang).exit_code);
}

std::unique_ptr<Watchdog> arm_watchdog(RunState& s) {
  s.comm().on_failure([&s](const std::string& reason) { on_hang(s, reason); });
  if (s.world == 1) return nullptr;
  const double timeout = s.spec.comm_timeout;
  return std::make_unique<Watchdog>(s.comm().recorder(), timeout, [&s, timeout](const FlightEntry& e) {
    on_hang(s, "collective #" + std::to_string(e.seq) + " " + coll_op_name(e.op) + " (" + e.label + ", numel in " +
                   std::to_string(e.in_numel) + ", out " + std::to_string(e.out_numel) + ") ran for " +
                   fmt(wall_seconds() - e.t_scheduled, 3) + " s, past --comm-timeout " + fmt(timeout) + " s");
  });
}

// ---------------------------------------------------------------- train, gather, write

// Rank 0's step log: DeepSpeed's step line, zrepro's with loss and throughput,
// the memory line when asked, metrics.jsonl, the progress line.
// [Note: wall_clock_breakdown] With "wall_clock_breakdown": true rank 0 prints DeepSpeed's
// global timer line at each print boundary, summed since the last one (DeepSpeed resets
// its timers when it logs them): "[Rank 0] time (ms) | fwd: .. | bwd: .. | bwd_inner: .. |
// bwd_allreduce: .. | step: ..". zrepro's figures: fwd and bwd are the micro-steps' forward
// and backward, bwd_allreduce the part of bwd blocked in collectives (the step's
// comm_wait, at most bwd), bwd_inner the rest, step the optimizer step (with offload: the
// host Adam and the copies). `zrepro diagnose` reads the same line from DeepSpeed's logs.
struct WallClock {
  double fwd = 0, bwd = 0, allreduce = 0, step = 0;
  void add(const StepRecord& r) {
    fwd += r.forward_s, bwd += r.backward_s, allreduce += std::min(r.comm_wait_s, r.backward_s), step += r.optimizer_s;
  }
  std::string line_and_reset() {
    auto ms = [](double s) { char b[32]; std::snprintf(b, sizeof b, "%.2f", 1000 * s); return std::string(b); };
    const std::string l = "[Rank 0] time (ms) | fwd: " + ms(fwd) + " | bwd: " + ms(bwd) + " | bwd_inner: " +
                          ms(bwd - allreduce) + " | bwd_allreduce: " + ms(allreduce) + " | step: " + ms(step);
    *this = WallClock{};
    return l;
  }
};

StepCallback step_logger(RunState& s, int64_t every) {
  auto clock = std::make_shared<WallClock>();
  return [&s, every, clock](const StepRecord& r, const std::string& scale_log) {
    if (!s.speaks()) return;
    clock->add(r);
    if (s.metrics) s.metrics->append(step_json(r));
    if (!scale_log.empty()) {
      s.progress.clear();
      std::cout << scale_log << "\n";
    }
    const int64_t steps = s.topt.steps;
    if ((r.step + 1) % every == 0 || r.step + 1 == steps) {
      s.progress.clear();
      const double sps = r.step_s > 0 ? s.cfg.train_batch_size / r.step_s : 0;
      std::cout << "[deepspeed] step=" << r.step + 1 << ", skipped=" << s.result.skipped_steps << ", lr=["
                << fmt(r.lr) << "], mom=[(" << s.cfg.optimizer.beta1 << ", " << s.cfg.optimizer.beta2 << ")]\n"
                << "[zrepro] step=" << r.step + 1 << "/" << steps << " loss=" << fmt(r.loss, 6)
                << " grad_norm=" << fmt(r.grad_norm) << " loss_scale=" << fmt(r.loss_scale, 8)
                << " samples/sec=" << fmt(sps, 6) << " tokens/sec=" << fmt(sps * s.model.seq, 6)
                << " comm_wait=" << fmt(r.comm_wait_s, 3) << "s\n";
      if (s.cfg.memory_breakdown) std::cout << "[deepspeed] " << memory_line(r.memory) << "\n";
      if (s.cfg.wall_clock_breakdown) std::cout << clock->line_and_reset() << "\n";
    }
    std::cout << std::flush;
    s.progress.update(r, steps);
  };
}

// Every rank reports to rank 0 (a collective, so a rank still stuck elsewhere makes
// this one time out too, and the watchdog diagnoses it).
std::vector<RankReport> gather_reports(RunState& s) {
  torch::Tensor mine =
      torch::tensor(rank_report(s.rank, s.result, device_memory_snapshot(s.dev.device)).pack(), torch::kDouble);
  torch::Tensor all = torch::empty({s.world * RankReport::kPacked}, torch::kDouble);
  s.comm().all_gather(all, mine, "gather rank reports")->wait();
  std::vector<RankReport> reports;
  for (int k = 0; k < s.world; ++k)
    reports.push_back(RankReport::unpack(all.data_ptr<double>() + k * RankReport::kPacked));
  return reports;
}

// Each rank leaves its trace in OUT/trace/ before the report gather, so rank 0 can
// merge them once the gather says every rank got there.
void write_rank_trace(RunState& s, const json& events) {
  const std::string dir = s.spec.out_dir + "/trace";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  write_file_atomic(dir + "/rank" + std::to_string(s.rank) + ".json", events.dump());
}

void merge_rank_traces(RunState& s) {
  std::vector<json> per_rank;
  for (int k = 0; k < s.world; ++k) {
    const std::string f = s.spec.out_dir + "/trace/rank" + std::to_string(k) + ".json";
    std::ifstream in(f);
    per_rank.push_back(in ? json::parse(in) : json::array());
    std::filesystem::remove(f);
  }
  std::filesystem::remove(s.spec.out_dir + "/trace");
  write_file_atomic(s.spec.out_dir + "/trace.json", merge_traces(per_rank).dump());
}

// Every virtual rank's report, from its own result and ledger.
std::vector<RankReport> virtual_rank_reports(RunState& s, const VirtualRanks::Outcome& o) {
  std::vector<RankReport> reports;
  for (int k = 0; k < s.world; ++k)
    reports.push_back(rank_report(k, o.results[k],
                                  k == s.vranks->subject() ? device_memory_snapshot(s.dev.device)
                                                           : DeviceMemory::instance().snapshot(k)));
  return reports;
}

// The run's last line: steps, first and last loss, skipped steps, where the summary is.
void print_done(RunState& s, const std::string& what) {
  s.progress.clear();
  if (s.result.steps.empty()) return;
  std::cout << "[zrepro] done: " << s.result.steps.size() << " steps, loss " << fmt(s.result.steps.front().loss)
            << " -> " << fmt(s.result.steps.back().loss) << ", skipped " << s.result.skipped_steps << what
            << (s.spec.out_dir.empty() ? "" : ", summary " + s.spec.out_dir + "/summary.json") << "\n";
}

// --world-size: the ranks train on this process's threads; the failure of any one ends
// the run as that rank's (its ledger, its steps), with every rank's view in the summary.
int train_virtual_and_report(RunState& s, const StepCallback& on_step) {
  const bool out = !s.spec.out_dir.empty();
  VirtualRanks::Outcome o = s.vranks->train_all(s.cfg, s.model, s.topt, on_step);
  s.virtual_reports = virtual_rank_reports(s, o);
  if (o.error) {
    s.rank = o.failed_rank;
    s.result = std::move(o.results[o.failed_rank]);
    s.owner.reset();
    s.owner.emplace(o.failed_rank);
    try {
      std::rethrow_exception(o.error);
    } catch (const CommError& e) {
      return s.fail_with(FailureKind::hang, "collective",
                         "[zrepro] virtual rank " + std::to_string(s.rank) + ": " + e.what(), e.what(),
                         "the virtual ranks issued different collectives or one stopped answering; run real "
                         "processes (--ranks) for a hang diagnosis");
    }
  }
  s.result = std::move(o.results[s.rank]);
  if (s.metrics) s.metrics->close();
  print_done(s, " (virtual ranks: " + std::to_string(s.world) + ")");
  if (out) write_file_atomic(s.spec.out_dir + "/trace.json", one_rank_trace(s.rank, s.trace_events()).dump());
  s.write_summary_or_throw("ok", nullptr, s.virtual_reports);  // an I/O failure ends the run as one
  return kExitOk;
}

int train_and_report(RunState& s) {
  const bool out = !s.spec.out_dir.empty();
  if (out && s.speaks()) s.metrics = std::make_unique<MetricsWriter>(s.spec.out_dir);
  if (s.spec.export_inputs && s.speaks())
    export_inputs(s.spec.out_dir + "/inputs", s.model,
                  {s.spec.steps, s.cfg.micro_batch, s.cfg.grad_accum, s.world, s.spec.seed});
  const int64_t every = s.cfg.steps_per_print.value_or(s.spec.log_every);
  if (every <= 0) throw ConfigError("--log-every: must be > 0, got " + std::to_string(every));
  s.trace = std::make_unique<TraceRecorder>(s.rank);
  if (out) s.topt.trace = s.trace.get();
  if (s.vranks) return train_virtual_and_report(s, step_logger(s, every));
  const std::unique_ptr<Watchdog> watchdog = arm_watchdog(s);
  std::optional<StopWatcher> stop_watcher;
  if (s.several_processes()) stop_watcher.emplace(s.comm(), s.peers, s.rank);
  try {
    train(s.cfg, s.model, s.topt, s.result, step_logger(s, every));
    if (out) write_rank_trace(s, s.trace_events());
    const std::vector<RankReport> reports = gather_reports(s);
    if (s.metrics) s.metrics->close();
    if (s.rank == 0) print_done(s, "");
    s.progress.clear();
    if (s.rank == 0) {
      const json straggler = straggler_json(reports);
      if (straggler.is_object())
        std::cout << "[zrepro] rank " << straggler["rank"] << " is the straggler: the other ranks waited "
                  << fmt(straggler["others_wait_s"].get<double>()) << " s in collectives on average, it waited "
                  << fmt(straggler["own_wait_s"].get<double>()) << " s\n";
    }
    if (s.rank == 0 && out) merge_rank_traces(s);
    if (s.speaks()) s.write_summary_or_throw("ok", nullptr, reports);  // an I/O failure ends the run as one
    return kExitOk;
  } catch (const CommError& e) {
    on_hang(s, e.what());
  }
}

// ---------------------------------------------------------------- failures

int oom_failure(RunState& s, const c10::OutOfMemoryError& e) {
  s.progress.clear();
  DeviceMemory& mem = DeviceMemory::instance();
  const MemorySnapshot at = s.dev.device.is_cuda() ? device_memory_snapshot(s.dev.device) : mem.at_oom();
  const std::string msg = mem.last_oom().empty() ? e.what_without_backtrace() : mem.last_oom();
  std::cerr << "[zrepro] rank " << s.rank << ": torch.OutOfMemoryError: " << msg << std::endl;
  std::cerr << "[zrepro] rank " << s.rank << ": out of memory in step " << s.result.steps.size() << " ("
            << s.result.steps.size() << " steps completed)" << std::endl;
  json failure = make_failure(FailureKind::oom, s.rank, phase_name(mem.phase()), msg,
                              oom_hint(at, mem.phase(), stage_policy(s.have_cfg ? s.cfg.zero.stage : 0)));
  json breakdown = json::object();
  for (int c = 0; c < kNumMemCategories; ++c) breakdown[mem_category_name(static_cast<MemCategory>(c))] = at.by_category[c];
  failure["by_category"] = breakdown;
  failure["allocated_bytes"] = at.allocated;
  failure["capacity_bytes"] = at.capacity;
  failure["reserved_bytes"] = at.reserved;  // caching emulation: segments; reserved - allocated is stranded
  failure["request_bytes"] = at.request;
  failure["step"] = static_cast<int64_t>(s.result.steps.size());  // the optimizer step that was running
  // Which of the usual fixes the planner predicts would fit (CPU-emulated device).
  if (s.have_cfg && s.have_model && s.dev.device.is_cpu() && s.capacity() > 0) {
    std::vector<FixPrediction> fixes;
    try {
      fixes = predict_fixes(plan_request(s));
    } catch (const std::exception& e) {  // a failure report must not fail: say it and go on
      std::cerr << "[zrepro] could not plan the fixes: " << e.what() << std::endl;
    }
    json fj = json::array();
    for (const auto& f : fixes)
      fj.push_back(f.to_json());
    failure["planned_fixes"] = fj;
    if (!fixes.empty()) {
      failure["hint"] = failure["hint"].get<std::string>() + " " + format_fixes(fixes) + ".";
      if (s.speaks()) std::cerr << "[zrepro] " << format_fixes(fixes) << std::endl;
    }
  }
  return s.fail(FailureKind::oom, failure);
}

// An error caused by a default says so: the offload pin_memory the config never set,
// with the release that made it true (configs/deepspeed_versions.json), and the key to set.
std::string pin_memory_default_note(const DsConfig& cfg) {
  for (const auto& e : cfg.entries)
    if (e.source == Source::default_ && e.value == true && e.path.find("offload_") != std::string::npos &&
        e.path.size() > 11 && e.path.compare(e.path.size() - 11, 11, ".pin_memory") == 0)
      return "; " + e.path + " is true because the config does not set it (DeepSpeed " + cfg.deepspeed_version +
             "'s default, " + e.note + "): set it false in the config to keep pageable buffers";
  return "";
}

int pinned_failure(RunState& s, const PinnedMemoryError& e) {
  s.progress.clear();
  const std::string note = s.have_cfg ? pin_memory_default_note(s.cfg) : "";
  std::cerr << "[zrepro] rank " << s.rank << ": " << e.what() << note << std::endl;
  json failure = make_failure(FailureKind::pinned_memory, s.rank, "init", e.what() + note,
                              "raise the memlock limit (ulimit -l), or set pin_memory false for offload "
                              "(pageable buffers: synchronous, slower copies)");
  failure["needed_bytes"] = e.needed;
  failure["memlock_limit_bytes"] = e.info.limit_bytes < 0 ? json(nullptr) : json(e.info.limit_bytes);
  failure["locked_bytes"] = e.info.locked_bytes;
  failure["cap_ipc_lock"] = e.info.cap_ipc_lock;
  return s.fail(FailureKind::pinned_memory, failure);
}

// A run stopped by a signal: at an agreed step boundary, or (several processes, a peer
// gone) wherever this rank was, with the peers that vanished and its last collective.
int interrupted_failure(RunState& s, const Interrupted& e) {
  // A peer found gone before any signal came ends the run as mpirun's SIGTERM would, but
  // says no signal was received.
  const int received = stop_signal_received();
  json extra = {{"signal", received ? json(signal_name(received)) : json(nullptr)},
                {"steps_done", static_cast<int64_t>(s.result.steps.size())}};
  std::string hint = "stopped by a signal at a step boundary; summary.json holds the steps done";
  const bool several = s.several_processes();  // every survivor says what it saw
  if (several) {
    const std::vector<Peer> gone = vanished_peers(s.peers, s.rank);
    json g = json::array();
    for (const auto& p : gone) g.push_back({{"rank", p.rank}, {"pid", p.pid}, {"host", p.host}});
    extra["peers_gone"] = g;
    const std::vector<FlightEntry> flight = s.comm().recorder().snapshot();
    extra["last_collective"] = flight.empty() ? json(nullptr) : json(describe_flight_entry(flight.back()));
    if (!gone.empty())
      hint = describe_peers(gone) + " vanished first: killed, taken by the kernel's OOM killer (dmesg | grep -i "
             "oom), or crashed (its own output above mpirun's); this rank's view is in summary_rank" +
             std::to_string(s.rank) + ".json";
  }
  const std::string line = several      ? "[zrepro] rank " + std::to_string(s.rank) + " interrupted: " + e.what()
                           : s.speaks() ? "[zrepro] interrupted: " + std::string(e.what())
                                        : "";
  return s.fail_with(FailureKind::interrupted, "step", line, e.what(), hint, extra, 128 + e.signal);
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

// A host allocation failed (the model or a buffer is larger than this machine's memory).
int host_oom_failure(RunState& s, const std::string& what) {
  return s.fail_with(FailureKind::oom, "host", "[zrepro] rank " + std::to_string(s.rank) + ": a host allocation failed",
                     "a host memory allocation failed (" + what + ")",
                     "the model or a buffer is larger than this machine's memory: check --model, --vocab, --hidden "
                     "and the micro-batch");
}

}  // namespace

int run_command(int argc, char** argv) {
  RunState s;
  try {
    parse_run_spec(argc, argv, s.spec);
    if (s.spec.help) {
      std::cout << s.spec.help_text << std::endl;
      return kExitOk;
    }
    if (s.spec.ranks) {
      if (launched_by_mpi()) throw ConfigError("--ranks: already running under an MPI launcher; drop --ranks");
      precheck_before_launch(s.spec, *s.spec.ranks);
      relaunch_under_mpirun(*s.spec.ranks, {"run"}, argc, argv);
    }
    install_stop_signals();
    set_up(s, &argc, &argv);
    s.topt.stop_signal = [&s] { return stop_signal_at_boundary(s); };
    print_header(s);
    return train_and_report(s);
  } catch (const ConfigError& e) {
    if (!s.ranks) make_out_dir_quietly(s);
    return s.fail_with(FailureKind::config_error, "init", s.speaks() ? "[zrepro] error: " + std::string(e.what()) : "",
                       e.what(), "fix the flag, key or file named above");
  } catch (const c10::OutOfMemoryError& e) {
    return oom_failure(s, e);
  } catch (const PinnedMemoryError& e) {
    return pinned_failure(s, e);
  } catch (const NumericalError& e) {
    const bool fp16 = s.have_cfg && s.cfg.precision == Precision::fp16;
    return s.fail_with(FailureKind::numerical, "step", s.speaks() ? "[deepspeed] " + std::string(e.what()) : "",
                       e.what(),
                       fp16 ? "fp16 overflowed until the loss scale hit min_loss_scale (or the loss went non-finite): "
                              "use bf16, lower the lr, or keep gradient clipping on"
                            : "the loss went non-finite (parameters or activations diverged): lower the lr, keep "
                              "gradient clipping on, check the data");
  } catch (const Interrupted& e) {
    return interrupted_failure(s, e);
  } catch (const IoError& e) {
    return s.fail_with(FailureKind::io, "output", "[zrepro] rank " + std::to_string(s.rank) + ": " + e.what(), e.what(),
                       "free space in --out (or raise its quota / file size limit) and run again; no output holds a "
                       "partial file under its final name");
  } catch (const HostShortfall& e) {
    return s.fail_with(FailureKind::oom, "host", "[zrepro] rank " + std::to_string(s.rank) + ": " + e.what(), e.what(),
                       "the CPU-emulated device holds its bytes in host memory: emulate the target's capacity "
                       "(--device-memory SIZE: the run then stops where the device would), scale the job down "
                       "(--target-model with a toy), or use fewer ranks on this host");
  } catch (const std::bad_alloc&) {
    return host_oom_failure(s, "std::bad_alloc");
  } catch (const std::exception& e) {
    // LibTorch's CPU allocator reports a failed allocation as a c10::Error.
    if (std::string(e.what()).find("DefaultCPUAllocator: can't allocate memory") != std::string::npos)
      return host_oom_failure(s, first_line(e.what()));
    return s.fail_with(FailureKind::internal, "unknown",
                       "[zrepro] internal error on rank " + std::to_string(s.rank) + ": " + e.what(), e.what(),
                       "report this as a zrepro bug");
  }
}

}  // namespace zrepro
