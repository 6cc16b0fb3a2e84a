// See rank_views.h.
#include "trainer/report/rank_views.h"

#include <map>

namespace zrepro {

namespace {

// One rank's failure, as failure.ranks lists it.
SummaryRankView failure_line(int rank, const Summary& view) {
  SummaryRankView line;
  line.rank = rank;
  line.status = view.status;
  if (!view.failure) return line;
  const SummaryFailure& f = *view.failure;
  if (!f.kind.empty()) line.kind = f.kind, line.phase = f.phase, line.message = f.message, line.checkpoint = f.checkpoint;
  for (auto [key, field] : {std::pair{"allocated_bytes", &line.allocated_bytes}, {"capacity_bytes", &line.capacity_bytes}})
    if (f.details.contains(key) && f.details[key].is_number()) *field = f.details[key].get<int64_t>();
  return line;
}

// [Note: the cause is the headline] A rank interrupted because a peer vanished (mpirun ends
// every rank once one ends) shows the consequence; the peer that ended first with its own
// failure (a refused file, an OOM) shows the cause. The lowest rank with a failure other than
// an interruption is the base; the lowest rank when every view is an interruption.
int headline_rank(const std::vector<std::optional<Summary>>& views) {
  int first = -1;
  for (int r = 0; r < static_cast<int>(views.size()); ++r) {
    if (!views[r]) continue;
    if (first < 0) first = r;
    if (views[r]->status != "interrupted") return r;
  }
  return first;
}

}  // namespace

std::optional<Summary> merge_rank_views(const std::vector<std::optional<Summary>>& views, int world) {
  std::optional<Summary> merged;
  SummaryRankViews listed;
  std::map<int, SummaryRankMemory> memory;  // rank -> that rank's own memory record
  const int base = headline_rank(views);
  if (base >= 0) merged = *views[base];
  for (int r = 0; r < static_cast<int>(views.size()); ++r) {
    if (!views[r]) continue;
    const Summary& v = *views[r];
    listed.ranks.push_back(failure_line(r, v));
    listed.reported.push_back(r);
    if (const SummaryRankMemory* m = v.rank_memory(r)) memory[r] = *m;
  }
  if (!merged) return merged;
  for (int r = 0; r < world; ++r)
    if (r >= static_cast<int>(views.size()) || !views[r]) listed.without_a_view.push_back(r);
  if (!merged->failure) merged->failure = SummaryFailure{};
  merged->failure->views = listed;
  if (merged->memory) {
    merged->memory->ranks.clear();
    for (auto& [r, m] : memory) merged->memory->ranks.push_back(m);
  }
  return merged;
}

}  // namespace zrepro
