// `zrepro run`'s state and its parts: everything one rank's run holds (RunState), filled
// step by step by set-up (run_setup.cpp), training and the outputs (run.cpp), and the
// failure paths (run_failures.cpp). Private to trainer/app.
#pragma once
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "device/device.h"
#include "device/device_memory.h"
#include "trainer/app/run_spec.h"
#include "trainer/loop/calibration.h"
#include "trainer/loop/trace.h"
#include "trainer/loop/train.h"
#include "trainer/loop/virtual_ranks.h"
#include "trainer/planner/planner.h"
#include "trainer/planner/scale_down.h"
#include "trainer/report/report.h"
#include "trainer/runtime/launch.h"
#include "trainer/runtime/liveness.h"
#include "trainer/runtime/subprocess.h"
#include "zero/comm/watchdog.h"

namespace zrepro {

// One-line progress on a terminal (stderr), overwritten in place; under a zrepro parent
// (kChildProgressEnv, trainer/runtime/subprocess.h) a plain marker line per step instead,
// which the parent's progress line reads ([Note: progress of a child]).
class Progress {
 public:
  explicit Progress(bool enabled)
      : on_(enabled && ::isatty(STDERR_FILENO)), marks_(enabled && std::getenv(kChildProgressEnv) != nullptr) {}
  // Before the first step (set-up done): the parent shows "step 0/M" instead of "starting".
  void start(int64_t total, bool speaks) {
    if (marks_ && speaks) std::fprintf(stderr, "[zrepro] at step=0/%lld\n", static_cast<long long>(total));
  }
  void update(const StepRecord& s, int64_t total, bool speaks) {
    if (marks_ && speaks) std::fprintf(stderr, "[zrepro] at step=%lld/%lld\n", static_cast<long long>(s.step + 1),
                                       static_cast<long long>(total));
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
  bool on_, marks_;
  bool dirty_ = false;
};

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
  // What is trained, built once at set-up ([Note: one job description]): the config, the
  // model, the world, this rank, the capacity, activation checkpointing and the host link.
  JobSpec job;
  bool have_cfg = false, have_model = false;
  std::unique_ptr<ScaleDown> scaled;     // --target-model: the toy derived from the target
  std::optional<MemoryPlan> planned;     // the planner's prediction for this run (CPU-emulated device)
  DeviceInfo dev;
  TrainOptions topt;             // topt.host_memory: the toy's share under scale-down (apply_limits)
  int64_t zero_to_fp32_shard = 0;  // --zero-to-fp32-shard as applied: the toy's under scale-down
  TrainResult result;
  StepCalibration calibration;  // [Note: step time against the machine]
  nlohmann::json inputs;        // summary.json's inputs (run_inputs), set before set-up
  Progress progress{true};
  std::unique_ptr<MetricsWriter> metrics;

  Communicator& comm() { return vranks ? vranks->comm(rank) : *ranks->comm; }
  // This process prints and writes the run's files: rank 0, or the one process of virtual ranks.
  bool speaks() const { return rank == 0 || vranks; }
  // This run is one of several processes (mpirun), not virtual ranks in one.
  bool several_processes() const { return ranks && !vranks && world > 1; }
  // The emulated or fractioned device capacity: the toy's under scale-down, else the flag's.
  int64_t capacity() const { return scaled ? scaled->toy_capacity : spec.device_memory.value_or(0); }
  // A limit's figures at target scale, for a message about the toy's ("; at target scale:
  // ..."), or "" when the run is not scaled or the flag was not given.
  std::string at_target(const std::string& flag) const {
    const TargetLimit* l = scaled ? scaled->limit(flag) : nullptr;
    return l ? "; " + l->at_target() : "";
  }
  std::string flight_dir() const { return (spec.out_dir.empty() ? std::string("zrepro_flight") : spec.out_dir) + "/flight"; }

  // Rank 0 writes the summary from every rank's report. A run that fails writes the
  // failing rank's own view: with one process, summary.json; with several, each failing
  // rank its summary_rank<r>.json, merged into summary.json ([Note: every rank's view]).
  // Never throws: it runs inside the failure handlers, where an exception would end the
  // process in terminate with nothing written; a write that fails is said on stderr.
  void write_summary(const std::string& status, nlohmann::json failure, std::vector<RankReport> reports,
                     bool all_ranks);
  void write_summary_or_throw(const std::string& status, nlohmann::json failure, std::vector<RankReport> reports,
                              bool own_view_of_many = false);
  nlohmann::json virtual_json() const;  // summary.json's virtual_ranks (null for real processes)
  // This rank's trace events, its collectives and copies added once (a run that fails
  // after its trace was written must not add them twice).
  nlohmann::json trace_events();
  // A failed run's trace.json: this rank's spans and collectives up to the failure
  // (the speaking rank's view; never throws).
  void write_trace_so_far();
  // A failure in one call: its line on stderr (empty: none), the failure record
  // (make_failure plus `extra`), then fail().
  int fail_with(FailureKind kind, const std::string& phase, const std::string& line, const std::string& message,
                const std::string& hint, const nlohmann::json& extra = nlohmann::json::object(), int exit_code = -1);
  // The end of a failed run: this rank's summary and the failure's exit code, the row's
  // unless given (SIGTERM's 143 beside SIGINT's 130).
  int fail(FailureKind kind, nlohmann::json failure, int exit_code = -1);
};

// ---- set-up (run_setup.cpp)
// --ranks N: the config, the model and the injections are checked once, before mpirun
// starts N processes that would each refuse them.
void precheck_before_launch(const RunSpec& spec, int world);
// Ranks, --out, virtual ranks, options, config and model, device, host link, interconnect.
void set_up(RunState& s, int* argc, char*** argv);
void print_header(RunState& s);
// A flag error found before set-up still leaves its summary in --out, if it can be made.
void make_out_dir_quietly(RunState& s);
// The job as the planner is asked about it: the planner's figures are the CPU-emulated
// device's (fp16 computes in fp32 there), whichever device trains it.
JobSpec plan_request(const RunState& s);
// [Note: the emulated device lives in host memory] (run_setup.cpp).
struct HostShortfall : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// ---- failures (run_failures.cpp)
// Dumps this rank's flight recorder; rank 0 merges the dumps, diagnoses and writes the
// summary; every rank exits 4. Runs on the watchdog thread (or the thread that saw a
// collective fail) while the training thread may be blocked.
[[noreturn]] void on_hang(RunState& s, const std::string& reason);
// A hang's own hint (`otherwise` where no cause of its own is known); a MoE job whose ranks
// fetched different experts gets its cause added to `message` and the leaf module as its fix.
std::string hang_hint(RunState& s, std::string& message, const std::string& otherwise);
std::unique_ptr<Watchdog> arm_watchdog(RunState& s);
int oom_failure(RunState& s, const c10::OutOfMemoryError& e);
int pinned_failure(RunState& s, const PinnedMemoryError& e);
// A run stopped by a signal: at an agreed step boundary, or (several processes, a peer
// gone) wherever this rank was, with the peers that vanished and its last collective.
int interrupted_failure(RunState& s, const Interrupted& e);
// A host allocation failed (the model or a buffer is larger than this machine's memory).
int host_oom_failure(RunState& s, const std::string& what);
// trace.json from one rank's events, under that rank's process (pid) in the viewer.
nlohmann::json one_rank_trace(int rank, const nlohmann::json& events);

}  // namespace zrepro
