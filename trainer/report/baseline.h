// Baselines for regression tests after an upgrade (`zrepro check`): a run folder's figures
// that must not move, saved once, and the check of a later run against them. What is
// compared, and how much it may move:
//   status, steps, skipped steps ........ exact
//   peak memory per rank and category .... 2% of the baseline value (4 KiB floor: allocator rounding)
//   host memory per rank, pinned/pageable  2% (4 KiB floor): offload's pin_memory after an upgrade
//   the effective config, key by key ..... exact, each differing key named with its source
//                                           (a release's default, the file, a flag, "auto")
//   collective bytes per step, per op .... exact
//   loss and grad-norm trajectories ...... relative, by precision (fp32 1e-4, bf16 3e-2, fp16 1e-2; grad norm 3x)
//   step time ........................... as a ratio to a calibration kernel timed in the same
//                                           invocation (noisy machines), at most 1.5x the baseline's
//   planned vs measured peak ............. the ratio may move by 0.02: after a LibTorch upgrade the
//                                           planner's activation tapes may be stale
// Setup (world size, stage, precision, model) must match; versions (LibTorch, DeepSpeed
// profile, NCCL, CUDA) are reported when they changed, never failed on: they are what the
// check is for.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainer/report/summary.h"

namespace zrepro {

struct CheckTolerances {
  double memory_rel = 0.02;
  int64_t memory_floor_bytes = 4096;
  double time_ratio = 1.5;
  double plan_ratio = 0.02;
  double loss_scale = 1.0;  // multiplies the precision's loss / grad-norm tolerance
};

// The baseline format this zrepro writes and reads ("zrepro_baseline").
constexpr int kBaselineVersion = 1;

// A run's summary and the calibration seconds measured now -> a baseline. A failed run's
// summary (an OOM at init: no steps, no times) gives a baseline of that failure, whose
// figures are the failure's.
nlohmann::json make_baseline(const Summary& summary, double calibration_s, const std::string& from);

// Throws ConfigError, naming `path`, the key, what it holds and what was expected, unless
// `baseline` is one this zrepro reads: version kBaselineVersion, every key check_against
// compares present with its type.
void validate_baseline(const nlohmann::json& baseline, const std::string& path);

struct CheckRow {
  std::string metric;
  nlohmann::json baseline, now;
  std::string tolerance;
  bool ok = true;
  std::string note;
};

struct CheckResult {
  std::vector<CheckRow> rows;
  bool passed() const;
  nlohmann::json to_json() const;
  std::string table() const;  // the rows that moved, then a one-line verdict
};

// Both sides are baselines (make_baseline of the run being checked, with this invocation's calibration).
CheckResult check_against(const nlohmann::json& baseline, const nlohmann::json& now, const CheckTolerances& tol);

}  // namespace zrepro
