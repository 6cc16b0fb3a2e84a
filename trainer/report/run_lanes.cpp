// See run_lanes.h.
#include "trainer/report/run_lanes.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

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
  const json events = trace.is_object() ? trace.value("traceEvents", json::array()) : trace;
  std::map<std::pair<int, int>, std::string> lane_names;  // (pid, tid) -> compute | comm | copy
  for (const auto& e : events)
    if (e.value("ph", "") == "M" && e.value("name", "") == "thread_name")
      lane_names[{e.value("pid", 0), e.value("tid", 0)}] = e["args"].value("name", "");
  std::map<std::pair<int, int>, Lane> by_lane;
  std::vector<double> step_ends;  // rank 0's
  for (const auto& e : events) {
    if (e.value("ph", "") != "X") continue;
    const int pid = e.value("pid", 0), tid = e.value("tid", 0);
    const std::string lane = lane_names.count({pid, tid}) ? lane_names[{pid, tid}] : "lane " + std::to_string(tid);
    const std::string name = e.value("name", "");
    const double t0 = e.value("ts", 0.0) * 1e-6, t1 = t0 + e.value("dur", 0.0) * 1e-6;
    Lane& l = by_lane[{pid, tid}];
    l.label = "rank " + std::to_string(pid) + " " + lane;
    l.highlight = failing.count(pid) > 0;
    const json args = e.value("args", json());
    std::string tip = name;
    if (args.is_object() && args.contains("label")) tip += " " + args["label"].get<std::string>();
    if (args.is_object() && args.contains("step")) tip += " (step " + args["step"].dump() + ")";
    l.spans.push_back({t0, t1, name, tip, span_color(lane, name), false});
    if (pid == 0 && lane == "compute" && name == "step") step_ends.push_back(t1);
  }
  std::vector<Lane> lanes;
  for (auto& [k, l] : by_lane) lanes.push_back(std::move(l));
  std::sort(step_ends.begin(), step_ends.end());
  if (step_ends.size() >= 3) window(lanes, step_ends[step_ends.size() - 3]);  // the last two steps
  else window(lanes, -1);
  return lanes;
}

std::vector<Lane> lanes_from_flight(const std::vector<json>& dumps, const std::set<int>& failing) {
  std::vector<Lane> lanes;
  double latest = 0;
  for (const json& d : dumps)
    for (const auto& e : d.value("entries", json::array()))
      latest = std::max({latest, e.value("t_started", 0.0), e.value("t_completed", 0.0)});
  for (const json& d : dumps) {
    const int rank = d.value("rank", 0);
    Lane l{"rank " + std::to_string(rank) + " comm", {}, failing.count(rank) > 0};
    for (const auto& e : d.value("entries", json::array())) {
      const double t0 = e.value("t_started", e.value("t_scheduled", 0.0));
      if (t0 <= 0) continue;
      const std::string state = e.value("state", "");
      const bool open = state != "completed";
      const double t1 = e.value("t_completed", 0.0) > 0 && state == "completed" ? e["t_completed"].get<double>() : latest;
      l.spans.push_back({t0, std::max(t0, t1), e.value("op", ""),
                         "#" + std::to_string(e.value("seq", 0)) + " " + e.value("op", "") + " " + e.value("label", "") +
                             " (" + state + ")",
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
    std::vector<json> dumps;
    if (fs::is_directory(dir + "/flight", ec))
      for (const auto& e : fs::directory_iterator(dir + "/flight", ec))
        if (e.path().extension() == ".json") {
          std::ifstream in(e.path());
          dumps.push_back(json::parse(in));
        }
    std::sort(dumps.begin(), dumps.end(), [](const json& a, const json& b) { return a.value("rank", 0) < b.value("rank", 0); });
    return lanes_from_flight(dumps, failing);
  } catch (const json::exception&) {
    return {};  // a trace cut short: the page is drawn without lanes
  }
}

}  // namespace zrepro
