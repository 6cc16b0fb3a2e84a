// run_lanes: where each rank spent its time, for report.html's swimlanes (svg_chart.h
// swimlanes): from a run folder's trace.json (per rank: the compute lane's data /
// forward / backward / step spans, the comm lane's collectives, the copy lane's offload
// copies), or, for a hang with no trace, from its flight recorder dumps (flight/rank*.json:
// each rank's collectives, the one it is stuck in open). The window is the run's last
// two steps (rank 0's step spans), or all of it when shorter: enough to see who waits
// for whom without a page of thousands of spans.
#pragma once
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainer/report/hang.h"
#include "trainer/report/svg_chart.h"

namespace zrepro {

// failing: ranks whose lanes are highlighted.
std::vector<Lane> lanes_from_trace(const nlohmann::json& trace, const std::set<int>& failing);
std::vector<Lane> lanes_from_flight(const std::vector<FlightDump>& dumps, const std::set<int>& failing);
// The lanes of the run in `dir` (trace.json, else flight/); empty when neither is there
// or the trace is too large to draw (kMaxTraceBytes).
std::vector<Lane> run_lanes(const std::string& dir, const std::set<int>& failing);

constexpr int64_t kMaxTraceBytes = 64 << 20;
constexpr size_t kMaxLaneSpans = 4000;  // drawn at most (the latest kept)

}  // namespace zrepro
