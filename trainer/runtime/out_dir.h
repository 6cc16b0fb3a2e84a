// The run's output folder, claimed for one run at a time: an advisory lock held for the
// process's life (a second run on the same --out is refused with exit 2, naming the
// holder's pid), and the files an earlier run left there (summary, report, metrics,
// trace, hang report, flight dumps, inputs) moved aside to OUT/previous/, so nothing of
// another run sits beside this one's summary.
//
// [Note: only zrepro's files move] A run records the names it owns in OUT/.zrepro-outputs
// (the manifest). The next run moves only what a manifest names (a folder without one,
// from before manifests: only zrepro's plain files, never a folder), and replaces
// OUT/previous/ only when it holds a manifest, i.e. zrepro made it, and nothing that manifest
// does not list (a file the user put there). An entry of the user's
// with a name a run writes (an `inputs/` folder, a `previous/` of their own) is never
// moved or deleted: the run refuses with exit 2 and names it.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainer/report/summary.h"

namespace zrepro {

// The names a run writes in its --out (files and folders), which claim_out_dir moves aside.
const std::vector<std::string>& run_output_names();

// Locks dir (creating it) for this process and moves an earlier run's outputs to
// dir/previous/ (replacing what was there). Returns what was moved. Throws ConfigError
// when another live process holds the lock.
std::vector<std::string> claim_out_dir(const std::string& dir);
// At the run's end: its manifest lists what it wrote (the output names present now), so
// a folder the user adds later under such a name is theirs (a crash leaves the claim's
// list of every name a run may write).
void seal_out_dir(const std::string& dir);

// A failing rank of a multi-process run: writes its own view to dir/summary_rank<r>.json,
// then, under dir/.views.lock, merges every rank's view present into dir/summary.json and
// dir/report.html ([Note: every rank's view], trainer/report/rank_views.h). Throws
// IoError when a write fails.
void publish_rank_view(const std::string& dir, int rank, int world, const Summary& own);

}  // namespace zrepro
