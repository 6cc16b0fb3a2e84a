// See html_report.h.
#include "trainer/report/html_report.h"

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

std::string mib(double bytes) {
  char b[64];
  std::snprintf(b, sizeof b, "%.2f MiB", bytes / 1048576.0);
  return b;
}

// Loss per step as a polyline; skipped steps as red dots on the axis.
std::string loss_svg(const json& steps) {
  const int W = 640, H = 220, L = 50, B = 30;
  std::vector<std::pair<int, double>> pts;
  std::vector<int> skipped;
  double lo = 1e30, hi = -1e30;
  for (const auto& s : steps) {
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
std::string memory_svg(const json& memory) {
  static const char* cats[] = {"params", "grads", "optimizer_states", "activations", "comm_buffers", "other"};
  static const char* colors[] = {"#1565c0", "#2e7d32", "#ef6c00", "#6a1b9a", "#00838f", "#757575"};
  const auto& ranks = memory["ranks"];
  double top = memory["device_capacity_bytes"].is_number() ? memory["device_capacity_bytes"].get<double>() : 0;
  for (const auto& r : ranks)
    if (r["peak_bytes"].is_number()) top = std::max(top, r["peak_bytes"].get<double>());
  if (top <= 0) top = 1;
  const int W = 640, row = 26, L = 60;
  std::ostringstream o;
  o << "<svg width='" << W << "' height='" << row * ranks.size() + 40 << "' role='img' aria-label='memory per rank'>";
  int y = 5;
  for (const auto& r : ranks) {
    double x = L;
    o << "<text x='2' y='" << y + 15 << "' font-size='12'>rank " << r["rank"] << "</text>";
    for (int c = 0; c < 6; ++c) {
      const json& v = r["by_category"][cats[c]];
      if (!v.is_number()) continue;
      const double w = (W - L - 10) * v.get<double>() / top;
      o << "<rect x='" << x << "' y='" << y << "' width='" << w << "' height='" << row - 6 << "' fill='" << colors[c]
        << "'><title>" << cats[c] << ": " << mib(v.get<double>()) << "</title></rect>";
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

}  // namespace

std::string html_report(const json& s) {
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
    const json& v = s["virtual_ranks"];
    o << "<tr><th>ranks</th><td>" << v["world_size"] << " virtual ranks in one process, reported as rank "
      << v["as_rank"] << ", data rule " << esc(str(v["data_rule"])) << " (" << esc(str(v["note"])) << ")</td></tr>";
  }
  if (s["batch"].is_object())
    o << "<tr><th>batch</th><td>micro " << s["batch"]["micro"] << " x gas " << s["batch"]["grad_accum"] << " = global "
      << s["batch"]["global"] << "</td></tr>";
  o << "</table>";
  if (s["failure"].is_object()) {
    const json& f = s["failure"];
    o << "<div class='fail'><b>" << esc(str(f["kind"])) << "</b> on rank " << f["rank"] << " in phase "
      << esc(str(f["phase"])) << " (diagnosis checkpoint: " << esc(str(f["checkpoint"])) << ")<p>"
      << esc(str(f["message"])) << "</p><p><b>Hint:</b> " << esc(str(f["hint"])) << "</p></div>";
  }
  if (s["steps"].is_array() && !s["steps"].empty()) {
    o << "<h2>Loss</h2>";
    if (s["data"].is_object())
      o << "<p>A perfect model reaches " << str(s["data"]["entropy_floor_nats"]) << " nats on this data; red dots: "
        << "skipped (overflow) steps.</p>";
    o << loss_svg(s["steps"]);
  }
  if (s["memory"].is_object()) {
    o << "<h2>Device memory at each rank's peak</h2>" << memory_svg(s["memory"])
      << "<table><tr><th>rank</th><th>peak</th><th>phase</th><th>params</th><th>grads</th><th>optimizer</th>"
      << "<th>activations</th><th>comm buffers</th><th>other</th></tr>";
    for (const auto& r : s["memory"]["ranks"]) {
      o << "<tr><td>" << r["rank"] << "</td><td>" << (r["peak_bytes"].is_number() ? mib(r["peak_bytes"].get<double>()) : "–")
        << "</td><td>" << esc(str(r["peak_phase"])) << "</td>";
      for (const char* c : {"params", "grads", "optimizer_states", "activations", "comm_buffers", "other"})
        o << "<td>" << (r["by_category"][c].is_number() ? mib(r["by_category"][c].get<double>()) : "–") << "</td>";
      o << "</tr>";
    }
    o << "</table>";
    const json& pl = s["memory"].value("planned", json());
    if (pl.is_object())
      o << "<p>Planner (zrepro plan) for this run: peak " << mib(pl["peak_bytes"].get<double>()) << " in phase "
        << esc(str(pl["peak_phase"])) << ", verdict " << esc(str(pl["verdict"])) << ".</p>";
  }
  if (s.contains("scale_down") && s["scale_down"].is_object()) {
    const json& sd = s["scale_down"];
    o << "<h2>Scale-down fidelity (share of capacity at the peak, planned)</h2><p>target "
      << esc(str(sd["target_model"]["name"])) << " (" << str(sd["target_model"]["params"]) << " params), verdict "
      << esc(str(sd["target_planned"]["verdict"])) << "; toy " << str(sd["toy_model"]["params"])
      << " params, factor " << str(sd["parameter_factor"]) << "</p><table><tr><th>category</th><th>target</th>"
      << "<th>toy</th></tr>";
    for (const auto& r : sd["fidelity"])
      o << "<tr><td>" << esc(str(r["category"])) << "</td><td>" << str(r["target_share"]) << "</td><td>"
        << str(r["toy_share"]) << "</td></tr>";
    o << "</table>";
  }
  if (s.contains("offload") && s["offload"].is_object()) {
    o << "<h2>Offload (host link " << str(s["offload"]["host_link_gbps"]) << " GB/s modelled)</h2><table><tr>"
      << "<th>rank</th><th>down (B)</th><th>up (B)</th><th>copy s</th><th>exposed s</th><th>overlap</th>"
      << "<th>device busy</th><th>pinned host</th><th>pageable host</th></tr>";
    for (const auto& r : s["offload"]["ranks"])
      o << "<tr><td>" << r["rank"] << "</td><td>" << str(r["d2h_bytes"]) << "</td><td>" << str(r["h2d_bytes"])
        << "</td><td>" << str(r["copy_s"]) << "</td><td>" << str(r["exposed_s"]) << "</td><td>"
        << str(r["overlap_ratio"]) << "</td><td>" << str(r["device_busy_fraction"]) << "</td><td>"
        << mib(r["host_pinned_bytes"].get<double>()) << "</td><td>" << mib(r["host_pageable_bytes"].get<double>())
        << "</td></tr>";
    o << "</table>";
  }
  if (s["comm"].is_object() && s["comm"].contains("ops")) {
    o << "<h2>Collectives (rank 0, per step)</h2><table><tr><th>op</th><th>calls</th><th>bytes</th><th>seconds</th>"
      << "<th>algbw GB/s</th><th>busbw GB/s</th></tr>";
    for (auto& [op, v] : s["comm"]["ops"].items())
      o << "<tr><td>" << op << "</td><td>" << str(v["calls_per_step"]) << "</td><td>" << str(v["bytes_per_step"])
        << "</td><td>" << str(v["seconds_per_step"]) << "</td><td>" << str(v["algbw_GBps"]) << "</td><td>"
        << str(v["busbw_GBps"]) << "</td></tr>";
    o << "</table>";
  }
  if (s["time"].is_object()) {
    o << "<h2>Time</h2><table><tr><th>median step (s)</th><td>" << str(s["time"]["step_s_median"])
      << "</td></tr><tr><th>tokens/s</th><td>" << str(s["time"]["tokens_per_s"]) << "</td></tr>";
    for (auto& [k, v] : s["time"]["breakdown_s"].items())
      o << "<tr><th>" << k << " (s, whole run)</th><td>" << str(v) << "</td></tr>";
    o << "</table>";
  }
  if (s["effective_config"].is_object()) {
    o << "<h2>Effective DeepSpeed config</h2><details><summary>every value with its source</summary><table>"
      << "<tr><th>key</th><th>value</th><th>source</th></tr>";
    for (const auto& e : s["effective_config"]["entries"])
      o << "<tr><td>" << esc(str(e["key"])) << "</td><td>" << esc(str(e["value"])) << "</td><td>"
        << esc(str(e["source"])) << (e.contains("note") ? ": " + esc(str(e["note"])) : "") << "</td></tr>";
    o << "</table></details>";
  }
  o << "</body></html>\n";
  return o.str();
}

}  // namespace zrepro
