// See html_report.h.
#include "trainer/report/html_report.h"

#include "device/device_memory.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace zrepro {

using json = nlohmann::json;

std::string html_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '&': o += "&amp;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

namespace {

std::string esc(const std::string& s) { return html_escape(s); }

std::string str(const json& v) {
  if (v.is_null()) return "–";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) {
    char b[64];
    std::snprintf(b, sizeof b, "%.4g", v.get<double>());
    return b;
  }
  return v.dump();
}

// Bytes as people read them ("1.50 GiB"); "–" for a missing figure.
std::string bytes(const json& v) { return v.is_number() ? format_bytes(static_cast<int64_t>(v.get<double>())) : "–"; }

// A fraction as a percentage ("42.0%"); "–" for a missing figure.
std::string pct(const json& v) {
  if (!v.is_number()) return "–";
  char b[32];
  std::snprintf(b, sizeof b, "%.1f%%", 100 * v.get<double>());
  return b;
}

bool nonzero(const json& v) { return v.is_number() && v.get<double>() != 0; }

// Loss per step as a polyline; skipped steps as red dots on the axis.
std::string loss_svg(json& steps) {
  const int W = 640, H = 220, L = 50, B = 30;
  std::vector<std::pair<int, double>> pts;
  std::vector<int> skipped;
  double lo = 1e30, hi = -1e30;
  for (auto& s : steps) {
    if (s.value("skipped", false)) skipped.push_back(s["step"].get<int>());
    if (!s["loss"].is_number()) continue;
    const double v = s["loss"].get<double>();
    pts.push_back({s["step"].get<int>(), v});
    lo = std::min(lo, v), hi = std::max(hi, v);
  }
  std::ostringstream o;
  o << "<svg width='" << W << "' height='" << H << "' role='img' aria-label='loss per step'>";
  if (pts.empty()) return o.str() + "<text x='10' y='20'>no steps</text></svg>";
  if (hi - lo < 1e-12) hi = lo + 1;
  const int n = std::max(1, static_cast<int>(steps.size()) - 1);
  auto X = [&](int step) { return L + (W - L - 10) * static_cast<double>(step) / n; };
  auto Y = [&](double v) { return 10 + (H - B - 10) * (hi - v) / (hi - lo); };
  o << "<line x1='" << L << "' y1='" << H - B << "' x2='" << W - 10 << "' y2='" << H - B << "' stroke='#999'/>"
    << "<line x1='" << L << "' y1='10' x2='" << L << "' y2='" << H - B << "' stroke='#999'/>"
    << "<text x='2' y='16' font-size='11'>" << str(json(hi)) << "</text>"
    << "<text x='2' y='" << H - B << "' font-size='11'>" << str(json(lo)) << "</text>"
    << "<text x='" << W / 2 << "' y='" << H - 8 << "' font-size='11'>optimizer step</text><polyline fill='none' "
    << "stroke='#1565c0' stroke-width='2' points='";
  for (auto& [s, v] : pts) o << X(s) << "," << Y(v) << " ";
  o << "'/>";
  for (int s : skipped) o << "<circle cx='" << X(s) << "' cy='" << H - B << "' r='3' fill='#c62828'/>";
  return o.str() + "</svg>";
}

// One stacked bar per rank: categories at the rank's peak, against the capacity.
std::string memory_svg(json& memory) {
  static const char* cats[] = {"params", "grads", "optimizer_states", "activations", "comm_buffers", "other"};
  static const char* colors[] = {"#1565c0", "#2e7d32", "#ef6c00", "#6a1b9a", "#00838f", "#757575"};
  auto& ranks = memory["ranks"];
  double top = memory["device_capacity_bytes"].is_number() ? memory["device_capacity_bytes"].get<double>() : 0;
  for (auto& r : ranks)
    if (r["peak_bytes"].is_number()) top = std::max(top, r["peak_bytes"].get<double>());
  if (top <= 0) top = 1;
  const int W = 640, row = 26, L = 60;
  std::ostringstream o;
  // The legend's six entries take 6 x 115 px from L: the drawing is wide enough for them.
  o << "<svg width='" << L + 6 * 115 << "' height='" << row * ranks.size() + 40 << "' role='img' aria-label='memory per rank'>";
  int y = 5;
  for (auto& r : ranks) {
    double x = L;
    o << "<text x='2' y='" << y + 15 << "' font-size='12'>rank " << r["rank"] << "</text>";
    for (int c = 0; c < 6; ++c) {
      json& v = r["by_category"][cats[c]];
      if (!v.is_number()) continue;
      const double w = (W - L - 10) * v.get<double>() / top;
      o << "<rect x='" << x << "' y='" << y << "' width='" << w << "' height='" << row - 6 << "' fill='" << colors[c]
        << "'><title>" << cats[c] << ": " << bytes(v) << "</title></rect>";
      x += w;
    }
    y += row;
  }
  if (memory["device_capacity_bytes"].is_number()) {
    const double x = L + (W - L - 10) * memory["device_capacity_bytes"].get<double>() / top;
    o << "<line x1='" << x << "' y1='0' x2='" << x << "' y2='" << y << "' stroke='#c62828' stroke-dasharray='4'/>"
      << "<text x='" << x - 60 << "' y='" << y + 12 << "' font-size='11' fill='#c62828'>capacity</text>";
  }
  int lx = L;
  for (int c = 0; c < 6; ++c) {
    o << "<rect x='" << lx << "' y='" << y + 18 << "' width='10' height='10' fill='" << colors[c] << "'/><text x='"
      << lx + 13 << "' y='" << y + 27 << "' font-size='11'>" << cats[c] << "</text>";
    lx += 115;
  }
  return o.str() + "</svg>";
}

// The failure box; with several ranks, each rank's own view (failure.ranks) and, for a
// hang, the suspects and where every rank stands in its collectives.
void failure_section(std::ostringstream& o, json& f) {
  o << "<div class='fail'><b>" << esc(str(f["kind"])) << "</b> on rank " << f["rank"] << " in phase "
    << esc(str(f["phase"])) << " (diagnosis checkpoint: " << esc(str(f["checkpoint"])) << ")<p>"
    << esc(str(f["message"])) << "</p><p><b>Hint:</b> " << esc(str(f["hint"])) << "</p></div>";
  if (f.contains("ranks") && f["ranks"].is_array()) {
    o << "<h2>Every rank's view</h2><table><tr><th>rank</th><th>status</th><th>phase</th><th>allocated</th>"
      << "<th>capacity</th><th>message</th></tr>";
    for (auto& r : f["ranks"])
      o << "<tr><td>" << r["rank"] << "</td><td>" << esc(str(r["status"])) << "</td><td>" << esc(str(r["phase"]))
        << "</td><td>" << bytes(r["allocated_bytes"]) << "</td><td>" << bytes(r["capacity_bytes"]) << "</td><td>"
        << esc(str(r["message"])) << "</td></tr>";
    o << "</table>";
    const json missing = f.value("ranks_without_a_view", json::array());
    if (!missing.empty())
      o << "<p>No summary from rank(s) " << esc(missing.dump()) << ": they ended (mpirun stops the others once one "
        << "rank fails) before writing theirs, or did not fail.</p>";
  }
  if (!f.contains("hang") || !f["hang"].is_object()) return;
  json& h = f["hang"];
  if (!h.value("suspects", json::array()).empty()) {
    o << "<h2>Hang suspects, most likely first</h2><ol>";
    for (auto& x : h["suspects"]) o << "<li>rank " << x["rank"] << ": " << esc(str(x["evidence"])) << "</li>";
    o << "</ol>";
  }
  o << "<h2>Collectives per rank at the hang</h2><table><tr><th>rank</th><th>flight dump</th>"
    << "<th>last completed</th><th>waits in</th><th>idle before the newest activity</th></tr>";
  for (auto& r : h.value("ranks", json::array())) {
    auto at = [](json& seq, json& what) {
      return seq.is_null() ? std::string("–") : "#" + seq.dump() + " " + esc(str(what));
    };
    o << "<tr><td>" << r["rank"] << "</td><td>" << (r.value("dumped", false) ? "yes" : "<b>none</b>") << "</td><td>"
      << at(r["last_completed_seq"], r["last_completed"]) << "</td><td>" << at(r["waiting_seq"], r["waiting_in"])
      << "</td><td>" << (r["idle_s"].is_number() ? str(r["idle_s"]) + " s" : "–") << "</td></tr>";
  }
  o << "</table>";
}

// Each rank's peak by category, the columns that are zero on every rank left out.
void memory_section(std::ostringstream& o, json& m) {
  static const std::pair<const char*, const char*> cats[] = {
      {"params", "params"},           {"grads", "grads"},           {"optimizer_states", "optimizer"},
      {"activations", "activations"}, {"comm_buffers", "comm buffers"}, {"other", "other"}};
  std::vector<std::pair<const char*, const char*>> shown;
  for (auto& c : cats)
    for (auto& r : m["ranks"])
      if (nonzero(r["by_category"][c.first])) {
        shown.push_back(c);
        break;
      }
  o << "<h2>Device memory at each rank's peak</h2>" << memory_svg(m) << "<table><tr><th>rank</th><th>peak</th>"
    << "<th>of capacity</th><th>phase</th>";
  for (auto& c : shown) o << "<th>" << c.second << "</th>";
  o << "</tr>";
  const json cap = m.value("device_capacity_bytes", json());
  for (auto& r : m["ranks"]) {
    const json share = r["peak_bytes"].is_number() && nonzero(cap) ? json(r["peak_bytes"].get<double>() / cap.get<double>())
                                                                    : json(nullptr);
    o << "<tr><td>" << r["rank"] << "</td><td>" << bytes(r["peak_bytes"]) << "</td><td>" << pct(share) << "</td><td>"
      << esc(str(r["peak_phase"])) << "</td>";
    for (auto& c : shown) o << "<td>" << bytes(r["by_category"][c.first]) << "</td>";
    o << "</tr>";
  }
  o << "</table>";
  json pl = m.value("planned", json());
  if (pl.is_object())
    o << "<p>Planner (zrepro plan) for this run: peak " << bytes(pl["peak_bytes"]) << " in phase "
      << esc(str(pl["peak_phase"])) << ", verdict " << esc(str(pl["verdict"])) << ".</p>";
}

void scale_down_section(std::ostringstream& o, json& sd) {
  o << "<h2>Scale-down fidelity (share of capacity at the peak, planned)</h2><p>target "
    << esc(str(sd["target_model"]["name"])) << " (" << str(sd["target_model"]["params"]) << " params), verdict "
    << esc(str(sd["target_planned"]["verdict"])) << "; toy " << str(sd["toy_model"]["params"])
    << " params, factor " << str(sd["parameter_factor"]) << "</p><table><tr><th>category</th><th>target</th>"
    << "<th>toy</th></tr>";
  for (auto& r : sd["fidelity"])
    o << "<tr><td>" << esc(str(r["category"])) << "</td><td>" << pct(r["target_share"]) << "</td><td>"
      << pct(r["toy_share"]) << "</td></tr>";
  o << "</table>";
}

void offload_section(std::ostringstream& o, json& off) {
  o << "<h2>Offload (host link " << str(off["host_link_gbps"]) << " GB/s modelled)</h2><table><tr>"
    << "<th>rank</th><th>down</th><th>up</th><th>copy s</th><th>waited s</th><th>overlapped</th>"
    << "<th>device busy</th><th>pinned host</th><th>pageable host</th></tr>";
  for (auto& r : off["ranks"])
    o << "<tr><td>" << r["rank"] << "</td><td>" << bytes(r["d2h_bytes"]) << "</td><td>" << bytes(r["h2d_bytes"])
      << "</td><td>" << str(r["copy_s"]) << "</td><td>" << str(r["exposed_s"]) << "</td><td>"
      << pct(r["overlap_ratio"]) << "</td><td>" << pct(r["device_busy_fraction"]) << "</td><td>"
      << bytes(r["host_pinned_bytes"]) << "</td><td>" << bytes(r["host_pageable_bytes"]) << "</td></tr>";
  o << "</table>";
}

// Rank 0's collectives per step; ops never called are left out, and so is the table
// when none was (one rank).
void comm_section(std::ostringstream& o, json& comm) {
  std::ostringstream rows;
  for (auto& [op, v] : comm["ops"].items()) {
    if (!nonzero(v["calls_per_step"])) continue;
    rows << "<tr><td>" << op << "</td><td>" << str(v["calls_per_step"]) << "</td><td>" << bytes(v["bytes_per_step"])
         << "</td><td>" << str(v["seconds_per_step"]) << "</td><td>" << str(v["algbw_GBps"]) << "</td><td>"
         << str(v["busbw_GBps"]) << "</td></tr>";
  }
  if (rows.str().empty()) return;
  o << "<h2>Collectives (rank 0, per step)</h2><table><tr><th>op</th><th>calls</th><th>bytes</th><th>seconds</th>"
    << "<th>algbw GB/s</th><th>busbw GB/s</th></tr>" << rows.str() << "</table>";
}

// Median step, throughput and the parts of the run's time that were not zero, with
// their share of the accounted time.
void time_section(std::ostringstream& o, json& t) {
  o << "<h2>Time</h2><table><tr><th>median step (s)</th><td>" << str(t["step_s_median"]) << "</td><td></td></tr>"
    << "<tr><th>tokens/s</th><td>" << str(t["tokens_per_s"]) << "</td><td></td></tr>";
  double total = 0;
  for (auto& [k, v] : t["breakdown_s"].items())
    if (v.is_number()) total += v.get<double>();
  for (auto& [k, v] : t["breakdown_s"].items())
    if (nonzero(v))
      o << "<tr><th>" << k << " (s, whole run)</th><td>" << str(v) << "</td><td>"
        << pct(json(total > 0 ? v.get<double>() / total : 0)) << "</td></tr>";
  o << "</table>";
}

void config_section(std::ostringstream& o, json& ec) {
  o << "<h2>Effective DeepSpeed config</h2><details><summary>every value with its source</summary><table>"
    << "<tr><th>key</th><th>value</th><th>source</th></tr>";
  for (auto& e : ec["entries"])
    o << "<tr><td>" << esc(str(e["key"])) << "</td><td>" << esc(str(e["value"])) << "</td><td>"
      << esc(str(e["source"])) << (e.contains("note") ? ": " + esc(str(e["note"])) : "") << "</td></tr>";
  o << "</table></details>";
}

}  // namespace

std::string html_report(const json& summary) {
  // A copy: operator[] on a mutable json reads a missing key as null, where the const
  // one asserts (a partial summary of a failed run must still draw).
  json s = summary;
  std::ostringstream o;
  const std::string status = s.value("status", "?");
  const bool ok = status == "ok";
  o << "<!doctype html><html><head><meta charset='utf-8'><title>zrepro report: " << esc(status) << "</title>"
    << "<style>body{font-family:sans-serif;margin:24px;max-width:900px}table{border-collapse:collapse}"
    << "td,th{border:1px solid #ddd;padding:3px 8px;font-size:13px;text-align:left}"
    << ".status{display:inline-block;padding:4px 10px;border-radius:4px;color:#fff;background:"
    << (ok ? "#2e7d32" : "#c62828") << "}.fail{border:2px solid #c62828;padding:10px;margin:12px 0}</style></head><body>"
    << "<h1>zrepro run <span class='status'>" << esc(status) << "</span></h1><table>";
  for (const char* k : {"world_size", "zero_stage", "precision", "device"})
    o << "<tr><th>" << k << "</th><td>" << esc(str(s[k])) << "</td></tr>";
  if (s["model"].is_object())
    o << "<tr><th>model</th><td>" << esc(str(s["model"]["name"])) << ": " << s["model"]["params"] << " params, "
      << s["model"]["layers"] << " layers, hidden " << s["model"]["hidden"] << ", seq " << s["model"]["seq"] << "</td></tr>";
  if (s.contains("virtual_ranks") && s["virtual_ranks"].is_object()) {
    json& v = s["virtual_ranks"];
    o << "<tr><th>ranks</th><td>" << v["world_size"] << " virtual ranks in one process, reported as rank "
      << v["as_rank"] << ", data rule " << esc(str(v["data_rule"])) << " (" << esc(str(v["note"])) << ")</td></tr>";
  }
  if (s["batch"].is_object())
    o << "<tr><th>batch</th><td>micro " << s["batch"]["micro"] << " x gas " << s["batch"]["grad_accum"] << " = global "
      << s["batch"]["global"] << "</td></tr>";
  o << "</table>";
  if (s["failure"].is_object()) failure_section(o, s["failure"]);
  if (s["steps"].is_array() && !s["steps"].empty()) {
    o << "<h2>Loss</h2>";
    if (s["data"].is_object())
      o << "<p>A perfect model reaches " << str(s["data"]["entropy_floor_nats"]) << " nats on this data; red dots: "
        << "skipped (overflow) steps.</p>";
    o << loss_svg(s["steps"]);
  }
  if (s["memory"].is_object() && s["memory"]["ranks"].is_array()) memory_section(o, s["memory"]);
  if (s.contains("scale_down") && s["scale_down"].is_object()) scale_down_section(o, s["scale_down"]);
  if (s.contains("offload") && s["offload"].is_object()) offload_section(o, s["offload"]);
  if (s["comm"].is_object() && s["comm"].contains("ops")) comm_section(o, s["comm"]);
  if (s["time"].is_object()) time_section(o, s["time"]);
  if (s["effective_config"].is_object()) config_section(o, s["effective_config"]);
  o << "</body></html>\n";
  return o.str();
}

}  // namespace zrepro
