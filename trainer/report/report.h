// Machine-readable outputs of a run: summary.json (docs/design/ARCHITECTURE.md "Contracts") and
// metrics.jsonl (one line per optimizer step), both written atomically: a file
// appears complete under its final name or not at all.
#pragma once
#include <array>
#include <fstream>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "device/device_memory.h"
#include "trainer/config/ds_config.h"
#include "trainer/config/model_spec.h"
#include "trainer/loop/train.h"
#include "trainer/planner/planner.h"
#include "trainer/planner/scale_down.h"
#include "trainer/report/summary.h"
#include "trainer/config/json_file.h"  // read_json_file, json_text
#include "trainer/config/user_file.h"  // write_file_atomic

namespace zrepro {

// A summary's file text: indented; bytes that are not UTF-8 (quoted user input, a
// config's) replaced, never thrown on.
std::string summary_text(const nlohmann::json& summary);
// DIR/summary.json and DIR/report.html from one summary, each written atomically.
void write_summary_and_report(const std::string& dir, const Summary& summary);

// Appends step lines to DIR/metrics.jsonl.partial (flushed per line, so a killed
// run leaves evidence) and renames it to DIR/metrics.jsonl on close(). A write that
// fails throws IoError, and the file then keeps its .partial name.
class MetricsWriter {
 public:
  explicit MetricsWriter(const std::string& dir);
  ~MetricsWriter();
  void append(const nlohmann::json& line);
  void close();

 private:
  std::string final_path_, partial_path_;
  std::ofstream out_;
  bool failed_ = false;
};

nlohmann::json step_json(const StepRecord& s);

// What every rank contributes to rank 0's summary (packed into doubles so that
// one all-gather carries it).
struct RankReport {
  int rank = 0;
  EngineMemory memory;     // engine-owned model states (exact, from tensor sizes)
  MemorySnapshot device;   // the tracking allocator's view (peaks, categories)
  double comm_wait_s = 0, step_s = 0;
  CopyStats copies;        // offload copies over the run
  // Bytes per step each category (then the total) grows by after warm-up; none with too
  // few steps (growth_per_step).
  std::optional<std::array<double, kNumMemCategories + 1>> growth;
  static constexpr int kPacked = 21 + 3 * kNumMemCategories + 2 * kNumPhases + 1;
  std::vector<double> pack() const;
  static RankReport unpack(const double* v);
};
RankReport rank_report(int rank, const TrainResult& r, const MemorySnapshot& device);
// The least-squares slope, bytes per step, of each category's bytes (then the total) at
// step ends, past the first kGrowthWarmupSteps steps (first allocations, lazy optimizer
// states); none with fewer than kGrowthMinSteps steps after them. A leak is a positive slope.
inline constexpr int kGrowthWarmupSteps = 2, kGrowthMinSteps = 3;
std::optional<std::array<double, kNumMemCategories + 1>> growth_per_step(const std::vector<StepRecord>& steps);
SummaryRankMemory rank_memory(const RankReport& r);  // memory.ranks[] of the summary
// The rank the others wait for: every rank's time in collectives, and when the spread is
// more than a quarter of the mean total step time, the least-waiting rank named as the straggler
// ({"rank", "others_wait_s", "own_wait_s"}); null on one rank or without such a spread.
std::optional<SummaryStraggler> straggler_of(const std::vector<RankReport>& ranks);
// DeepSpeed's see_memory_usage line: "MA 1.23 GB  Max_MA 2.34 GB  CA 2.50 GB  Max_CA 3 GB".
std::string memory_line(const MemorySnapshot& m);
// DeepSpeed's ZeRO-3 warning after a step whose allocations flushed the caching
// allocator's cache `flushes` times (stage3.py's step(), rank 0, from num_alloc_retries),
// word for word after its "[WARNING]" prefix, so that diagnose and grep find it as in a
// real log.
std::string allocator_flush_line(int64_t flushes);
// The run's closing memory line: the device peak (of the capacity, when there is one), the
// phase and step it came in (step counted from 1; 0: not known) and the three largest
// categories at that moment, e.g. "peak 1.87 GiB (23% of 8.00 GiB) in backward of step 3:
// activations 1.20 GiB, params 300.00 MiB, comm_buffers 200.00 MiB".
std::string peak_summary(const MemorySnapshot& m, int64_t step);

struct SummaryInput {
  std::string status = "ok";  // ok | oom | hang | diverged | config_error | error
  const DsConfig* config = nullptr;
  const ModelSpec* model = nullptr;
  std::string device;
  const TrainResult* result = nullptr;   // rank 0's
  std::vector<RankReport> ranks;         // every rank's (empty: rank 0 alone)
  nlohmann::json failure;  // null or {kind, rank, phase, message, checkpoint, hint}
  double host_link_gbps = 0, pageable_ratio = 0.5;  // the copy engine's model (offload)
  const MemoryPlan* planned = nullptr;   // the planner's figures for this run (memory.planned)
  const ScaleDown* scale_down = nullptr;  // --target-model: the target, the toy, the fidelity
  // The loop's options: the input pipeline (data.loader), the sample lengths and the loss
  // normalisation (data.seq_len_dist, data.loss_normalization).
  const TrainOptions* train = nullptr;
  double modelled_busbw_gbps = 0;         // --interconnect-gbps (comm.modelled_busbw_GBps)
  nlohmann::json env;                     // zrepro env's block (trainer/app/env.h), or null
  nlohmann::json virtual_ranks;           // --world-size: world, as_rank, data rule, peer host bytes; or null
  std::vector<std::string> config_mismatch;  // ranks whose effective configs differ (trainer/config/rank_configs.h)
  nlohmann::json calibration;  // time.calibration (StepCalibration::to_json), or null
  nlohmann::json inputs;       // what the run was asked (Summary::inputs), or null
  std::vector<PhaseWindow> unfinished;  // a failed run: the failing step's phases so far ([Note: phase windows])
};
Summary build_summary(const SummaryInput& in);

// [Note: summary schema] (summary.h): kSummarySchema, checked by read_summary.
// The summary at path, typed; none when the file is missing or not JSON (a run that
// ended without writing it); ConfigError naming the file for another schema or a shape
// the type does not read.
std::optional<Summary> read_summary(const std::string& path);
void check_summary_schema(const nlohmann::json& summary, const std::string& where);

// How a run can fail, and for each kind the summary status, the exit code and the
// diagnosis checkpoint (docs/design/ARCHITECTURE.md "Contracts") its failure record points at: one table
// (kFailures in report.cpp), read by every failure path of every command.
enum class FailureKind { config_error, oom, host_oom, hang, numerical, pinned_memory, interrupted, io, internal };
struct FailureRow {
  const char* kind;        // failure.kind in summary.json
  const char* status;      // summary.json status
  int exit_code;           // process exit code (device/base/errors.h)
  const char* checkpoint;  // failure.checkpoint
};
const FailureRow& failure_row(FailureKind k);
// {kind, rank, phase, message, checkpoint, hint} for summary.json.
nlohmann::json make_failure(FailureKind k, int rank, const std::string& phase, const std::string& message,
                            const std::string& hint);

// What to try after an OOM, from the phase and the category that filled the device
// (checkpoint zero-stage; `zrepro run`'s failure.hint).
std::string oom_hint(const MemorySnapshot& at, Phase phase, const StagePolicy& policy);
// An error caused by a default says so: the offload pin_memory the config never set, with
// the release that made it true and the key to set ("" when the config set it).
std::string pin_memory_default_note(const DsConfig& cfg);

}  // namespace zrepro
