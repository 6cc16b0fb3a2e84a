// See html_report.h.
#include "trainer/report/html_report.h"

#include "device/device_memory.h"
#include "trainer/report/hang.h"
#include "trainer/report/svg_chart.h"

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

std::string html_bytes(const json& v) {
  return v.is_number() ? format_bytes(static_cast<int64_t>(v.get<double>())) : "–";
}

double number_or(const json& v, double fallback) { return v.is_number() ? v.get<double>() : fallback; }

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

std::string bytes(const json& v) { return html_bytes(v); }

// A fraction as a percentage ("42.0%"); "–" for a missing figure.
std::string pct(const json& v) {
  if (!v.is_number()) return "–";
  char b[32];
  std::snprintf(b, sizeof b, "%.1f%%", 100 * v.get<double>());
  return b;
}


// Loss per step on honest axes (svg_chart.h); skipped steps as red dots at their loss.
std::string loss_svg(const std::vector<SummaryStep>& steps) {
  Series loss{"loss", {}, "#1565c0"}, skipped{"skipped step", {}, "#c62828"};
  for (const auto& s : steps) {
    if (!s.loss) continue;
    loss.points.push_back({static_cast<double>(s.step), *s.loss});
    if (s.skipped) skipped.points.push_back({static_cast<double>(s.step), *s.loss});
  }
  std::vector<Series> series{loss};
  if (!skipped.points.empty()) {
    skipped.dots_only = true;
    series.push_back(skipped);
  }
  return line_chart(series, {"loss per step", "optimizer step", "loss", 640, 240});
}

const char* const kCategories[] = {"params", "grads", "optimizer_states", "activations", "comm_buffers", "other"};

// A category's bytes at a rank's peak (0 when not reported).
int64_t category(const SummaryRankMemory& r, const char* name) {
  const auto it = r.by_category.find(name);
  return it == r.by_category.end() ? 0 : it->second;
}

// One stacked bar per rank: categories at the rank's peak, against the capacity.
// factor: the scale-down's parameter factor (bars at target scale), 1 otherwise.
std::string memory_svg(const SummaryMemory& memory, double factor) {
  std::vector<BarRow> rows;
  const auto plan = memory.plan();
  const double planned = plan ? static_cast<double>(plan->peak_bytes) : -1;
  for (const auto& r : memory.ranks) {
    BarRow b{"rank " + std::to_string(r.rank), std::to_string(r.rank), {}, planned, false};
    for (const char* c : kCategories) b.segments.push_back({c, factor * static_cast<double>(category(r, c))});
    b.marker = planned >= 0 ? factor * planned : -1;
    rows.push_back(b);
  }
  return stacked_bars(rows, {"memory per rank", factor * static_cast<double>(memory.device_capacity_bytes.value_or(0)),
                             "planned peak (zrepro plan)", 760});
}

// Every rank's own view of a multi-process failure.
void views_section(std::ostringstream& o, const SummaryRankViews& v) {
  o << "<h2>Every rank's view</h2><table><tr><th>rank</th><th>status</th><th>phase</th><th>allocated</th>"
    << "<th>capacity</th><th>message</th></tr>";
  for (const auto& r : v.ranks)
    o << "<tr><td>" << r.rank << "</td><td>" << esc(r.status) << "</td><td>" << esc(str(json_of(r.phase)))
      << "</td><td>" << bytes(json_of(r.allocated_bytes)) << "</td><td>" << bytes(json_of(r.capacity_bytes))
      << "</td><td>" << esc(str(json_of(r.message))) << "</td></tr>";
  o << "</table>";
  if (!v.without_a_view.empty())
    o << "<p>No summary from rank(s) " << esc(json(v.without_a_view).dump()) << ": they ended (mpirun stops the "
      << "others once one rank fails) before writing theirs, or did not fail.</p>";
}

// A hang's suspects and where every rank stands in its collectives (failure.hang, hang.h).
void hang_section(std::ostringstream& o, const HangDiagnosis& h) {
  if (!h.suspects.empty()) {
    o << "<h2>Hang suspects, most likely first</h2><ol>";
    for (const auto& x : h.suspects) o << "<li>rank " << x.rank << ": " << esc(x.evidence) << "</li>";
    o << "</ol>";
  }
  o << "<h2>Collectives per rank at the hang</h2><table><tr><th>rank</th><th>flight dump</th>"
    << "<th>last completed</th><th>waits in</th><th>idle before the newest activity</th></tr>";
  for (const auto& r : h.ranks) {
    auto at = [](int64_t seq, const std::string& what) {
      return seq < 0 ? std::string("–") : "#" + std::to_string(seq) + " " + esc(what.empty() ? "–" : what);
    };
    o << "<tr><td>" << r.rank << "</td><td>" << (r.dumped ? "yes" : "<b>none</b>") << "</td><td>"
      << at(r.last_completed_seq, r.last_completed) << "</td><td>" << at(r.waiting_seq, r.waiting_in) << "</td><td>"
      << (r.dumped ? str(json(r.idle_s)) + " s" : "–") << "</td></tr>";
  }
  o << "</table>";
}

// The failure box; with several ranks, each rank's own view and, for a hang, the suspects
// and where every rank stands in its collectives.
void failure_section(std::ostringstream& o, const SummaryFailure& f) {
  if (!f.kind.empty())
    o << "<div class='fail'><b>" << esc(f.kind) << "</b> on rank " << f.rank << " in phase " << esc(f.phase)
      << " (diagnosis checkpoint: " << esc(f.checkpoint) << ")<p>" << esc(f.message) << "</p><p><b>Hint:</b> "
      << esc(f.hint) << "</p></div>";
  if (f.views) views_section(o, *f.views);
  if (const auto hang = hang_in(f.details)) hang_section(o, *hang);
}

// Each rank's peak by category, the columns that are zero on every rank left out.
void memory_section(std::ostringstream& o, const SummaryMemory& m, double factor) {
  static const char* labels[] = {"params", "grads", "optimizer", "activations", "comm buffers", "other"};
  std::vector<int> shown;
  for (int c = 0; c < 6; ++c)
    if (std::any_of(m.ranks.begin(), m.ranks.end(), [&](const SummaryRankMemory& r) { return category(r, kCategories[c]) != 0; }))
      shown.push_back(c);
  // The caching allocator's figures, where it was emulated (or on CUDA): reserved beside
  // allocated, and the cache flushes ([Note: allocator retries]).
  const bool caching = std::any_of(m.ranks.begin(), m.ranks.end(), [](const SummaryRankMemory& r) {
    return r.peak_reserved_bytes > r.peak_bytes || r.alloc_retries > 0;
  });
  o << "<h2>Device memory at each rank's peak</h2>";
  if (factor != 1)
    o << "<p>Bars at target scale (the toy's bytes x " << str(json(factor)) << "); the table: the toy's own bytes.</p>";
  o << memory_svg(m, factor) << "<table><tr><th>rank</th><th>peak</th>"
    << "<th>of capacity</th><th>phase</th>";
  if (caching) o << "<th>reserved peak</th><th>cache flushes</th>";
  for (int c : shown) o << "<th>" << labels[c] << "</th>";
  o << "</tr>";
  const int64_t cap = m.device_capacity_bytes.value_or(0);
  int64_t flushes = 0;
  for (const auto& r : m.ranks) {
    const json share = cap != 0 ? json(static_cast<double>(r.peak_bytes) / cap) : json(nullptr);
    o << "<tr><td>" << r.rank << "</td><td>" << bytes(json(r.peak_bytes)) << "</td><td>" << pct(share) << "</td><td>"
      << esc(r.peak_phase) << "</td>";
    if (caching) o << "<td>" << bytes(json(r.peak_reserved_bytes)) << "</td><td>" << r.alloc_retries << "</td>";
    for (int c : shown) o << "<td>" << bytes(json(category(r, kCategories[c]))) << "</td>";
    o << "</tr>";
    flushes = std::max(flushes, r.alloc_retries);
  }
  o << "</table>";
  if (flushes > 0)
    o << "<p class=\"warn\">The caching allocator flushed its cache and retried " << flushes
      << " time(s) on the rank with the most: memory pressure, the last sign before an OOM (DeepSpeed's ZeRO-3 "
         "warns \"pytorch allocator cache flushes since last step\"; on a GPU each flush synchronises the device). "
         "A smaller micro-batch or expandable segments remove it (scenario allocator-pressure).</p>";
  if (const auto pl = m.plan())
    o << "<p>Planner (zrepro plan) for this run: peak " << bytes(pl->peak_bytes) << " in phase " << esc(pl->peak_phase)
      << ", verdict " << esc(pl->verdict) << ".</p>";
}

void scale_down_section(std::ostringstream& o, const SummaryScaleDown& sd) {
  o << "<h2>Scale-down fidelity (share of capacity at the peak, planned)</h2><p>target " << esc(sd.target_name) << " ("
    << sd.target_params << " params), verdict " << esc(sd.target_planned.verdict) << "; toy " << sd.toy_params
    << " params, factor " << str(json(sd.parameter_factor)) << "</p><table><tr><th>category</th><th>target</th>"
    << "<th>toy</th></tr>";
  for (const auto& r : sd.fidelity)
    o << "<tr><td>" << esc(r.category) << "</td><td>" << pct(r.target_share) << "</td><td>" << pct(r.toy_share)
      << "</td></tr>";
  o << "</table>";
}

void offload_section(std::ostringstream& o, const SummaryOffload& off) {
  o << "<h2>Offload (host link " << str(json_of(off.host_link_gbps)) << " GB/s modelled)</h2><table><tr>"
    << "<th>rank</th><th>down</th><th>up</th><th>copy s</th><th>waited s</th><th>overlapped</th>"
    << "<th>device busy</th><th>pinned host</th><th>pageable host</th></tr>";
  for (const auto& r : off.ranks)
    o << "<tr><td>" << r.rank << "</td><td>" << bytes(r.d2h_bytes) << "</td><td>" << bytes(r.h2d_bytes) << "</td><td>"
      << str(json(r.copy_s)) << "</td><td>" << str(json(r.exposed_s)) << "</td><td>" << pct(json_of(r.overlap_ratio))
      << "</td><td>" << pct(json_of(r.device_busy_fraction)) << "</td><td>" << bytes(r.host_pinned_bytes) << "</td><td>"
      << bytes(r.host_pageable_bytes) << "</td></tr>";
  o << "</table>";
}

// --save-every / --resume / --zero-to-fp32 (summary.json "checkpoint"): what was saved,
// what the run resumed from, the offline consolidation and the host memory each put on rank 0.
void checkpoint_section(std::ostringstream& o, const SummaryCheckpoint& ck) {
  o << "<h2>Checkpoints (" << esc(ck.format) << ")</h2><table><tr><th>saved after step</th><th>folder</th>"
    << "<th>seconds</th><th>16-bit model on rank 0's host</th></tr>";
  for (const auto& c : ck.saved)
    o << "<tr><td>" << c.step << "</td><td>" << esc(c.folder) << "</td><td>" << str(json(c.seconds)) << "</td><td>"
      << bytes(c.consolidated_16bit_host_bytes) << "</td></tr>";
  o << "</table>";
  if (ck.resumed)
    o << "<p>Resumed from " << esc(ck.resumed->folder) << " (tag " << esc(ck.resumed->tag) << ", " << ck.resumed->step
      << " steps done" << (ck.resumed->universal ? ", universal checkpoint: any world size" : "") << ").</p>";
  if (const auto& z = ck.zero_to_fp32)
    o << "<p>zero_to_fp32 (" << esc(z->mode) << ") of " << esc(z->tag) << ": " << z->files
      << " file(s); DeepSpeed's anonymous host memory at its peak " << bytes(z->peak_anon_host_bytes) << ", beside "
      << bytes(z->mapped_bytes) << " of mapped fp32 partitions (file-backed).</p>";
}

// Rank 0's collectives per step; ops never called are left out, and so is the table
// when none was (one rank).
void comm_section(std::ostringstream& o, const std::map<std::string, SummaryCommOp>& ops) {
  std::ostringstream rows;
  for (const auto& [op, v] : ops) {
    if (v.calls_per_step == 0) continue;
    rows << "<tr><td>" << op << "</td><td>" << str(json(v.calls_per_step)) << "</td><td>" << bytes(v.bytes_per_step)
         << "</td><td>" << str(json(v.seconds_per_step)) << "</td><td>" << str(json_of(v.algbw_GBps)) << "</td><td>"
         << str(json_of(v.busbw_GBps)) << "</td></tr>";
  }
  if (rows.str().empty()) return;
  o << "<h2>Collectives (rank 0, per step)</h2><table><tr><th>op</th><th>calls</th><th>bytes</th><th>seconds</th>"
    << "<th>algbw GB/s</th><th>busbw GB/s</th></tr>" << rows.str() << "</table>";
}

// Median step, throughput and the parts of the run's time that were not zero, with
// their share of the accounted time.
void time_section(std::ostringstream& o, const SummaryTime& t) {
  o << "<h2>Time</h2><table><tr><th>median step (s)</th><td>" << str(json_of(t.step_s_median)) << "</td><td></td></tr>"
    << "<tr><th>tokens/s</th><td>" << str(json_of(t.tokens_per_s)) << "</td><td></td></tr>";
  double total = 0;
  for (const auto& [k, v] : t.breakdown_s) total += v;
  for (const auto& [k, v] : t.breakdown_s)
    if (v != 0)
      o << "<tr><th>" << k << " (s, whole run)</th><td>" << str(json(v)) << "</td><td>"
        << pct(json(total > 0 ? v / total : 0)) << "</td></tr>";
  o << "</table>";
}

void config_section(std::ostringstream& o, const std::vector<SummaryConfigEntry>& entries) {
  o << "<h2>Effective DeepSpeed config</h2><details><summary>every value with its source</summary><table>"
    << "<tr><th>key</th><th>value</th><th>source</th></tr>";
  for (const auto& e : entries)
    o << "<tr><td>" << esc(e.key) << "</td><td>" << esc(str(e.value)) << "</td><td>" << esc(e.source)
      << (e.note ? ": " + esc(*e.note) : "") << "</td></tr>";
  o << "</table></details>";
}

// The run's identity: the job, the model, virtual ranks and the batch.
void job_table(std::ostringstream& o, const Summary& s) {
  o << "<table>";
  const std::pair<const char*, json> job[] = {{"world_size", json_of(s.world_size)},
                                              {"zero_stage", json_of(s.zero_stage)},
                                              {"precision", json_of(s.precision)},
                                              {"device", json_of(s.device)}};
  for (const auto& [k, v] : job) o << "<tr><th>" << k << "</th><td>" << esc(str(v)) << "</td></tr>";
  if (const auto m = s.model_sizes())
    o << "<tr><th>model</th><td>" << esc(m->name) << ": " << m->params << " params, " << m->layers << " layers, hidden "
      << m->hidden << ", seq " << m->seq << "</td></tr>";
  if (const auto v = s.virtual_figures())
    o << "<tr><th>ranks</th><td>" << v->world_size << " virtual ranks in one process, reported as rank " << v->as_rank
      << ", data rule " << esc(v->data_rule) << " (" << esc(v->note) << ")</td></tr>";
  if (s.batch)
    o << "<tr><th>batch</th><td>micro " << s.batch->micro << " x gas " << s.batch->grad_accum << " = global "
      << s.batch->global << "</td></tr>";
  o << "</table>";
}

// A scaled-down run's parameter factor (its figures at target scale), else 1.
double scale_factor(const Summary& s) {
  const auto sd = s.scaled();
  return sd ? sd->parameter_factor : 1;
}

// [Note: phase windows] drawn: rank 0's memory per step and phase by category, at
// target scale after a scale-down (the toy's bytes x the parameter factor, the toy's
// figure in each column's tooltip), with the capacity, the planned peak and the peak.
void timeline_section(std::ostringstream& o, const Summary& s) {
  const SummaryMemory& m = *s.memory;
  if (m.timeline.empty()) return;
  const double f = scale_factor(s);
  std::vector<Column> cols;
  for (const auto& p : m.timeline) {
    Column c{"step " + std::to_string(p.step) + " " + p.phase + ": " + format_bytes(static_cast<int64_t>(f * p.peak_bytes)) +
                 (f != 1 ? " at target (the toy: " + format_bytes(p.peak_bytes) + ")" : "") + (p.unfinished ? ", failed here" : ""),
             p.step, {}, p.unfinished};
    for (const char* cat : kCategories) {
      const auto it = p.by_category.find(cat);
      c.segments.push_back({cat, f * static_cast<double>(it == p.by_category.end() ? 0 : it->second)});
    }
    cols.push_back(c);
  }
  double planned = -1;
  const auto sd = s.scaled();
  const auto own = s.planned();
  if (f != 1 && sd)
    planned = static_cast<double>(sd->target_planned.peak_bytes);
  else if (f == 1 && own)
    planned = static_cast<double>(own->peak_bytes);
  o << "<h2>Memory over the run (rank 0" << (f != 1 ? ", at target scale: the toy's bytes x " + str(json(f)) : "") << ")</h2>"
    << stacked_columns(cols, {"memory over the run", f * static_cast<double>(m.device_capacity_bytes.value_or(0)), planned, 860, 300});
}

// Grad norm, learning rate, loss scale (when it moved) and step time per step.
void steps_section(std::ostringstream& o, const std::vector<SummaryStep>& steps) {
  Series norm{"grad norm", {}, "#2e7d32"}, lr{"learning rate", {}, "#6a1b9a"}, scale{"loss scale", {}, "#ef6c00"},
      time{"step time (s)", {}, "#00838f"};
  bool scale_moved = false;
  for (const auto& st : steps) {
    const double x = static_cast<double>(st.step);
    if (st.grad_norm) norm.points.push_back({x, *st.grad_norm});
    lr.points.push_back({x, st.lr});
    scale.points.push_back({x, st.loss_scale});
    scale_moved = scale_moved || st.loss_scale != steps.front().loss_scale;
    if (st.step_s) time.points.push_back({x, *st.step_s});
  }
  o << "<h2>Over the steps</h2>";
  for (const Series* sr : {&norm, &lr, &time})
    if (!sr->points.empty()) o << line_chart({*sr}, {sr->name + " per step", "optimizer step", sr->name, 430, 200, sr == &time});
  if (scale_moved) o << line_chart({scale}, {"loss scale per step", "optimizer step", "loss scale", 430, 200});
}

void lanes_section(std::ostringstream& o, const std::vector<Lane>& lanes, bool failed) {
  if (lanes.empty()) return;
  o << "<h2>Where each rank spends its time</h2><p>" << (failed ? "Up to the failure" : "The last two steps")
    << ": per rank the compute stream (grey data, blue forward, purple backward, green step), its collectives "
       "(orange; red and dashed: never completed) and offload's copies (teal). A rank named in red failed. "
       "trace.json has every span (ui.perfetto.dev).</p>"
    << swimlanes(lanes, {"where each rank spends its time", 860});
}

}  // namespace

std::set<int> failing_ranks(const Summary& s) {
  std::set<int> out;
  if (!s.failure || s.failure->kind.empty()) return out;
  if (s.failure->views)
    for (const auto& v : s.failure->views->ranks)
      if (v.status != "ok") out.insert(v.rank);
  if (out.empty()) out.insert(s.failure->rank);
  return out;
}

std::string html_report(const Summary& s, const std::vector<Lane>& lanes) {
  std::ostringstream o;
  const bool ok = s.status == "ok";
  o << "<!doctype html><html><head><meta charset='utf-8'><title>zrepro report: " << esc(s.status) << "</title>"
    << "<style>body{font-family:sans-serif;margin:24px;max-width:900px}svg.chart{display:inline-block;margin-right:8px}table{border-collapse:collapse}"
    << "td,th{border:1px solid #ddd;padding:3px 8px;font-size:13px;text-align:left}"
    << ".status{display:inline-block;padding:4px 10px;border-radius:4px;color:#fff;background:"
    << (ok ? "#2e7d32" : "#c62828") << "}.fail{border:2px solid #c62828;padding:10px;margin:12px 0}.warn{border-left:4px solid #ef6c00;padding:6px 10px}</style></head><body>"
    << "<h1>zrepro run <span class='status'>" << esc(s.status) << "</span></h1>";
  job_table(o, s);
  if (s.failure) failure_section(o, *s.failure);
  if (!ok) lanes_section(o, lanes, true);  // a failure: where each rank stood, next to it
  if (!s.steps.empty()) {
    o << "<h2>Loss</h2>";
    if (const auto data = s.data_figures())
      o << "<p>A perfect model reaches " << str(json(data->entropy_floor_nats)) << " nats on this data; red dots: "
        << "skipped (overflow) steps.</p>";
    o << loss_svg(s.steps);
  }
  if (s.memory) memory_section(o, *s.memory, scale_factor(s));
  if (s.memory) timeline_section(o, s);
  if (!s.steps.empty()) steps_section(o, s.steps);
  if (ok) lanes_section(o, lanes, false);
  // Offload and scale-down through their views ([Note: typed views of module-owned parts]).
  if (const auto sd = s.scaled()) scale_down_section(o, *sd);
  if (const auto off = s.offloaded()) offload_section(o, *off);
  if (const auto ck = s.checkpoints()) checkpoint_section(o, *ck);
  if (s.comm) comm_section(o, s.comm->op_figures());
  if (s.time && s.time->step_s_median) time_section(o, *s.time);  // no table of dashes for a run that never stepped
  if (s.effective_config.is_object()) config_section(o, s.config_entries());
  o << "</body></html>\n";
  return o.str();
}

}  // namespace zrepro
