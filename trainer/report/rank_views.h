// Every rank's view of a multi-rank failure, merged into one summary.
//
// [Note: every rank's view] In a multi-process run that fails (OOM, numerical, I/O,
// interrupted) each failing rank writes its own summary, summary_rank<r>.json, and then
// merges every view present into summary.json under a lock: no rank waits for another,
// so whichever order mpirun ends the ranks in, summary.json and report.html hold every
// view written so far (the last rank to write sees them all). The base is the lowest
// rank's view that shows a cause, not an interruption ([Note: the cause is the headline],
// rank_views.cpp); failure.ranks lists each view's failure, memory.ranks each rank's own
// memory record. A hang is different: rank 0 gathers the flight dumps and writes alone.
#pragma once
#include <optional>
#include <vector>

#include "trainer/report/summary.h"

namespace zrepro {

// views[r]: rank r's own summary, or none when it wrote none. world: the job's size.
// Returns the merged summary (none when no view is present).
std::optional<Summary> merge_rank_views(const std::vector<std::optional<Summary>>& views, int world);

}  // namespace zrepro
