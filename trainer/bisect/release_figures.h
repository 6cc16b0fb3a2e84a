// What one run of a DeepSpeed release (or of zrepro under a release's profile) gave, in the
// terms `zrepro bisect` compares: per step the loss, the grad norm and whether the step was
// skipped; per rank the model-state bytes by category; per step the collective bytes by
// op; or the release's refusal of the config. Read from conformance/ds_run.py's record or
// from zrepro's summary.json, compared under one Tolerance.
//
// [Note: what counts as a move] Two runs on the same inputs agree when every step's loss
// and grad norm are within the relative tolerance (fp32: 1e-5, 16-bit: 1e-2: releases
// built on the same torch round the same arithmetic, but a changed reduction order moves
// 16-bit figures by ulps), the same steps are skipped, every rank's bytes per category are
// within the bytes tolerance and the per-step collective bytes by op agree (scalars under
// 1 KiB are latency, not traffic, and are not compared). A grad norm is compared only on
// steps both runs applied. A run that refused the config agrees only with another refusal.
//
// [Note: a release's own spread] The fixed 16-bit tolerance hides real changes of rounding
// (a bf16 accumulation moved to fp32 shows as well under 1e-2). So bisect runs the good
// and the bad release twice on the same inputs and keeps each one's spread (the largest
// relative difference of a loss or grad norm between its two runs: 0 on this CPU, where a
// release on the same torch computes the same bits). Where both are measured, a move is
// judged against them (spread_tolerance): anything past 4x the larger spread, at least
// 1e-9 (the record's decimal digits), moves, and a move smaller than the precision's
// rounding (2^-8 relative for bf16, 2^-11 for fp16) is named a change of rounding. The
// tolerance says which rule applied (Tolerance::basis), and the verdict prints it.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainer/report/summary.h"

namespace zrepro {

struct StepFigures {
  double loss = 0;
  std::optional<double> grad_norm;
  bool skipped = false;
};

struct ReleaseFigures {
  std::string outcome = "ran";  // ran | refused (the release refused the config) | failed
  std::string message;          // refused / failed: the release's error line
  std::string torch;            // the torch it ran on ("" for zrepro)
  std::vector<StepFigures> steps;
  // "rank R PHASE CATEGORY" -> bytes (phases init and boundary; DeepSpeed's categories).
  std::map<std::string, double> bytes;
  // "step S OP" -> bytes rank 0 sent (ZeRO's convention), collectives of 1 KiB and more.
  std::map<std::string, double> comm_bytes;
  // [Note: a release's own spread]: measured by a second run; absent in older cache entries.
  std::optional<double> spread;
};
// The largest relative difference of a loss or grad norm between two runs of one release
// on the same inputs; nullopt when either did not run or their steps differ.
std::optional<double> run_spread(const ReleaseFigures& a, const ReleaseFigures& b);

struct Tolerance {
  double numerics = 1e-5;  // relative, on losses and grad norms
  double bytes = 1e-3;     // relative, on bytes by category and collective bytes
  double rounding = 0;     // the 16-bit precision's relative rounding (0: fp32): a smaller move is named so
  std::string basis;       // which rule set `numerics`, for the verdict
};
// The default for a precision ("fp32", "bf16", "fp16"): [Note: what counts as a move].
Tolerance default_tolerance(const std::string& precision);
// From the good and bad releases' measured spreads, or the default where either is unknown
// ([Note: a release's own spread]).
Tolerance spread_tolerance(const std::string& precision, std::optional<double> good, std::optional<double> bad);

// ds_run.py's record (deepspeed.json). A missing or cut record is a failure with `log_tail`.
ReleaseFigures figures_from_deepspeed(const nlohmann::json& record, const std::string& log_tail);
// zrepro's summary: steps only (zrepro's categories are not DeepSpeed's; the conformance
// record compares bytes). A config zrepro refused (status config_error) is "refused", as a
// release's refusal is; any other failure "failed".
ReleaseFigures figures_from_zrepro(const Summary& summary);
// zrepro refused the config before writing a summary (exit 2): its error line.
ReleaseFigures zrepro_refusal(const std::string& message);

// One figure compared: its name ("step 1 grad norm", "rank 0 init grads", "step 2
// all_gather"), a's and b's values, whether they agree, and the line that says the move.
struct FigureRow {
  std::string figure;
  nlohmann::json a, b;  // numbers, or words ("applied", "ran")
  std::string unit;     // "B", "B sent" or ""
  bool ok = true;
  std::string text;  // "step 1 grad norm 1.434137 -> 0.7802409 (-45.6%)"
};
// Every figure a and b are compared on, in order: the outcome, the steps, then each step's
// skipped, loss and grad norm, then (unless steps_only) the bytes by category and the
// collective bytes. Only the outcome when the two did not both run.
std::vector<FigureRow> compare_figures(const ReleaseFigures& a, const ReleaseFigures& b, const Tolerance& tol,
                                       bool steps_only = false);
// What moved from a to b, one line each ("step 1 grad norm 1.434 -> 0.7802 (-45.6%)");
// empty when they agree. With steps_only the bytes are not compared (zrepro beside a
// release). At most `limit` lines, then "... and N more".
std::vector<std::string> moved(const ReleaseFigures& a, const ReleaseFigures& b, const Tolerance& tol,
                               bool steps_only = false, size_t limit = 6);

nlohmann::json to_json(const ReleaseFigures& f);
ReleaseFigures figures_from_json(const nlohmann::json& j);

}  // namespace zrepro
