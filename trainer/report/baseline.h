// Baselines for regression tests after an upgrade (`zrepro check`): a run folder's figures
// that must not move, saved once, and the check of a later run against them. What is
// compared, and how much it may move, in the order the table shows it:
//   inputs: the run's arguments and ... exact, each differing flag or config key named
//     its config file's JSON             first, as an input, not as a regression
//   setup (world size, stage, precision, model)  exact
//   status, steps, skipped steps ........ exact
//   peak memory per rank and category .... 2% of the baseline value (4 KiB floor: allocator rounding)
//   host memory per rank, pinned/pageable  2% (4 KiB floor): offload's pin_memory after an upgrade
//   memory growth per step, by category .. at most 4 KiB/step above the baseline's (a leak)
//   the effective config, key by key ..... exact, each differing key named with its source
//                                           (a release's default, the file, a flag, "auto")
//   collective bytes per step, per op .... exact
//   loss and grad-norm trajectories ...... relative, by precision (fp32 1e-4, bf16 3e-2, fp16 1e-2; grad norm 3x)
//   step time ........................... as a ratio to a calibration kernel timed during the run
//                                           ([Note: step time against the machine],
//                                           trainer/loop/calibration.h); the allowed ratio is the
//                                           larger of --time-tol (1.5) and 1 + 2 x the two runs'
//                                           measured spreads. Advisory (reported, never failed on)
//                                           unless --time-gate
//   planned vs measured peak ............. the ratio may move by 0.02: after a LibTorch upgrade the
//                                           planner's activation tapes may be stale
// Versions (LibTorch, DeepSpeed profile, NCCL, CUDA, MPI, CPU, zrepro) are reported when
// they changed, never failed on: they are what the check is for.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "device/base/field_doc.h"
#include "trainer/report/summary.h"

namespace zrepro {

struct CheckTolerances {
  double memory_rel = 0.02;
  int64_t memory_floor_bytes = 4096;
  double time_ratio = 1.5;   // the least step-time ratio allowed; measured spreads may widen it
  bool time_gate = false;    // fail on step time (default: advisory)
  double growth_floor_bytes = 4096;  // per step, above the baseline's growth
  double plan_ratio = 0.02;
  double loss_scale = 1.0;  // multiplies the precision's loss / grad-norm tolerance
};

// The baseline format this zrepro writes and reads ("zrepro_baseline").
constexpr int kBaselineVersion = 1;

// [Note: one baseline type] A baseline file is a Baseline: written only by to_json, read
// only through from_json (which refuses a file of another format or shape, naming the key);
// check_against compares two of them field by field. Keys a baseline saved by an older
// zrepro lacks (host bytes, growth, inputs, the effective config, plan_over_measured) are
// nullopt and compared without.
struct BaselineRank {
  int rank = 0;
  SummaryCategories by_category;                         // each category's own peak
  std::optional<SummaryCategories> host;                 // "pinned", "pageable"
  std::optional<std::map<std::string, double>> growth;   // bytes per step after warm-up; null with too few steps
};
// An effective-config entry (DsConfig::effective_json): the value and where it came from.
struct BaselineConfigValue {
  nlohmann::json value, source, note;
};
struct BaselineTime {
  double step_s_median = 0, calibration_s = 0, ratio = 0, spread = 0;
  std::string source;  // during the run, or at check time
};
struct Baseline {
  std::string from, status;
  std::optional<int64_t> world_size, zero_stage, skipped_steps;
  std::optional<std::string> precision, deepspeed_version, model;
  nlohmann::json env;  // `zrepro env --json` of the run, read through Environment::from_json (environment.h)
  std::optional<SummaryInputs> inputs;  // what the run was asked (summary.json's inputs)
  int64_t steps = 0;
  std::vector<std::optional<double>> loss, grad_norm;  // per step; null: not finite
  std::vector<BaselineRank> ranks;
  int64_t peak_bytes = 0;
  std::map<std::string, double> comm_bytes_per_step;
  std::optional<std::map<std::string, BaselineConfigValue>> effective_config;
  std::optional<double> plan_over_measured;
  BaselineTime time;

  nlohmann::json to_json() const;
  // Throws ConfigError, naming `path`, the key, what it holds and what was expected, unless
  // `j` is one this zrepro reads: version kBaselineVersion, every key check_against
  // compares present with its type.
  static Baseline from_json(const nlohmann::json& j, const std::string& path);
};

// docs/reference/baseline-json.md: the baseline's field table, an example with every field
// set (what the table must cover, tests/trainer/report/baseline_test.cpp) and the page.
const std::vector<FieldDoc>& baseline_field_docs();
Baseline baseline_example();
std::string baseline_reference_page();

// A run's summary -> a baseline. Step time is taken against the calibration the run timed
// ([Note: step time against the machine]); a summary without one (an older zrepro's) is
// taken against check_time_calibration_s, timed now, and the baseline says so. A failed
// run's summary (an OOM at init: no steps, no times) gives a baseline of that failure,
// whose figures are the failure's.
Baseline make_baseline(const Summary& summary, double check_time_calibration_s, const std::string& from);
// The summary holds the run's own calibration (make_baseline needs no check-time one).
bool calibrated_in_run(const Summary& summary);

// What a row is about: an input (what the run was asked), a figure that must not move, a
// version (reported), an advisory figure (reported; step time without --time-gate).
enum class RowKind { input, figure, version, advisory };
const char* row_kind_name(RowKind k);

struct CheckRow {
  std::string metric;
  nlohmann::json baseline, now;
  std::string tolerance;
  bool ok = true;
  std::string note;
  RowKind kind = RowKind::figure;
  std::string unit = {};  // "bytes", "bytes/step" or "" (the table prints bytes in KiB/MiB/GiB)
};

struct CheckResult {
  std::vector<CheckRow> rows;
  bool passed() const;
  bool inputs_differ() const;  // a failing input row: the run is not the baseline's job
  int failures() const;
  nlohmann::json to_json() const;
  // The inputs that differ, then the rows that moved, versions and advisories, then a
  // one-line verdict: PASS, REGRESSION, or INPUTS DIFFER.
  std::string table() const;
  std::string verdict() const;
  // The cause in one line, for a CI's failure message: the verdict, the first input that
  // differs (else the first figure that moved) with its two values and tolerance, and how
  // many more moved ("PASS" when nothing did).
  std::string headline() const;
};

// Both sides are baselines (make_baseline of the run being checked, with this invocation's calibration).
CheckResult check_against(const Baseline& baseline, const Baseline& now, const CheckTolerances& tol);

}  // namespace zrepro
