// See run_lanes.h.
#include "trainer/report/run_lanes.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include "trainer/loop/trace.h"

namespace zrepro {

namespace {

using json = nlohmann::json;

const char* span_color(const std::string& lane, const std::string& name) {
  if (lane == "compute")
    return name == "forward" ? "#1565c0" : name == "backward" ? "#6a1b9a" : name == "step" ? "#2e7d32" : "#9e9e9e";
  if (lane == "copy") return name.find("h2d") != std::string::npos ? "#0097a7" : "#00838f";
  return "#ef6c00";  // collectives
}

// Keeps the spans that end after `from`, the latest kMaxLaneSpans of them in all.
void window(std::vector<Lane>& lanes, double from) {
  std::vector<double> ends;
  for (Lane& l : lanes) {
    l.spans.erase(std::remove_if(l.spans.begin(), l.spans.end(), [&](const LaneSpan& s) { return s.t1 <= from; }),
                  l.spans.end());
    for (LaneSpan& s : l.spans) s.t0 = std::max(s.t0, from), ends.push_back(s.t1);
  }
  if (ends.size() <= kMaxLaneSpans) return;
  std::nth_element(ends.begin(), ends.end() - kMaxLaneSpans, ends.end());
  const double cut = *(ends.end() - kMaxLaneSpans);
  for (Lane& l : lanes)
    l.spans.erase(std::remove_if(l.spans.begin(), l.spans.end(), [&](const LaneSpan& s) { return s.t1 < cut; }),
                  l.spans.end());
}

}  // namespace

std::vector<Lane> lanes_from_trace(const json& trace, const std::set<int>& failing) {
  const std::vector<TraceEvent> events = trace_events_of(trace);
  std::map<std::pair<int, int>, std::string> lane_names;  // (pid, tid) -> compute | comm | copy
  for (const TraceEvent& e : events)
    if (e.ph == "M" && e.name == "thread_name") lane_names[{e.pid, e.tid.value_or(0)}] = e.arg_text("name");
  std::map<std::pair<int, int>, Lane> by_lane;
  std::vector<double> step_ends;  // rank 0's
  for (const TraceEvent& e : events) {
    if (e.ph != "X") continue;
    const int tid = e.tid.value_or(0);
    const std::string lane = lane_names.count({e.pid, tid}) ? lane_names[{e.pid, tid}] : "lane " + std::to_string(tid);
    const double t0 = e.ts_us * 1e-6, t1 = t0 + e.dur_us * 1e-6;
    Lane& l = by_lane[{e.pid, tid}];
    l.label = "rank " + std::to_string(e.pid) + " " + lane;
    l.highlight = failing.count(e.pid) > 0;
    std::string tip = e.name;
    if (const std::string label = e.arg_text("label"); !label.empty()) tip += " " + label;
    if (const std::string step = e.arg_text("step"); !step.empty()) tip += " (step " + step + ")";
    l.spans.push_back({t0, t1, e.name, tip, span_color(lane, e.name), false});
    if (e.pid == 0 && lane == "compute" && e.name == "step") step_ends.push_back(t1);
  }
  std::vector<Lane> lanes;
  for (auto& [k, l] : by_lane) lanes.push_back(std::move(l));
  std::sort(step_ends.begin(), step_ends.end());
  if (step_ends.size() >= 3) window(lanes, step_ends[step_ends.size() - 3]);  // the last two steps
  else window(lanes, -1);
  return lanes;
}

std::vector<Lane> lanes_from_flight(const std::vector<FlightDump>& dumps, const std::set<int>& failing) {
  std::vector<Lane> lanes;
  double latest = 0;
  for (const FlightDump& d : dumps)
    for (const FlightEntry& e : d.entries) latest = std::max({latest, e.t_started, e.t_completed});
  for (const FlightDump& d : dumps) {
    Lane l{"rank " + std::to_string(d.rank) + " comm", {}, failing.count(d.rank) > 0};
    for (const FlightEntry& e : d.entries) {
      const double t0 = e.t_started;
      if (t0 <= 0) continue;  // scheduled, never started
      const bool open = e.state != FlightEntry::completed;
      const double t1 = !open && e.t_completed > 0 ? e.t_completed : latest;
      const std::string op = coll_op_name(e.op);
      l.spans.push_back({t0, std::max(t0, t1), op,
                         "#" + std::to_string(e.seq) + " " + op + " " + e.label + " (" + flight_state_name(e.state) + ")",
                         "#ef6c00", open});
    }
    lanes.push_back(std::move(l));
  }
  window(lanes, -1);
  return lanes;
}

std::vector<Lane> run_lanes(const std::string& dir, const std::set<int>& failing) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string trace = dir + "/trace.json";
  try {
    if (fs::exists(trace, ec)) {
      if (static_cast<int64_t>(fs::file_size(trace, ec)) > kMaxTraceBytes) return {};
      std::ifstream in(trace);
      return lanes_from_trace(json::parse(in), failing);
    }
    std::vector<FlightDump> dumps;
    if (fs::is_directory(dir + "/flight", ec))
      for (const auto& e : fs::directory_iterator(dir + "/flight", ec))
        if (e.path().extension() == ".json") {
          std::ifstream in(e.path());
          dumps.push_back(FlightDump::from_json(json::parse(in)));
        }
    std::sort(dumps.begin(), dumps.end(), [](const FlightDump& a, const FlightDump& b) { return a.rank < b.rank; });
    return lanes_from_flight(dumps, failing);
  } catch (const json::exception&) {
    return {};  // a trace cut short: the page is drawn without lanes
  }
}

}  // namespace zrepro
