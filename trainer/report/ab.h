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
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainer/report/ab_doc.h"
#include "trainer/report/summary.h"

namespace zrepro {

struct AbRun {
  std::string side;      // "A" or "B"
  int ranks = 1;
  int exit_code = 0;
  std::optional<Summary> summary;  // summary.json; none: none written (and under plan_only)
  nlohmann::json plan;             // plan_only: `zrepro plan --json`'s output; null: none
  std::string log;         // where the run's output went
  int failed_ranks = 0;    // ranks that ended with a failure (a hang: all of them)
};

struct AbResult {
  AbDocument doc;                    // ab.json (ab_doc.h)
  std::vector<std::string> verdicts;  // one line per rank count, then one per equivalence check
  std::string table;                 // human table
  int exit_code = 0;                 // 0 fixed, kExitAbNotFixed, kExitAbNoFailure, kExitInternal:
                                     // a side ended without its summary ("incomplete")
};

// What side A must show and side B must not (`--expect`):
//   failure           A fails (OOM, hang, numerical, pinned memory), B runs through (default)
//   refused           A's config is refused at init (exit 2), B runs through
//   slower:R          A's median step time >= R x B's (more:step_s_median:R)
//   less:KEY:R        A's KEY <= R x B's, KEY a row field (device_busy_fraction, overlap_ratio, ...)
//   more:KEY:R        A's KEY >= R x B's (comm_wait_share, data_wait_share, ...)
//   present:KEY       A's KEY is above 0 and B's is 0: what the fix must remove altogether
//                     (alloc_retries_per_step: the caching allocator's cache flushes)
//   differs:KEY:TOL   A's per-step KEY (loss, grad_norm) differs from B's (the reference)
//                     by more than TOL relative at some step
//   scaling:E         more ranks do not raise A's throughput: at each rank count after the
//                     first, A's tokens/s speedup over the first divided by the rank ratio
//                     (the scaling efficiency) is below E, B's is at least E
// For every kind but failure/refused a side that fails cannot show the symptom: B failing
// is "not fixed", A failing is "not reproduced".
struct Expectation {
  enum class Kind { failure, refused, less, more, present, differs, scaling } kind = Kind::failure;
  std::string key;     // less/more: a row field; differs: a per-step field; slower: step_s_median
  double factor = 0;   // slower/less/more: R; differs: TOL; scaling: E
  std::string text = "failure";  // as given
  // A symptom in time (scaling, a share or a duration; not bytes): it needs real processes,
  // since virtual ranks share one process's cores.
  bool measures_time() const {
    return kind == Kind::scaling || ((kind == Kind::less || kind == Kind::more) && key.find("bytes") == std::string::npos);
  }
};
// Throws ConfigError naming --expect, the value and the accepted forms.
Expectation parse_expectation(const std::string& text);
// The row fields less/more may name.
const std::vector<std::string>& ab_metric_keys();

// a[i] and b[i] ran at the same rank count. plan_only: the summaries are plans.
AbResult compare_ab(const std::vector<AbRun>& a, const std::vector<AbRun>& b, bool plan_only,
                    const Expectation& expect = {});

// ab.html: both sides' memory bars per rank count and loss curves on one page.
std::string ab_html(const AbDocument& ab);

}  // namespace zrepro
