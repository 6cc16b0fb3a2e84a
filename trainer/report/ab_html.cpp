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

std::string esc(const std::string& s) { return html_escape(s); }
std::string text(const std::optional<std::string>& v) { return v ? *v : "–"; }
std::string bytes(const std::optional<double>& v) { return v ? html_bytes(*v) : html_bytes(nullptr); }
std::string fmt(double v, const char* f) {
  if (!std::isfinite(v)) return "–";
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}
double num(const std::optional<double>& v, double fallback = NAN) { return v.value_or(fallback); }

bool failed(const AbRow& row) { return row.exit_code != 0; }
std::string kind(const AbRow& row) { return row.failure ? row.failure->kind : ""; }
// The run's folder beside ab.html ("A_r2"), from its log's name.
std::string run_dir(const AbRow& row) {
  std::string log = row.log.substr(row.log.find_last_of('/') + 1);
  const size_t dot = log.find('.');
  return dot == std::string::npos ? log : log.substr(0, dot);
}

void head(std::ostringstream& o, const AbDocument& ab) {
  const std::string& outcome = ab.outcome;
  const char* colour = outcome == "fixed" ? "#2e7d32" : outcome == "not fixed" ? "#c62828" : "#757575";
  o << "<!doctype html><html><head><meta charset='utf-8'><title>zrepro ab: " << esc(outcome) << "</title><style>"
    << "body{font-family:sans-serif;margin:2em;max-width:78em}table{border-collapse:collapse;margin:.5em 0}"
       "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#eee}td.l{text-align:left}"
       ".v{padding:.5em;margin:.3em 0;background:#f4f4f4;border-left:4px solid #888}"
       ".fail{padding:.5em 1em;margin:.5em 0;background:#fdecea;border-left:4px solid #c62828}"
       ".status{display:inline-block;padding:4px 10px;border-radius:4px;color:#fff;background:"
    << colour << "}.bar{display:inline-block;height:10px;background:#1565c0}</style></head><body>"
    << "<h1>zrepro ab: <span class='status' id='outcome'>" << esc(outcome) << "</span> (exit " << ab.exit_code
    << ")</h1>";
}

void verdicts(std::ostringstream& o, const AbDocument& ab) {
  o << "<section id='verdict'>";
  for (const auto& c : ab.comparisons) o << "<div class='v verdict'>" << esc(c.verdict) << "</div>";
  for (const auto& e : ab.equivalence) o << "<div class='v equivalence'>" << esc(e.line) << "</div>";
  o << "</section>";
}

// The emulated capacity and links of the runs.
void machine_basis(std::ostringstream& o, const AbDocument& ab) {
  for (const auto& r : ab.rows)
    if (r.capacity_bytes) {
      const bool emulated = text(r.device).rfind("cuda", 0) != 0;
      o << "<li>Device memory: " << bytes(r.capacity_bytes) << " per rank ("
        << (emulated ? "emulated on the CPU device: --device-memory" : "the GPU's own capacity") << ", " << esc(r.label())
        << "'s summary)";
      if (r.target_capacity_bytes) o << "; " << bytes(r.target_capacity_bytes) << " at target scale";
      o << ".</li>";
      break;
    }
  for (const auto& r : ab.rows) {
    const double link = num(r.host_link_gbps, 0), bus = num(r.interconnect_busbw_gbps, 0);
    if (link > 0)
      o << "<li>" << esc(r.label()) << ": host link modelled at " << fmt(link, "%.3g")
        << " GB/s (copies take at least bytes / bandwidth; --host-link-gbps or --host-link-profile).</li>";
    if (bus > 0)
      o << "<li>" << esc(r.label()) << ": interconnect modelled at " << fmt(bus, "%.3g") << " GB/s bus bandwidth.</li>";
  }
}

// What the verdict rests on: the expectation, the differences it measured and, for a
// scaled-down side, the fidelity of its toy ([Note: a verdict at target scale says what
// it rests on] in ab.cpp).
void basis(std::ostringstream& o, const AbDocument& ab) {
  o << "<h2>What the verdict rests on</h2><ul id='basis'><li>Expectation <code>" << esc(ab.expect)
    << "</code>: " << (ab.plan_only ? "the planner's figures (no run)" : "measured runs") << ".</li>";
  machine_basis(o, ab);
  for (const auto& c : ab.comparisons)
    o << "<li>" << c.ranks << " rank(s): largest relative difference between A and B over their common steps: loss "
      << fmt(num(c.max_loss_rel_diff), "%.3g") << ", grad norm " << fmt(num(c.max_grad_norm_rel_diff), "%.3g") << ".</li>";
  for (const auto& r : ab.rows) {
    if (!r.fidelity_worst) continue;
    const AbFidelityWorst& w = *r.fidelity_worst;
    o << "<li>" << esc(r.label()) << " ran scaled down (parameters x" << fmt(num(r.parameter_factor), "%.4g") << " to "
      << esc(text(r.target_model)) << "): its worst category, " << esc(w.category) << ", is "
      << fmt(100 * num(w.toy_share), "%.0f") << "% of capacity in the toy against " << fmt(100 * num(w.target_share), "%.0f")
      << "% at target ("
      << (r.fidelity_ok.value_or(false) ? "within 5 points: the verdict holds at target"
                                        : "<b>more than 5 points: the toy's verdict may not hold at target</b>")
      << "); planned at target " << bytes(r.target_planned_peak_bytes) << " (" << esc(text(r.target_planned_verdict))
      << ").</li>";
  }
  o << "</ul>";
}

void failures(std::ostringstream& o, const AbDocument& ab) {
  for (const auto& r : ab.rows) {
    if (!r.failure) continue;
    const AbFailure& f = *r.failure;
    o << "<div class='fail' data-row='" << esc(r.label()) << "'><b>" << esc(r.label()) << ": " << esc(f.kind)
      << "</b> on rank " << f.rank << (r.phase ? " in " + esc(*r.phase) : "") << "<p>" << esc(f.message)
      << "</p><p><b>Hint:</b> " << esc(f.hint) << "</p></div>";
  }
}

// One run's bars: every rank's peak by category (times the parameter factor), or under
// --plan-only the plan's highest rank. False when the run has no device figures.
bool run_bars(const AbRow& r, bool plan_only, std::vector<BarRow>& bars) {
  const double f = num(r.parameter_factor, 1);
  const double planned = num(f != 1 ? r.target_planned_peak_bytes : r.planned_peak_bytes, -1);
  const std::string id = r.side + "-" + std::to_string(r.ranks);
  if (plan_only) {  // the plan's highest rank, by category where it says
    BarRow b{r.label() + " (plan)", id + "-plan", {}, -1, failed(r)};
    if (r.by_category)
      for (const auto& [cat, v] : *r.by_category) b.segments.push_back({cat, static_cast<double>(v)});
    else
      b.segments.push_back({"peak", num(r.peak_bytes_max, 0)});
    bars.push_back(b);
    return true;
  }
  // A run that ended before training (a pinned-memory failure at init) has no device figures.
  bool drawn = false;
  for (const auto& m : r.rank_memory) {
    if (m.peak_bytes <= 0) continue;
    drawn = true;
    BarRow b{r.label() + " rank " + std::to_string(m.rank), id + "-" + std::to_string(m.rank), {}, planned, failed(r)};
    for (const auto& [cat, v] : m.by_category) b.segments.push_back({cat, f * static_cast<double>(v)});
    bars.push_back(b);
  }
  return drawn;
}

// Every rank's peak by category, per rank count, at target scale after a scale-down,
// with the plan's peak as a marker and the capacity as a line.
void memory(std::ostringstream& o, const AbDocument& ab) {
  std::map<int, std::vector<const AbRow*>> by_ranks;
  for (const auto& r : ab.rows) by_ranks[r.ranks].push_back(&r);
  for (const auto& [ranks, rows] : by_ranks) {
    std::vector<BarRow> bars;
    double capacity = 0, factor = 1;
    std::vector<std::string> none;
    for (const AbRow* r : rows) {
      const double f = num(r->parameter_factor, 1);
      factor = std::max(factor, f);
      capacity = std::max(capacity, num(f != 1 ? r->target_capacity_bytes : r->capacity_bytes, 0));
      if (!run_bars(*r, ab.plan_only, bars)) none.push_back(r->label() + (kind(*r).empty() ? "" : " (" + kind(*r) + ")"));
    }
    o << "<h2>Device memory per rank, " << ranks << " rank(s)" << (factor != 1 ? ", at target scale (the toy's bytes x parameter factor)" : "") << "</h2>";
    if (!bars.empty()) o << stacked_bars(bars, {"device memory per rank by category", capacity, "planned peak", 760});
    for (const auto& n : none) o << "<p>" << esc(n) << ": no device memory figures (it ended before training).</p>";
  }
}

// A pinned-memory failure: the bytes offload had to pin against the memlock limit.
void pinned(std::ostringstream& o, const AbDocument& ab) {
  for (const auto& r : ab.rows) {
    if (r.status != "pinned_memory" || !r.failure) continue;
    const AbFailure& f = *r.failure;
    auto as_double = [](const std::optional<int64_t>& v) { return v ? std::optional<double>(static_cast<double>(*v)) : std::nullopt; };
    const double limit = static_cast<double>(f.memlock_limit_bytes.value_or(0));
    o << "<h2>" << esc(r.label()) << ": pinned host memory against the memlock limit</h2>"
      << stacked_bars({{r.label() + " needs", r.label() + "-pinned", {{"pinned (offload)", num(as_double(f.needed_bytes), 0)}}, -1, true}},
                      {"pinned bytes against the memlock limit", limit, "", 760, "memlock limit"})
      << "<p>needed " << bytes(as_double(f.needed_bytes)) << ", memlock limit "
      << (limit > 0 ? bytes(limit) : "unlimited") << ", already locked " << bytes(as_double(f.locked_bytes))
      << " (red line: the limit).</p>";
  }
}

// A hang: where each rank waits.
void waits(std::ostringstream& o, const AbDocument& ab) {
  for (const auto& r : ab.rows) {
    if (kind(r) != "hang" || !r.failure->hang) continue;
    const HangDiagnosis& h = *r.failure->hang;
    o << "<h2>" << esc(r.label()) << ": where each rank waits</h2><table class='hang'><tr><th>rank</th><th>waits in</th>"
      << "<th>last completed</th><th>idle</th></tr>";
    for (const auto& v : h.ranks)
      o << "<tr><td>" << v.rank << "</td><td class='l'>" << (v.waiting_seq < 0 ? "-" : "#" + std::to_string(v.waiting_seq) + " ")
        << esc(v.waiting_in.empty() ? "–" : v.waiting_in) << "</td><td class='l'>"
        << esc(v.last_completed.empty() ? "–" : v.last_completed) << "</td><td>"
        << (v.dumped ? fmt(v.idle_s, "%.1f s") : "–") << "</td></tr>";
    o << "</table>";
    for (const auto& s : h.suspects) o << "<p>suspect: rank " << s.rank << ": " << esc(s.evidence) << "</p>";
  }
}

// Throughput of every run that trained: the figure a slowdown is judged by.
void speed(std::ostringstream& o, const AbDocument& ab) {
  double top = 0;
  for (const auto& r : ab.rows) top = std::max(top, num(r.tokens_per_s, 0));
  if (top <= 0) return;
  o << "<h2>Throughput</h2><table id='speed'><tr><th>run</th><th>tokens/s</th><th></th><th>median step</th>"
    << "<th>comm wait share</th><th>offload wait per step</th></tr>";
  for (const auto& r : ab.rows) {
    const double t = num(r.tokens_per_s);
    o << "<tr><td class='l'>" << esc(r.label()) << "</td><td>" << fmt(t, "%.0f") << "</td><td class='l'>"
      << (std::isfinite(t) ? "<span class='bar' style='width:" + fmt(300 * t / top, "%.0f") + "px'></span>" : "no steps")
      << "</td><td>" << fmt(num(r.step_s_median), "%.4f s") << "</td><td>" << fmt(100 * num(r.comm_wait_share), "%.0f%%")
      << "</td><td>" << fmt(num(r.offload_wait_s_per_step), "%.4f s") << "</td></tr>";
  }
  o << "</table>";
}

void curves(std::ostringstream& o, const AbCurves& all, const char* name) {
  std::vector<Series> series;
  size_t points = 0;
  for (const auto& [run, c] : all) {
    Series s{run, {}, ""};
    for (size_t i = 0; i < c.size(); ++i)
      if (c[i]) s.points.push_back({static_cast<double>(i), *c[i]});
    points += s.points.size();
    series.push_back(s);
  }
  if (points == 0) return;
  o << "<h2>" << name << " per step</h2>" << line_chart(series, {std::string(name) + " per step", "optimizer step", name, 760, 280});
}

void runs(std::ostringstream& o, const AbDocument& ab) {
  o << "<h2>Runs</h2><table id='runs'><tr><th>run</th><th>status</th><th>exit</th><th>phase</th><th>peak (highest rank)</th>"
       "<th>% capacity</th><th>rank spread</th><th>at target: planned (toy x factor)</th><th>final loss</th><th>pages</th></tr>";
  for (const auto& r : ab.rows) {
    const std::string dir = run_dir(r);
    o << "<tr><td class='l'>" << esc(r.label()) << "</td><td>" << esc(r.status) << "</td><td>" << r.exit_code
      << "</td><td>" << esc(text(r.phase)) << "</td><td>" << bytes(r.peak_bytes_max) << "</td><td>"
      << fmt(100 * num(r.peak_share_of_capacity), "%.0f%%") << "</td><td>" << bytes(r.peak_bytes_spread) << "</td><td>"
      << bytes(r.target_planned_peak_bytes) << " (" << bytes(r.target_peak_bytes_max) << ")</td><td>"
      << fmt(num(r.final_loss), "%.5f") << "</td><td class='l'>";
    if (ab.plan_only)
      o << "<a href='" << esc(dir) << ".plan.json'>plan</a>";
    else
      o << "<a href='" << esc(dir) << "/report.html'>report</a> · <a href='" << esc(dir) << "/summary.json'>summary</a> · <a href='"
        << esc(dir) << ".log'>log</a>";
    o << "</td></tr>";
  }
  o << "</table>";
}

}  // namespace ab_page

std::string ab_html(const AbDocument& ab) {
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
  curves(o, ab.loss_curves, "loss");
  curves(o, ab.grad_norm_curves, "grad norm");
  runs(o, ab);
  o << "</body></html>\n";
  return o.str();
}

}  // namespace zrepro
