// ab.html (see ab.h): the page a reviewer reads to accept a fix. From ab.json alone:
// the outcome and every verdict line at the top, then what the verdict rests on
// (the expectation, the differences measured, the scale-down fidelity), each failing
// side's failure with its hint, the figure that matters for each failure kind (every
// rank's memory by category against the capacity, pinned bytes against the memlock
// limit, where each rank waits in a hang, tokens/s for a slowdown), the loss and grad
// norm per step on honest axes (svg_chart.h) and every run with links to its
// report.html and log. One file, inline SVG, no scripts.
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "device/device_memory.h"
#include "trainer/report/ab.h"
#include "trainer/report/html_report.h"
#include "trainer/report/svg_chart.h"

namespace zrepro {

// Named, not anonymous: the unity build puts this file beside report pages with
// helpers of the same names.
namespace ab_page {

using json = nlohmann::json;

std::string esc(const std::string& s) { return html_escape(s); }
std::string text(const json& v) { return v.is_string() ? v.get<std::string>() : v.is_null() ? "–" : v.dump(); }
std::string bytes(const json& v) { return html_bytes(v); }
std::string fmt(double v, const char* f) {
  if (!std::isfinite(v)) return "–";
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

std::string label(const json& row) { return row["side"].get<std::string>() + " x" + std::to_string(row["ranks"].get<int>()); }
bool failed(const json& row) { return row.value("exit_code", 0) != 0; }
std::string kind(const json& row) {
  return row.value("failure", json()).is_object() ? row["failure"].value("kind", "") : "";
}
bool pinned_failure(const json& row) { return row.value("status", json()) == "pinned_memory"; }
// The run's folder beside ab.html ("A_r2"), from its log's name.
std::string run_dir(const json& row) {
  std::string log = row.value("log", "");
  log = log.substr(log.find_last_of('/') + 1);
  const size_t dot = log.find('.');
  return dot == std::string::npos ? log : log.substr(0, dot);
}

void head(std::ostringstream& o, const json& ab) {
  const std::string outcome = ab.value("outcome", "?");
  const char* colour = outcome == "fixed" ? "#2e7d32" : outcome == "not fixed" ? "#c62828" : "#757575";
  o << "<!doctype html><html><head><meta charset='utf-8'><title>zrepro ab: " << esc(outcome) << "</title><style>"
    << "body{font-family:sans-serif;margin:2em;max-width:78em}table{border-collapse:collapse;margin:.5em 0}"
       "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#eee}td.l{text-align:left}"
       ".v{padding:.5em;margin:.3em 0;background:#f4f4f4;border-left:4px solid #888}"
       ".fail{padding:.5em 1em;margin:.5em 0;background:#fdecea;border-left:4px solid #c62828}"
       ".status{display:inline-block;padding:4px 10px;border-radius:4px;color:#fff;background:"
    << colour << "}.bar{display:inline-block;height:10px;background:#1565c0}</style></head><body>"
    << "<h1>zrepro ab: <span class='status' id='outcome'>" << esc(outcome) << "</span> (exit "
    << ab.value("exit_code", 0) << ")</h1>";
}

void verdicts(std::ostringstream& o, const json& ab) {
  o << "<section id='verdict'>";
  for (const auto& c : ab.value("comparisons", json::array()))
    o << "<div class='v verdict'>" << esc(c.value("verdict", "")) << "</div>";
  for (const auto& e : ab.value("equivalence", json::array()))
    if (e.contains("line")) o << "<div class='v equivalence'>" << esc(e["line"].get<std::string>()) << "</div>";
  o << "</section>";
}

// What the verdict rests on: the expectation, the differences it measured and, for a
// scaled-down side, the fidelity of its toy ([Note: a verdict at target scale says what
// it rests on] in ab.cpp).
void basis(std::ostringstream& o, const json& ab) {
  o << "<h2>What the verdict rests on</h2><ul id='basis'><li>Expectation <code>" << esc(ab.value("expect", "failure"))
    << "</code>: " << (ab.value("plan_only", false) ? "the planner's figures (no run)" : "measured runs") << ".</li>";
  for (const auto& r : ab["rows"])
    if (r.value("capacity_bytes", json()).is_number()) {
      const bool emulated = text(r.value("device", json())).rfind("cuda", 0) != 0;
      o << "<li>Device memory: " << bytes(r["capacity_bytes"]) << " per rank ("
        << (emulated ? "emulated on the CPU device: --device-memory" : "the GPU's own capacity") << ", " << esc(label(r))
        << "'s summary)";
      if (r.value("target_capacity_bytes", json()).is_number()) o << "; " << bytes(r["target_capacity_bytes"]) << " at target scale";
      o << ".</li>";
      break;
    }
  for (const auto& r : ab["rows"]) {
    const double link = number_or(r.value("host_link_gbps", json()), 0), bus = number_or(r.value("interconnect_busbw_gbps", json()), 0);
    if (link > 0)
      o << "<li>" << esc(label(r)) << ": host link modelled at " << fmt(link, "%.3g")
        << " GB/s (copies take at least bytes / bandwidth; --host-link-gbps or --host-link-profile).</li>";
    if (bus > 0)
      o << "<li>" << esc(label(r)) << ": interconnect modelled at " << fmt(bus, "%.3g") << " GB/s bus bandwidth.</li>";
  }
  for (const auto& c : ab.value("comparisons", json::array()))
    o << "<li>" << c["ranks"] << " rank(s): largest relative difference between A and B over their common steps: loss "
      << fmt(number_or(c.value("max_loss_rel_diff", json())), "%.3g") << ", grad norm "
      << fmt(number_or(c.value("max_grad_norm_rel_diff", json())), "%.3g") << ".</li>";
  for (const auto& r : ab["rows"]) {
    const json w = r.value("fidelity_worst", json());
    if (!w.is_object()) continue;
    o << "<li>" << esc(label(r)) << " ran scaled down (parameters x" << fmt(number_or(r.value("parameter_factor", json())), "%.4g")
      << " to " << esc(text(r.value("target_model", json()))) << "): its worst category, " << esc(text(w["category"]))
      << ", is " << fmt(100 * number_or(w["toy_share"]), "%.0f") << "% of capacity in the toy against "
      << fmt(100 * number_or(w["target_share"]), "%.0f") << "% at target ("
      << (r.value("fidelity_ok", false) ? "within 5 points: the verdict holds at target" : "<b>more than 5 points: the toy's verdict may not hold at target</b>")
      << "); planned at target " << bytes(r.value("target_planned_peak_bytes", json())) << " ("
      << esc(text(r.value("target_planned_verdict", json()))) << ").</li>";
  }
  o << "</ul>";
}

void failures(std::ostringstream& o, const json& ab) {
  for (const auto& r : ab["rows"]) {
    const json f = r.value("failure", json());
    if (!f.is_object()) continue;
    o << "<div class='fail' data-row='" << esc(label(r)) << "'><b>" << esc(label(r)) << ": " << esc(f.value("kind", ""))
      << "</b> on rank " << text(f.value("rank", json())) << (r.value("phase", json()).is_string() ? " in " + esc(r["phase"].get<std::string>()) : "")
      << "<p>" << esc(f.value("message", "")) << "</p><p><b>Hint:</b> " << esc(f.value("hint", "")) << "</p></div>";
  }
}

// Every rank's peak by category, per rank count, at target scale after a scale-down,
// with the plan's peak as a marker and the capacity as a line.
void memory(std::ostringstream& o, const json& ab) {
  std::map<int, std::vector<json>> by_ranks;
  for (const auto& r : ab["rows"]) by_ranks[r["ranks"].get<int>()].push_back(r);
  for (const auto& [ranks, rows] : by_ranks) {
    std::vector<BarRow> bars;
    double capacity = 0, factor = 1;
    std::vector<std::string> none;
    for (const json& r : rows) {
      const double f = number_or(r.value("parameter_factor", json()), 1);
      const bool scaled = f != 1;
      factor = std::max(factor, f);
      const double cap = scaled ? number_or(r.value("target_capacity_bytes", json()), 0) : number_or(r.value("capacity_bytes", json()), 0);
      capacity = std::max(capacity, cap);
      const double planned = number_or(scaled ? r.value("target_planned_peak_bytes", json()) : r.value("planned_peak_bytes", json()), -1);
      if (ab.value("plan_only", false)) {  // the plan's highest rank, by category where it says
        BarRow b{label(r) + " (plan)", r["side"].get<std::string>() + "-" + std::to_string(ranks) + "-plan", {}, -1, failed(r)};
        if (r.value("by_category", json()).is_object())
          for (const auto& [cat, v] : r["by_category"].items()) b.segments.push_back({cat, v.get<double>()});
        else
          b.segments.push_back({"peak", number_or(r.value("peak_bytes_max", json()), 0)});
        bars.push_back(b);
        continue;
      }
      // A run that ended before training (a pinned-memory failure at init) has no device figures.
      int drawn = 0;
      for (const auto& m : r.value("rank_memory", json::array())) {
        if (number_or(m.value("peak_bytes", json()), 0) <= 0) continue;
        ++drawn;
        BarRow b{label(r) + " rank " + m["rank"].dump(), r["side"].get<std::string>() + "-" + std::to_string(ranks) + "-" + m["rank"].dump(), {}, planned, failed(r)};
        const json cats = m.value("by_category", json::object());
        for (const auto& [cat, v] : cats.items()) b.segments.push_back({cat, f * v.get<double>()});
        bars.push_back(b);
      }
      if (drawn == 0) none.push_back(label(r) + (kind(r).empty() ? "" : " (" + kind(r) + ")"));
    }
    o << "<h2>Device memory per rank, " << ranks << " rank(s)" << (factor != 1 ? ", at target scale (the toy's bytes x parameter factor)" : "") << "</h2>";
    if (!bars.empty()) o << stacked_bars(bars, {"device memory per rank by category", capacity, "planned peak", 760});
    for (const auto& n : none) o << "<p>" << esc(n) << ": no device memory figures (it ended before training).</p>";
  }
}

// A pinned-memory failure: the bytes offload had to pin against the memlock limit.
void pinned(std::ostringstream& o, const json& ab) {
  for (const auto& r : ab["rows"]) {
    if (!pinned_failure(r) || !r.value("failure", json()).is_object()) continue;
    const json& f = r["failure"];
    const double limit = number_or(f.value("memlock_limit_bytes", json()), 0);
    o << "<h2>" << esc(label(r)) << ": pinned host memory against the memlock limit</h2>"
      << stacked_bars({{label(r) + " needs", label(r) + "-pinned", {{"pinned (offload)", number_or(f.value("needed_bytes", json()), 0)}}, -1, true}},
                      {"pinned bytes against the memlock limit", limit, "", 760, "memlock limit"})
      << "<p>needed " << bytes(f.value("needed_bytes", json())) << ", memlock limit "
      << (limit > 0 ? bytes(f["memlock_limit_bytes"]) : "unlimited") << ", already locked " << bytes(f.value("locked_bytes", json()))
      << " (red line: the limit).</p>";
  }
}

// A hang: where each rank waits; other multi-rank runs: each rank's collective wait.
void waits(std::ostringstream& o, const json& ab) {
  for (const auto& r : ab["rows"]) {
    const json f = r.value("failure", json());
    if (kind(r) == "hang" && f.contains("hang_ranks")) {
      o << "<h2>" << esc(label(r)) << ": where each rank waits</h2><table class='hang'><tr><th>rank</th><th>waits in</th>"
        << "<th>last completed</th><th>idle</th></tr>";
      for (const auto& h : f["hang_ranks"])
        o << "<tr><td>" << text(h["rank"]) << "</td><td class='l'>" << (h["waiting_seq"].is_null() ? "-" : "#" + h["waiting_seq"].dump() + " ")
          << esc(text(h["waiting_in"])) << "</td><td class='l'>" << esc(text(h["last_completed"])) << "</td><td>"
          << fmt(number_or(h["idle_s"]), "%.1f s") << "</td></tr>";
      o << "</table>";
      for (const auto& s : f.value("hang_suspects", json::array()))
        o << "<p>suspect: rank " << text(s.value("rank", json())) << ": " << esc(text(s.value("evidence", json()))) << "</p>";
    }
  }
}

// Throughput of every run that trained: the figure a slowdown is judged by.
void speed(std::ostringstream& o, const json& ab) {
  double top = 0;
  for (const auto& r : ab["rows"]) top = std::max(top, number_or(r.value("tokens_per_s", json()), 0));
  if (top <= 0) return;
  o << "<h2>Throughput</h2><table id='speed'><tr><th>run</th><th>tokens/s</th><th></th><th>median step</th>"
    << "<th>comm wait share</th><th>offload wait per step</th></tr>";
  for (const auto& r : ab["rows"]) {
    const double t = number_or(r.value("tokens_per_s", json()));
    o << "<tr><td class='l'>" << esc(label(r)) << "</td><td>" << fmt(t, "%.0f") << "</td><td class='l'>"
      << (std::isfinite(t) ? "<span class='bar' style='width:" + fmt(300 * t / top, "%.0f") + "px'></span>" : "no steps") << "</td><td>" << fmt(number_or(r.value("step_s_median", json())), "%.4f s")
      << "</td><td>" << fmt(100 * number_or(r.value("comm_wait_share", json())), "%.0f%%") << "</td><td>"
      << fmt(number_or(r.value("offload_wait_s_per_step", json())), "%.4f s") << "</td></tr>";
  }
  o << "</table>";
}

void curves(std::ostringstream& o, const json& ab, const char* key, const char* name) {
  std::vector<Series> series;
  size_t points = 0;
  const json all = ab.value(key, json::object());
  for (const auto& [run, c] : all.items()) {
    Series s{run, {}, ""};
    for (size_t i = 0; i < c.size(); ++i)
      if (c[i].is_number()) s.points.push_back({static_cast<double>(i), c[i].get<double>()});
    points += s.points.size();
    series.push_back(s);
  }
  if (points == 0) return;
  o << "<h2>" << name << " per step</h2>" << line_chart(series, {std::string(name) + " per step", "optimizer step", name, 760, 280});
}

void runs(std::ostringstream& o, const json& ab) {
  o << "<h2>Runs</h2><table id='runs'><tr><th>run</th><th>status</th><th>exit</th><th>phase</th><th>peak (highest rank)</th>"
       "<th>% capacity</th><th>rank spread</th><th>at target: planned (toy x factor)</th><th>final loss</th><th>pages</th></tr>";
  const bool plan_only = ab.value("plan_only", false);
  for (const auto& r : ab["rows"]) {
    const std::string dir = run_dir(r);
    o << "<tr><td class='l'>" << esc(label(r)) << "</td><td>" << esc(text(r["status"])) << "</td><td>" << r["exit_code"]
      << "</td><td>" << esc(text(r.value("phase", json()))) << "</td><td>" << bytes(r.value("peak_bytes_max", json()))
      << "</td><td>" << fmt(100 * number_or(r.value("peak_share_of_capacity", json())), "%.0f%%") << "</td><td>"
      << bytes(r.value("peak_bytes_spread", json())) << "</td><td>" << bytes(r.value("target_planned_peak_bytes", json()))
      << " (" << bytes(r.value("target_peak_bytes_max", json())) << ")</td><td>"
      << fmt(number_or(r.value("final_loss", json())), "%.5f") << "</td><td class='l'>";
    if (plan_only)
      o << "<a href='" << esc(dir) << ".plan.json'>plan</a>";
    else
      o << "<a href='" << esc(dir) << "/report.html'>report</a> · <a href='" << esc(dir) << "/summary.json'>summary</a> · <a href='"
        << esc(dir) << ".log'>log</a>";
    o << "</td></tr>";
  }
  o << "</table>";
}

}  // namespace ab_page

std::string ab_html(const nlohmann::json& ab) {
  using namespace ab_page;
  std::ostringstream o;
  head(o, ab);
  verdicts(o, ab);
  basis(o, ab);
  failures(o, ab);
  memory(o, ab);
  pinned(o, ab);
  waits(o, ab);
  speed(o, ab);
  curves(o, ab, "loss_curves", "loss");
  curves(o, ab, "grad_norm_curves", "grad norm");
  runs(o, ab);
  o << "</body></html>\n";
  return o.str();
}

}  // namespace zrepro
