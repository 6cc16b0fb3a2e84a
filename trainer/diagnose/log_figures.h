// The figures a log carries, as one type: LogFigures. [Note: a log's figures are typed] The
// evidence scan (evidence.h) fills it from the lines it matches, --config adds what the
// config print would have said, the decision (decide.h) reads it, and `zrepro diagnose
// --json` writes it as the diagnosis's `numbers` (only the figures the log had; every
// field in docs/reference/diagnose-json.md). A figure renamed is a compile error in the
// rules that read it, not a key that silently reads as its default.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace zrepro {

// One rank's last collective: its NCCL watchdog line (SeqNum, OpType, NumelIn, NumelOut)
// or its Flight Recorder dump's row, which says also the entry's state, how many entries
// the dump held and its file.
struct WatchdogEntry {
  int rank = -1;
  std::optional<int64_t> seq, numel_in, numel_out;
  std::optional<std::string> op;
  struct Recorded {
    std::optional<std::string> state;
    int64_t entries = 0;
    std::string file;
  };
  std::optional<Recorded> recorded;  // a Flight Recorder row's

  nlohmann::json to_json() const;
  static WatchdogEntry from_json(const nlohmann::json& j);
};

// A DeepSpeed see_memory_usage line: MA / Max_MA / CA / Max_CA in GB as printed, the log
// line and the label line just before it.
struct MemoryLine {
  int line = 0;
  std::string label;
  double ma_gb = 0, max_ma_gb = 0, ca_gb = 0, max_ca_gb = 0;
};

// fwd, bwd (of which bwd_allreduce) and step as shares of fwd + bwd + step.
struct WallClockShares {
  double fwd = 0, bwd = 0, bwd_allreduce = 0, step = 0;
};

// What the job's --config says that its config print would have (DeepSpeed >= 0.19 leaves
// the print out at its default log level).
struct JobConfigFacts {
  bool gather_16bit_on_save = false;  // stage3_gather_16bit_weights_on_model_save
  bool offload = false;               // an offload_optimizer / offload_param device other than none
  bool pin_memory_off = false;        // an offload section with pin_memory false
  bool pin_memory_unset = false;      // an offload section without pin_memory (0.19.5 pins by default)
  bool any() const { return gather_16bit_on_save || offload || pin_memory_off || pin_memory_unset; }
};

struct LogFigures {
  // A PyTorch OOM message's figures (any version since 1.x).
  std::optional<int64_t> request_bytes, capacity_bytes, free_bytes, reserved_unallocated_bytes, allocated_bytes,
      reserved_bytes, process_bytes;
  // zrepro's own OOM line "(category C, phase P)"; the phase else from the traceback's
  // frames (phase_hint, written as `phase`).
  std::optional<std::string> category, phase, phase_hint;
  std::optional<bool> pinned_allocation_oom;  // a CUDA OOM a few frames under a pinned host allocation
  // The job's, as its lines say.
  std::optional<int64_t> train_batch_size, micro_batch, grad_accum, world_size, saved_world_size, zero_stage,
      completed_steps, straggler_rank, allocator_cache_flushes;
  // The last preprocessing progress bar's elapsed time (s); the two sizes of a tensor-size
  // mismatch error ("The size of tensor a (A) must match the size of tensor b (B)").
  std::optional<int64_t> preprocessing_elapsed_s, size_mismatch_a, size_mismatch_b;
  std::map<std::string, std::string> trainer_mismatch;  // the Trainer's refused key -> its value
  // fp16's loss scale ([Note: reading fp16's loss scale], decide.cpp).
  std::optional<int64_t> overflow_steps, overflows_at_scale_1;
  std::optional<double> last_attempted_loss_scale, min_attempted_loss_scale;
  // A hang ([Note: every rank's watchdog line], evidence.cpp): every rank's entry; the
  // first names the collective.
  std::vector<WatchdogEntry> watchdog;
  std::optional<int64_t> collective_seq, timeout_ms, ran_ms;
  std::optional<std::string> collective_op;
  // Memory before the failure: DeepSpeed's MA line, zrepro's scale-down table's share.
  std::optional<double> allocated_gb_before_failure, model_states_share;
  std::optional<double> host_memory_percent;  // the highest of DeepSpeed's "CPU Virtual Memory: ... percent = P%"
  std::vector<MemoryLine> memory_timeline;
  // DeepSpeed's timers summed over the log ("fwd", "bwd", "bwd_allreduce", "step", and the
  // micro_ ones); present once a timer line was read, even one with no figure.
  std::optional<std::map<std::string, double>> wall_clock_ms;
  JobConfigFacts config;
  std::vector<int> ranks_seen;  // the ranks whose prefixes the log's lines carry

  // The OOM's phase: its own line's, else the traceback's.
  std::optional<std::string> oom_phase() const { return phase ? phase : phase_hint; }
  // The timers' shares ([Note: speed fingerprints], decide.cpp): DeepSpeed's global timers,
  // else its micro-step ones; none unless forward and backward both took time and the
  // total is finite (a cut or garbled timer line says nothing about speed).
  std::optional<WallClockShares> wall_clock_shares() const;

  nlohmann::json to_json() const;  // only what the log had; wall_clock_shares beside the timers
  static LogFigures from_json(const nlohmann::json& j);
};

}  // namespace zrepro
