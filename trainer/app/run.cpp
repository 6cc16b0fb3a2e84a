// `zrepro run`: train under a DeepSpeed config on 1..N ranks and record what
// happens. Under mpirun (or with --ranks N, which starts mpirun) every rank runs
// this; rank 0 alone prints for humans and writes summary.json, gathering the
// other ranks' reports. A watchdog turns a stuck collective into a diagnosed hang
// (exit 4 on every rank); every other failure becomes a summary and its exit code
// (the failure table in trainer/report/report.h).
//
// The command is a sequence of steps on one RunState (run_state.h): parse the flags
// into a RunSpec (run_spec.h), set up (run_setup.cpp), print the header, train, gather
// the ranks' reports, write the outputs (here). Failures unwind to run_command, which
// maps each to its table row (run_failures.cpp).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "device/base/errors.h"
#include "device/cuda_memory.h"
#include "offload/host_memory.h"
#include "trainer/app/cli.h"
#include "trainer/app/env.h"
#include "trainer/app/run_state.h"
#include "trainer/diagnose/wall_clock.h"
#include "trainer/report/inputs_export.h"
#include "trainer/runtime/out_dir.h"
#include "zero/comm/mpi_communicator.h"
#include "zero/schedule/stage_policy.h"

namespace zrepro {

using json = nlohmann::json;

// trace.json from one rank's events, under that rank's process (pid) in the viewer.
json one_rank_trace(int rank, const json& events) {
  std::vector<json> per_rank(static_cast<size_t>(rank) + 1, json::array());
  per_rank[rank] = events;
  return merge_traces(per_rank);
}

// ---------------------------------------------------------------- the run's outputs

void RunState::write_summary(const std::string& status, json failure, std::vector<RankReport> reports, bool all_ranks) {
  if (spec.out_dir.empty() || (all_ranks && !speaks())) return;
  try {
    write_summary_or_throw(status, std::move(failure), std::move(reports), !all_ranks && several_processes());
  } catch (const std::exception& e) {
    std::cerr << "[zrepro] rank " << rank << ": could not write the summary in " << spec.out_dir << ": " << e.what()
              << std::endl;
  }
}

void RunState::write_summary_or_throw(const std::string& status, json failure, std::vector<RankReport> reports,
                                    bool own_view_of_many) {
  if (reports.empty()) reports = virtual_reports;
  if (reports.empty()) reports.push_back(rank_report(rank, result, device_memory_snapshot(dev.device)));
  SummaryInput in;
  in.status = status;
  in.config = have_cfg ? &job.cfg : nullptr;
  in.model = have_model ? &job.model : nullptr;
  in.device = dev.description;
  in.result = have_cfg ? &result : nullptr;
  in.ranks = std::move(reports);
  in.failure = std::move(failure);
  in.host_link_gbps = job.host_link_gbps;
  in.pageable_ratio = job.pageable_ratio;
  in.planned = planned ? &*planned : nullptr;
  in.scale_down = scaled.get();
  in.train = &topt;
  in.modelled_busbw_gbps = spec.interconnect_gbps;
  in.env = environment().to_json();
  in.virtual_ranks = virtual_json();
  in.config_mismatch = config_mismatch;
  std::vector<double> step_s;
  for (const StepRecord& r : result.steps) step_s.push_back(r.step_s);
  in.calibration = calibration.to_json(step_s);
  in.inputs = inputs;
  if (status != "ok") in.unfinished = DeviceMemory::instance().take_windows();
  Summary summary = build_summary(in);
  if (summary.comm && (vranks || (ranks && ranks->comm)) && comm().compares_labels()) {
    // [Note: collectives that paired different parameters] (zero/comm/communicator.h)
    const Communicator::LabelMismatches lm = comm().label_mismatches();
    summary.comm->paired_different_parameters = {
        {"count", lm.count}, {"first", lm.first.empty() ? json(nullptr) : json(lm.first)}};
  }
  if (own_view_of_many) return publish_rank_view(spec.out_dir, rank, world, summary);
  write_summary_and_report(spec.out_dir, summary);
  if (out_claimed) seal_out_dir(spec.out_dir);  // [Note: only zrepro's files move]
}

// --peers stand-in: the model's self-checks ([Note: the stand-in checks itself]).
static json stand_in_json(const std::optional<StandInChecks>& c) {
  if (!c) return nullptr;
  return {{"exact", c->exact()},
          {"values_modelled", c->values_modelled},
          {"gathers_checked", c->gathers},
          {"gathers_equal", c->gathers_equal},
          {"norms_checked", c->norms},
          {"norms_equal", c->norms_equal},
          {"first_difference", c->first_difference.empty() ? json(nullptr) : json(c->first_difference)}};
}

json RunState::virtual_json() const {
  if (!vranks) return nullptr;
  json v = {{"world_size", world},
            {"as_rank", vranks->subject()},
            {"data_rule", spec.train.same_data ? "same" : "distinct"},
            {"peers", vranks->stand_in() ? "stand-in" : "run"}};
  if (!vranks->stand_in()) {
    v["peer_host_bytes_peak"] = HostMemory::instance().peak_peer_bytes();
    v["note"] = "one process stood in for every rank: each rank's memory and numerics are exact; step times are not "
                "(the ranks shared this process's cores)";
    return v;
  }
  v["peer_values"] = spec.peer_values == PeerValuesMode::model ? "model" : "initial";
  v["stand_in"] = stand_in_json(result.stand_in);
  v["note"] = "one rank ran; its peers were stood in for. Exact: this rank's memory by category and its collectives' "
              "sizes (from the layout, whatever the values). Exact under the same-data rule when stand_in.exact: "
              "losses and gradient norms (what the peers send comes from the model of their partitions, which "
              "matched this rank's own at every check). Not reproduced: step times (one rank's compute, no "
              "interconnect), anything that makes ranks differ (injections are refused)";
  return v;
}

json RunState::trace_events() {
  if (!trace_complete) {
    trace->add_collectives(comm().recorder().snapshot());
    trace->add_copies(result.copy_log);
    trace_complete = true;
  }
  return trace->events();
}

void RunState::write_trace_so_far() {
  if (!trace || spec.out_dir.empty() || !speaks()) return;
  try {
    write_file_atomic(spec.out_dir + "/trace.json", one_rank_trace(rank, trace_events()).dump());
  } catch (const std::exception& e) {
    std::cerr << "[zrepro] could not write trace.json: " << e.what() << std::endl;
  }
}

int RunState::fail_with(FailureKind kind, const std::string& phase, const std::string& line,
                      const std::string& message, const std::string& hint, const json& extra, int exit_code) {
  progress.clear();  // before the line (fail() clears it too, for its other callers)
  if (!line.empty()) std::cerr << line << std::endl;
  json failure = make_failure(kind, rank, phase, message, hint);
  failure.update(extra);
  return fail(kind, std::move(failure), exit_code);
}

int RunState::fail(FailureKind kind, json failure, int exit_code) {
  progress.clear();
  const FailureRow& row = failure_row(kind);
  const int code = exit_code >= 0 ? exit_code : row.exit_code;
  try {
    if (metrics) metrics->close();  // the completed steps' records, whole lines
  } catch (const std::exception& e) {
    std::cerr << "[zrepro] could not close metrics.jsonl: " << e.what() << std::endl;
  }
  try {
    DeviceMemory::instance().close_log();
  } catch (const std::exception& e) {
    std::cerr << "[zrepro] " << e.what() << std::endl;
  }
  write_trace_so_far();  // first: report.html draws its lanes from it
  write_summary(row.status, std::move(failure), {}, false);
  // With peers, never finalize MPI on a failure (peers may be inside a collective
  // and MPI_Finalize would wait for them): exit now, and mpirun ends the others.
  if (ranks && ranks->comm->world_size() > 1) {
    std::fflush(nullptr);
    std::_Exit(code);
  }
  return code;
}

// ---------------------------------------------------------------- train, gather, write

namespace {

// The step boundary's stop check (TrainOptions::stop_signal, trainer/runtime/liveness.h).
int stop_signal_at_boundary(RunState& s) {
  return stop_at_boundary(s.several_processes() ? &s.comm() : nullptr, s.peers, s.rank);
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

// [Note: step time against the machine] (trainer/loop/calibration.h): every process
// samples the kernel after its steps (each real rank its own, so none waits for
// another's; with virtual ranks only the reporting rank gets this callback).
StepCallback calibrated(RunState& s, StepCallback log) {
  return [&s, log = std::move(log)](const StepRecord& r, const std::string& scale_log) {
    s.calibration.after_step(r.step, r.step_s);
    log(r, scale_log);
  };
}

// Rank 0's step log: DeepSpeed's step line, zrepro's with loss and throughput, the
// memory line when asked, DeepSpeed's timer line ([Note: wall_clock_breakdown],
// trainer/diagnose/wall_clock.h), ZeRO-3's allocator-flush warning after every step that
// flushed, metrics.jsonl, the progress line.
StepCallback step_logger(RunState& s, int64_t every) {
  auto clock = std::make_shared<WallClock>();
  auto flushes_seen = std::make_shared<int64_t>(0);
  return [&s, every, clock, flushes_seen](const StepRecord& r, const std::string& scale_log) {
    if (!s.speaks()) return;
    clock->add(r.forward_s, r.backward_s, r.comm_wait_s, r.optimizer_s);
    if (s.metrics) s.metrics->append(step_json(r));
    if (!scale_log.empty()) {
      s.progress.clear();
      std::cout << scale_log << "\n";
    }
    // DeepSpeed's stage-3 optimizer (the one that shards parameters) prints the flushes.
    if (stage_policy(s.job.cfg.zero.stage).shard_params() && r.memory.alloc_retries > *flushes_seen) {
      s.progress.clear();
      std::cout << "[deepspeed] " << allocator_flush_line(r.memory.alloc_retries - *flushes_seen) << "\n";
      *flushes_seen = r.memory.alloc_retries;
    }
    const int64_t steps = s.topt.steps;
    if ((r.step + 1) % every == 0 || r.step + 1 == steps) {
      s.progress.clear();
      const double sps = r.step_s > 0 ? s.job.cfg.train_batch_size / r.step_s : 0;
      std::cout << "[deepspeed] step=" << r.step + 1 << ", skipped=" << s.result.skipped_steps << ", lr=["
                << fmt(r.lr) << "], mom=[(" << s.job.cfg.optimizer.beta1 << ", " << s.job.cfg.optimizer.beta2 << ")]\n"
                << "[zrepro] step=" << r.step + 1 << "/" << steps << " loss=" << fmt(r.loss, 6)
                << " grad_norm=" << fmt(r.grad_norm) << " loss_scale=" << fmt(r.loss_scale, 8)
                << " samples/sec=" << fmt(sps, 6) << " tokens/sec=" << fmt(sps * s.job.model.seq, 6)
                << " comm_wait=" << fmt(r.comm_wait_s, 3) << "s\n";
      if (s.job.cfg.memory_breakdown) std::cout << "[deepspeed] " << memory_line(r.memory) << "\n";
      if (s.job.cfg.wall_clock_breakdown) std::cout << clock->line_and_reset() << "\n";
    }
    std::cout << std::flush;
    s.progress.update(r, steps, s.speaks());
  };
}

// Every rank reports to rank 0 (a collective, so a rank still stuck elsewhere makes
// this one time out too, and the watchdog diagnoses it).
std::vector<RankReport> gather_reports(RunState& s) {
  torch::Tensor mine =
      torch::tensor(rank_report(s.rank, s.result, device_memory_snapshot(s.dev.device)).pack(), torch::kDouble);
  torch::Tensor all = torch::empty({s.world * RankReport::kPacked}, torch::kDouble);
  s.comm().all_gather_wait(all, mine, "gather rank reports");
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
  for (int k : s.vranks->running())
    reports.push_back(rank_report(k, o.results[k],
                                  k == s.vranks->subject() ? device_memory_snapshot(s.dev.device)
                                                           : DeviceMemory::instance().snapshot(k)));
  return reports;
}

// The run's last lines: steps, first and last loss, skipped steps, where the summary is;
// the device peak (when, and what filled it) and the pages that show it over time.
void print_done(RunState& s, const std::string& what) {
  s.progress.clear();
  if (s.result.steps.empty()) return;
  std::cout << "[zrepro] done: " << s.result.steps.size() << " steps, loss " << fmt(s.result.steps.front().loss)
            << " -> " << fmt(s.result.steps.back().loss) << ", skipped " << s.result.skipped_steps << what
            << (s.spec.out_dir.empty() ? "" : ", summary " + s.spec.out_dir + "/summary.json") << "\n";
  const MemorySnapshot m = device_memory_snapshot(s.dev.device);
  int64_t peak_step = 0;  // the first step whose end saw the run's peak
  for (const StepRecord& r : s.result.steps)
    if (r.memory.peak == m.peak) {
      peak_step = r.step + 1;
      break;
    }
  if (const Communicator::LabelMismatches lm = s.comm().label_mismatches(); lm.count > 0)
    std::cout << "[zrepro] warning: " << lm.count << " collective(s) paired different parameters across ranks (first: "
              << lm.first << "): their sizes matched, so neither zrepro's check nor NCCL / gloo stopped them, and each "
              << "rank assembled a mix of other ranks' shards (MoE experts fetched one by one: see the "
              << "moe-divergent-gathers scenario)\n";
  std::cout << "[zrepro] rank " << s.rank << " device " << peak_summary(m, peak_step);
  if (s.scaled) std::cout << "; at target scale the plan's peak is " << format_bytes(s.scaled->target_plan.peak_bytes);
  std::cout << "\n";
  if (!s.spec.out_dir.empty())
    std::cout << "[zrepro] pages: " << s.spec.out_dir << "/report.html (memory, loss and collectives per rank), "
              << s.spec.out_dir << "/trace.json (open in ui.perfetto.dev)\n";
}

// [Note: the stand-in checks itself] in words: whether the losses rest on exact peers.
void print_stand_in_check(const StandInChecks& c) {
  if (c.exact())
    std::cout << "[zrepro] stand-in check: the peers' model matched this rank's own partition at all " << c.gathers
              << " gathers and its gradient-norm share at all " << c.norms
              << " checks: losses are the N-rank job's under the same-data rule\n";
  else
    std::cout << "[zrepro] stand-in check: the peers' model differs from this rank's own state (" << c.first_difference
              << "; " << c.gathers_equal << "/" << c.gathers << " gathers, " << c.norms_equal << "/" << c.norms
              << " norms equal): memory and collective sizes are exact, losses approximate; --peers run (up to "
              << kMaxVirtualRanks << " ranks) gives exact ones\n";
}

// --world-size: the ranks train on this process's threads; the failure of any one ends
// the run as that rank's (its ledger, its steps), with every rank's view in the summary.
void consolidate_fp32(RunState& s);

int train_virtual_and_report(RunState& s, const StepCallback& on_step) {
  const bool out = !s.spec.out_dir.empty();
  VirtualRanks::Outcome o = s.vranks->train_all(s.job, s.topt, on_step);
  s.virtual_reports = virtual_rank_reports(s, o);
  if (o.error) {
    s.rank = o.failed_rank;
    s.result = std::move(o.results[o.failed_rank]);
    s.owner.reset();
    if (!s.vranks->stand_in()) s.owner.emplace(o.failed_rank);
    try {
      std::rethrow_exception(o.error);
    } catch (const CommError& e) {
      std::string message = e.what();
      const std::string hint = hang_hint(s, message,
                                         "the virtual ranks issued different collectives or one stopped answering; "
                                         "run real processes (--ranks) for a hang diagnosis");
      return s.fail_with(FailureKind::hang, "collective", "[zrepro] virtual rank " + std::to_string(s.rank) + ": " + message,
                         message, hint);
    }
  }
  s.result = std::move(o.results[s.rank]);
  consolidate_fp32(s);
  if (s.metrics) s.metrics->close();
  DeviceMemory::instance().close_log();  // a cut --memory-log ends the run as an I/O failure
  print_done(s, " (virtual ranks: " + std::to_string(s.world) + ")");
  if (s.result.stand_in) print_stand_in_check(*s.result.stand_in);
  if (out) write_file_atomic(s.spec.out_dir + "/trace.json", one_rank_trace(s.rank, s.trace_events()).dump());
  s.write_summary_or_throw("ok", nullptr, s.virtual_reports);  // an I/O failure ends the run as one
  return kExitOk;
}

// --zero-to-fp32: rank 0 consolidates the newest checkpoint after every collective of the
// run (a host OOM there ends only rank 0, as the offline script would).
void consolidate_fp32(RunState& s) {
  const RunSpec& sp = s.spec;
  if (sp.zero_to_fp32_dir.empty() || s.rank != 0) return;
  std::cout << "[zrepro] zero_to_fp32 (" << (sp.zero_to_fp32_api ? "get_fp32_state_dict_from_zero_checkpoint" :
                                              "zero_to_fp32.py --max_shard_size " + format_bytes(s.zero_to_fp32_shard))
            << ") of " << sp.train.save_dir << " into " << sp.zero_to_fp32_dir
            << (s.topt.host_memory > 0 ? ", host memory " + format_bytes(s.topt.host_memory) + " (emulated)" : std::string())
            << std::endl;
  s.result.fp32_export = zero_to_fp32(sp.train.save_dir, sp.zero_to_fp32_dir, sp.zero_to_fp32_api, s.zero_to_fp32_shard,
                                      s.topt.host_memory);
  const Fp32Export& e = *s.result.fp32_export;
  std::cout << "[zrepro] zero_to_fp32: " << e.parameters << " params " << e.numel << " elements in "
            << e.files.size() << " file(s); anonymous host memory at its peak " << format_bytes(e.peak_anon_bytes)
            << ", fp32 partitions mapped " << format_bytes(e.mapped_bytes) << std::endl;
}

int train_and_report(RunState& s) {
  const bool out = !s.spec.out_dir.empty();
  if (out && s.speaks()) s.metrics = std::make_unique<MetricsWriter>(s.spec.out_dir);
  if (s.spec.export_inputs && s.speaks())
    export_inputs(s.spec.out_dir + "/inputs", s.job.model,
                  {s.spec.train.steps, s.job.cfg.micro_batch, s.job.cfg.grad_accum, s.world, s.spec.train.seed,
                   s.topt.seq_len_dist, loss_normalization_row(s.topt.loss_normalization).name});
  s.progress.start(s.topt.steps, s.speaks());
  const int64_t every = s.job.cfg.steps_per_print.value_or(s.spec.log_every);
  if (every <= 0) throw ConfigError("--log-every: must be > 0, got " + std::to_string(every));
  s.trace = std::make_unique<TraceRecorder>(s.rank);
  if (out) s.topt.trace = s.trace.get();
  if (s.vranks) return train_virtual_and_report(s, calibrated(s, step_logger(s, every)));
  const std::unique_ptr<Watchdog> watchdog = arm_watchdog(s);
  std::optional<StopWatcher> stop_watcher;
  // [Note: a caller stuck in a transfer]: the watcher writes this rank's view itself only
  // when the training thread is held in a transfer for good.
  if (s.several_processes())
    stop_watcher.emplace(s.comm(), s.peers, s.rank, [&s](const Interrupted& e) { return interrupted_failure(s, e); });
  try {
    train(s.job, s.topt, s.result, calibrated(s, step_logger(s, every)), s.spec.export_inputs);
    if (s.spec.export_inputs && s.speaks()) export_final_params(s.spec.out_dir, s.result.final_params);
    if (out) write_rank_trace(s, s.trace_events());
    const std::vector<RankReport> reports = gather_reports(s);
    consolidate_fp32(s);
    if (s.metrics) s.metrics->close();
    if (s.rank == 0) print_done(s, "");
    s.progress.clear();
    if (s.rank == 0) {
      if (const auto straggler = straggler_of(reports))
        std::cout << "[zrepro] rank " << straggler->rank << " is the straggler: the other ranks waited "
                  << fmt(straggler->others_wait_s) << " s in collectives on average, it waited "
                  << fmt(straggler->own_wait_s) << " s\n";
    }
    if (s.rank == 0 && out) merge_rank_traces(s);
    DeviceMemory::instance().close_log();  // a cut --memory-log ends the run as an I/O failure
    if (s.speaks()) s.write_summary_or_throw("ok", nullptr, reports);  // an I/O failure ends the run as one
    return kExitOk;
  } catch (const CommError& e) {
    on_hang(s, e.what());
  }
}

// The run from its flags to its exit code (--ranks: relaunched under mpirun first).
int run_from_flags(RunState& s, int argc, char** argv) {
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
  s.inputs = run_inputs(s.spec, argc, argv);
  set_up(s, &argc, &argv);
  if (s.several_processes()) add_ranks_input(s.inputs, s.world);
  s.topt.stop_signal = [&s] { return stop_signal_at_boundary(s); };
  s.topt.signal_seen = stop_signal_received;
  print_header(s);
  return train_and_report(s);
}

}  // namespace

int run_command(int argc, char** argv) {
  RunState s;
  try {
    return run_from_flags(s, argc, argv);
  } catch (const ConfigError& e) {
    if (!s.ranks) make_out_dir_quietly(s);
    // Every process says its own refusal (a damaged file of one rank is refused by that rank
    // alone; rank 0 sees only that its peer vanished).
    const std::string line = s.speaks()               ? "[zrepro] error: " + std::string(e.what())
                             : s.several_processes() ? "[zrepro] rank " + std::to_string(s.rank) + ": error: " + e.what()
                                                     : "";
    return s.fail_with(FailureKind::config_error, "init", line, e.what(), "fix the flag, key or file named above");
  } catch (const c10::OutOfMemoryError& e) {
    return oom_failure(s, e);
  } catch (const PinnedMemoryError& e) {
    return pinned_failure(s, e);
  } catch (const NumericalError& e) {
    const bool fp16 = s.have_cfg && s.job.cfg.precision == Precision::fp16;
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
  } catch (const HostMemoryExhausted& e) {
    // Each place the host runs out has its own cause and fix: the 16-bit gather at a save,
    // or the offline consolidation of a checkpoint that was written whole.
    const bool at_save = e.phase == "save";
    const std::string what = e.what() + s.at_target("--host-memory");
    return s.fail_with(FailureKind::host_oom, e.phase, "[zrepro] rank " + std::to_string(s.rank) + ": " + what, what,
                       at_save ? "set stage3_gather_16bit_weights_on_model_save false (the ZeRO checkpoint keeps every "
                                 "rank's shard; consolidate it offline with zero_to_fp32.py), or give rank 0 more host "
                                 "memory than the whole 16-bit model (2 bytes per parameter in bf16/fp16); this save "
                                 "wrote no checkpoint: rank 0 was killed in the gather, before it"
                               : "zero_to_fp32.py with a smaller --max_shard_size (one shard merged at a time, DeepSpeed "
                                 ">= 0.16.0) instead of get_fp32_state_dict_from_zero_checkpoint, or a host with more RAM "
                                 "than the fp32 model (4 bytes per parameter); the checkpoint itself is intact",
                       {{"checkpoint", "host-memory"}});
  } catch (const HostShortfall& e) {
    return s.fail_with(FailureKind::host_oom, "host", "[zrepro] rank " + std::to_string(s.rank) + ": " + e.what(), e.what(),
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
