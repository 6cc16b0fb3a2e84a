// `zrepro run`'s failure paths (run_state.h): a hang (flight recorder dumps, rank 0's
// diagnosis, exit 4 on every rank), an OOM with its hint and planned fixes, pinned memory,
// an interruption with the peers that vanished, a host allocation that failed. Each ends
// through RunState::fail and the failure table (trainer/report/report.h).
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "device/base/errors.h"
#include "device/cuda_memory.h"
#include "offload/host_memory.h"
#include "trainer/app/cli.h"
#include "trainer/app/run_state.h"
#include "trainer/config/leaf_modules.h"
#include "trainer/planner/fixes.h"
#include "trainer/report/hang.h"
#include "zero/comm/mpi_communicator.h"

namespace zrepro {

using json = nlohmann::json;

namespace {

bool wait_for(const std::function<bool()>& ready, double seconds) {
  const double until = wall_seconds() + seconds;
  while (!ready()) {
    if (wall_seconds() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

}  // namespace

// A hang's own cause and fix. [Note: which experts a rank fetches] (trainer/config/
// leaf_modules.h): under ZeRO-3 a MoE model whose experts are fetched one by one issues,
// on each rank, the gathers of the experts its tokens picked. Ranks whose routers differ
// issue different collectives; no rank is at fault, and before the sizes differ (the hang)
// the ranks may pair different experts of one size without anything noticing. That is
// said, with the count, and the fix is the leaf module, not "the same micro-steps".
std::string hang_hint(RunState& s, std::string& message, const std::string& otherwise) {
  while (!message.empty() && message.back() == ' ') message.pop_back();  // what is added starts with its own space
  // [Note: a forward on some ranks] (trainer/loop/rank_work.h): the run's own extra forwards.
  const RankWork& w = s.topt.rank_work;
  const bool stage3 = s.have_cfg && stage_policy(s.job.cfg.zero.stage).shard_params();
  if (w.eval_every > 0 && w.eval_rank0_only) {
    message += " Rank 0 evaluated alone" + std::string(stage3 ? ": under ZeRO-3 its forward all-gathers every layer "
                                                                 "and waits for ranks that went on training." : ".");
    return "an evaluation on rank 0 only (the `if rank == 0: evaluate()` pattern): evaluate on every rank, each its "
           "share of the data, as the Trainer's evaluate() does (zrepro run --eval-on-all-ranks), and reduce the "
           "metric; a save or a generate() under `if is_main_process` hangs the same way";
  }
  if (w.generate_tokens > 0 && !w.synced_gpus) {
    message += " A rank left generate() at its own end of sequence while the others generated on" +
               std::string(stage3 ? ": under ZeRO-3 each further token's forward all-gathers and waits for it." : ".");
    return "generate() without synced_gpus: a rank that reaches its end-of-sequence token stops running forwards "
           "while the others still gather in theirs; pass synced_gpus=True (the Trainer does under ZeRO-3 with "
           "predict_with_generate; zrepro run --synced-gpus), or pad every rank to the same number of tokens";
  }
  const bool moe_one_by_one = s.have_model && s.have_cfg && s.job.model.moe() &&
                              stage_policy(s.job.cfg.zero.stage).shard_params() &&
                              expert_fetch(s.job.model, s.job.cfg.zero).one_by_one;
  if (!moe_one_by_one) return otherwise;
  const Communicator::LabelMismatches lm = s.comm().label_mismatches();
  if (lm.count > 0)
    message += " Before it, " + std::to_string(lm.count) + " collective(s) paired different experts' parameters of "
               "one size across ranks (first: " + lm.first + "): nothing stopped them, and each rank assembled a mix.";
  message += " No single rank is at fault: the ranks' routers sent their tokens to different experts.";
  return "MoE experts fetched one by one under ZeRO-3: each rank gathers the experts its own tokens picked, so ranks "
         "whose routers differ issue different all-gathers (and, where sizes agree, silently pair different experts' "
         "shards). Fetch the MoE block as one unit: zero_optimization.leaf_module.classes naming it (DeepSpeed >= "
         "0.18.0's default for Hugging Face's Mixtral and Qwen2-MoE blocks), or deepspeed.utils.set_z3_leaf_modules "
         "before it (zrepro run --z3-leaf-modules CLASS); the moe-divergent-gathers scenario shows both sides";
}

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
                    FlightDump{s.rank, reason, s.comm().recorder().snapshot()}.to_json().dump(1));
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
      if (in) all[k] = FlightDump::from_json(json::parse(in)).entries;
    }
    const HangDiagnosis d = diagnose_hang(all, s.job.cfg.grad_accum);
    // A mismatch caught by the collective signatures ([Note: collective signatures])
    // ends here at once; a collective that simply never completes, at the timeout.
    const bool mismatch = reason.find("ranks disagree") != std::string::npos;
    std::cerr << (mismatch ? "[zrepro] Collective mismatch caught before any data moved (under NCCL the ranks block here until "
                             "\"Watchdog caught collective operation timeout\"): "
                           : "[zrepro] Watchdog caught collective operation timeout: ")
              << reason << "\n"
              << "[zrepro] hang diagnosis: " << d.text << std::endl;
    const HangReport report{reason, timeout, d, s.config_mismatch};
    std::string configs;  // the ranks' differing config keys, if any: the likely cause
    for (const auto& line : s.config_mismatch) configs += (configs.empty() ? "" : "; ") + line;
    if (!configs.empty()) {
      std::cerr << "[zrepro] the ranks ran different configs: " << configs << std::endl;
    }
    if (!out.empty()) {
      try {
        write_file_atomic(out + "/hang_report.json", report.to_json().dump(2));
      } catch (const std::exception& e) {
        std::cerr << "[zrepro] could not write hang_report.json: " << e.what() << std::endl;
      }
    }
    std::string message =
        reason + ". " + d.text + (configs.empty() ? "" : " The ranks ran different configs: " + configs + ".");
    const std::string hint =
        hang_hint(s, message, "ranks issued different collectives (per-rank gradient accumulation, a rank that stops "
                              "early or skips a forward): make every rank run the same micro-steps; see flight/ and "
                              "hang_report.json");
    json failure = make_failure(FailureKind::hang, d.culprits.empty() ? s.rank : d.culprits.front(),
                                "collective #" + std::to_string(d.seq), message, hint);
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

// ---------------------------------------------------------------- failures

int oom_failure(RunState& s, const c10::OutOfMemoryError& e) {
  s.progress.clear();
  DeviceMemory& mem = DeviceMemory::instance();
  const MemorySnapshot at = s.dev.device.is_cuda() ? device_memory_snapshot(s.dev.device) : mem.at_oom();
  // The allocator's message is the toy's; under scale-down the target's plan follows it.
  const std::string msg = (mem.last_oom().empty() ? e.what_without_backtrace() : mem.last_oom()) +
                          (s.scaled ? " [the toy's figures; " + s.scaled->target_verdict() + "]" : "");
  std::cerr << "[zrepro] rank " << s.rank << ": torch.OutOfMemoryError: " << msg << std::endl;
  std::cerr << "[zrepro] rank " << s.rank << ": out of memory in step " << s.result.steps.size() << " ("
            << s.result.steps.size() << " steps completed)" << std::endl;
  json failure = make_failure(FailureKind::oom, s.rank, phase_name(mem.phase()), msg,
                              oom_hint(at, mem.phase(), stage_policy(s.have_cfg ? s.job.cfg.zero.stage : 0)));
  json breakdown = json::object();
  for (int c = 0; c < kNumMemCategories; ++c) breakdown[mem_category_name(static_cast<MemCategory>(c))] = at.by_category[c];
  failure["by_category"] = breakdown;
  failure["allocated_bytes"] = at.allocated;
  failure["capacity_bytes"] = at.capacity;
  failure["reserved_bytes"] = at.reserved;  // caching emulation: segments; reserved - allocated is stranded
  failure["request_bytes"] = at.request;
  failure["step"] = static_cast<int64_t>(s.result.steps.size());  // the optimizer step that was running
  // Which of the usual fixes the planner predicts would fit (CPU-emulated device): under
  // scale-down the target's, so each patch and peak is in the user's units (a toy's
  // stage3_max_live_parameters is no value to put in their config).
  if (s.have_cfg && s.have_model && s.dev.device.is_cpu() && s.capacity() > 0) {
    std::vector<FixPrediction> fixes;
    try {
      fixes = predict_fixes(s.scaled ? s.scaled->target_job : plan_request(s));
    } catch (const std::exception& e) {  // a failure report must not fail: say it and go on
      std::cerr << "[zrepro] could not plan the fixes: " << e.what() << std::endl;
    }
    json fj = json::array();
    for (const auto& f : fixes)
      fj.push_back(f.to_json());
    failure["planned_fixes"] = fj;
    failure["planned_fixes_scale"] = s.scaled ? "target" : "run";
    if (!fixes.empty()) {
      failure["hint"] = failure["hint"].get<std::string>() + " " + (s.scaled ? "At target scale, " : "") +
                        format_fixes(fixes) + ".";
      if (s.speaks()) std::cerr << "[zrepro] " << (s.scaled ? "at target scale, " : "") << format_fixes(fixes) << std::endl;
    }
  }
  return s.fail(FailureKind::oom, failure);
}

int pinned_failure(RunState& s, const PinnedMemoryError& e) {
  s.progress.clear();
  const std::string note = s.have_cfg ? pin_memory_default_note(s.job.cfg) : "";
  const std::string what = e.what() + s.at_target("--memlock-limit");
  std::cerr << "[zrepro] rank " << s.rank << ": " << what << note << std::endl;
  json failure = make_failure(FailureKind::pinned_memory, s.rank, "init", what + note,
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


// A host allocation failed (the model or a buffer is larger than this machine's memory).
int host_oom_failure(RunState& s, const std::string& what) {
  return s.fail_with(FailureKind::host_oom, "host", "[zrepro] rank " + std::to_string(s.rank) + ": a host allocation failed",
                     "a host memory allocation failed (" + what + ")",
                     "the model or a buffer is larger than this machine's memory: check --model, --vocab, --hidden "
                     "and the micro-batch");
}

}  // namespace zrepro
