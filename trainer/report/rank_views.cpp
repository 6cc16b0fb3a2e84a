// See rank_views.h.
#include "trainer/report/rank_views.h"

#include <map>

namespace zrepro {

using json = nlohmann::json;

namespace {

// One rank's failure, as failure.ranks lists it.
json failure_line(int rank, const json& view) {
  const json f = view.value("failure", json::object());
  json line = {{"rank", rank}, {"status", view.value("status", "?")}};
  for (const char* k : {"kind", "phase", "message", "checkpoint", "allocated_bytes", "capacity_bytes"})
    line[k] = f.is_object() ? f.value(k, json()) : json(nullptr);
  return line;
}

}  // namespace

json merge_rank_views(const std::vector<json>& views, int world) {
  json merged;
  json lines = json::array(), reported = json::array();
  std::map<int, json> memory;  // rank -> that rank's own memory record
  for (int r = 0; r < static_cast<int>(views.size()); ++r) {
    const json& v = views[r];
    if (!v.is_object()) continue;
    if (merged.is_null()) merged = v;
    lines.push_back(failure_line(r, v));
    reported.push_back(r);
    if (v.contains("memory") && v["memory"].is_object())
      for (const auto& m : v["memory"].value("ranks", json::array()))
        if (m.is_object() && m.value("rank", -1) == r) memory[r] = m;
  }
  if (merged.is_null()) return merged;
  if (!merged["failure"].is_object()) merged["failure"] = json::object();
  merged["failure"]["ranks"] = lines;
  merged["failure"]["ranks_reported"] = reported;
  json missing = json::array();
  for (int r = 0; r < world; ++r)
    if (r >= static_cast<int>(views.size()) || !views[r].is_object()) missing.push_back(r);
  merged["failure"]["ranks_without_a_view"] = missing;
  if (merged.contains("memory") && merged["memory"].is_object()) {
    json ranks = json::array();
    for (auto& [r, m] : memory) ranks.push_back(m);
    merged["memory"]["ranks"] = ranks;
  }
  return merged;
}

}  // namespace zrepro
