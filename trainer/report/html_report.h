// report.html: one self-contained page (inline SVG, no scripts) drawn from
// summary.json, for people who would rather look than grep: status and failure,
// loss curve with skipped steps, device memory per rank by category against the
// capacity, collectives, time breakdown and the effective config with sources.
#pragma once
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "trainer/report/summary.h"
#include "trainer/report/svg_chart.h"

namespace zrepro {

// lanes: where each rank spent its time (run_lanes.h), drawn as swimlanes when given.
std::string html_report(const Summary& summary, const std::vector<Lane>& lanes = {});
// The ranks a failure names (every failing rank's view, or the one that reported).
std::set<int> failing_ranks(const Summary& summary);
// Text safe inside HTML elements and attribute values.
std::string html_escape(const std::string& s);
// What zrepro's pages (report.html, ab.html) print for a figure that may be missing.
std::string html_bytes(const nlohmann::json& v);  // "1.50 GiB", or "–"
double number_or(const nlohmann::json& v, double fallback = NAN);

}  // namespace zrepro
