// The comparison behind `zrepro ab`: two sides (A: the failing setup, B: the fix),
// each run at one or more rank counts, read back from their summary.json files (or
// `zrepro plan --json` outputs under --plan-only), reduced to one row per side and
// rank count, the largest loss / grad-norm difference between the sides over their
// common steps, a verdict line per rank count, for each side whether its larger rank
// counts behave as the equivalence rules predict against its first (same losses with
// the same global batch, sharded model states divided by the rank ratio), and the exit
// code of the whole A/B.
// Pure: no processes, no files (trainer/app/ab.cpp runs the sides).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace zrepro {

struct AbRun {
  std::string side;      // "A" or "B"
  int ranks = 1;
  int exit_code = 0;
  nlohmann::json summary;  // summary.json (or a plan's JSON under plan_only); null: none written
  std::string log;         // where the run's output went
  int failed_ranks = 0;    // ranks that ended with a failure (a hang: all of them)
};

struct AbResult {
  nlohmann::json json;               // ab.json
  std::vector<std::string> verdicts;  // one line per rank count, then one per equivalence check
  std::string table;                 // human table
  int exit_code = 0;                 // 0 fixed, kExitAbNotFixed, kExitAbNoFailure
};

// a[i] and b[i] ran at the same rank count. plan_only: the summaries are plans.
AbResult compare_ab(const std::vector<AbRun>& a, const std::vector<AbRun>& b, bool plan_only);

// Largest relative difference of a per-step field ("loss", "grad_norm") between two
// summaries over their common steps; NaN when there is none.
double max_step_rel_diff(const nlohmann::json& a, const nlohmann::json& b, const char* key);

// ab.html: both sides' memory bars per rank count and loss curves on one page.
std::string ab_html(const nlohmann::json& ab);

}  // namespace zrepro
