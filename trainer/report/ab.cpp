// See ab.h.
#include "trainer/report/ab.h"

#include "trainer/report/gpu_fidelity.h"
#include "trainer/report/summary.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "device/base/errors.h"
#include "device/device_memory.h"
#include "trainer/report/html_report.h"
#include "zero/schedule/stage_policy.h"

namespace zrepro {

using json = nlohmann::json;

namespace {


std::string fixed(double v, int prec) {
  if (!std::isfinite(v)) return "-";
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", prec, v);
  return b;
}

std::string bytes(double b) { return std::isfinite(b) ? format_bytes(static_cast<int64_t>(b)) : "-"; }

// Memory figures of a row from the peak of the highest rank, the lowest rank's peak and
// the capacity (0: none).
void memory_figures(double hi, double lo, double cap, const json& cats, json& row) {
  row["capacity_bytes"] = std::isfinite(cap) && cap > 0 ? json(cap) : json(nullptr);
  row["peak_bytes_max"] = std::isfinite(hi) ? json(hi) : json(nullptr);
  row["peak_bytes_spread"] = std::isfinite(hi) ? json(hi - lo) : json(nullptr);
  row["peak_share_of_capacity"] = std::isfinite(hi) && cap > 0 ? json(hi / cap) : json(nullptr);
  row["by_category"] = cats;
}

// [Note: a verdict at target scale says what it rests on] A scale-down toy keeps each
// memory category's share of capacity only as well as its shapes allow (scale_down.h:
// the planner's share of every category in the target and in the toy). A row of a
// scaled-down run carries both "at target" figures - the planner's for the target, and
// the toy's measured peak times the parameter factor beside it - and the fidelity: the
// category whose toy share is furthest from the target's, in percentage points. Past
// kFidelityPoints the verdict says the toy's answer may not hold at target.
constexpr double kFidelityPoints = 5.0;

void target_of(const json& sd, double hi, double cap, json& row) {
  const double f = number_or(sd.value("parameter_factor", json()));
  row["target_peak_bytes_max"] = std::isfinite(hi) ? json(hi * f) : json(nullptr);
  row["target_capacity_bytes"] = std::isfinite(cap) ? json(cap * f) : json(nullptr);
  const json planned = sd.value("target_planned", json());
  row["target_planned_peak_bytes"] = planned.is_object() ? planned.value("peak_bytes", json()) : json(nullptr);
  row["target_planned_verdict"] = planned.is_object() ? planned.value("verdict", json()) : json(nullptr);
  row["target_model"] = sd.value("target_model", json()).is_object() ? sd["target_model"].value("name", json()) : json(nullptr);
  row["target_band"] = sd.value("target_band", json());  // [Note: a verdict inside the band]
  json worst;
  for (const auto& r : sd.value("fidelity", json::array())) {
    const double off = 100 * std::abs(number_or(r.value("toy_share", json()), 0) - number_or(r.value("target_share", json()), 0));
    if (worst.is_null() || off > worst["off_points"].get<double>())
      worst = {{"category", r.value("category", "?")}, {"toy_share", r.value("toy_share", json())},
               {"target_share", r.value("target_share", json())}, {"off_points", off}};
  }
  row["fidelity_worst"] = worst;
  row["fidelity_ok"] = worst.is_object() ? json(worst["off_points"].get<double>() <= kFidelityPoints) : json(nullptr);
}

// What a verdict on a scaled-down side rests on: the planner's figure at target with the
// toy's beside it, and the fidelity of the toy's shares (empty when no scale-down).
std::string target_basis(const json& row) {
  if (!row.value("fidelity_worst", json()).is_object()) return "";
  const json& w = row["fidelity_worst"];
  const double cap = number_or(row.value("target_capacity_bytes", json()));
  std::string s = "; " + row["side"].get<std::string>() + " at target";
  if (row.value("target_model", json()).is_string()) s += " (" + row["target_model"].get<std::string>() + ")";
  const double planned = number_or(row.value("target_planned_peak_bytes", json())), toy = number_or(row.value("target_peak_bytes_max", json()));
  if (cap > 0 && std::isfinite(planned))
    s += ": planned peak " + fixed(100 * planned / cap, 0) + "% of capacity" +
         (std::isfinite(toy) ? " (the toy measured " + fixed(100 * toy / cap, 0) + "%)" : "");
  const json band = row.value("target_band", json());
  if (band.is_object()) {
    const BandCall call = BandCall::from_json(band);
    s += "; " + call.text();
  }
  const double off = w["off_points"].get<double>();
  s += ", scale-down fidelity: ";
  if (row.value("fidelity_ok", false))
    s += "every category within " + fixed(kFidelityPoints, 0) + " points of the target's share (worst " +
         w["category"].get<std::string>() + ", " + fixed(off, 1) + ")";
  else
    s += w["category"].get<std::string>() + " off by " + fixed(off, 0) + " points (toy " +
         fixed(100 * number_or(w["toy_share"]), 0) + "% vs target " + fixed(100 * number_or(w["target_share"]), 0) +
         "% of capacity): the toy's verdict may not hold at target";
  return s;
}

// Memory of a run: the per-rank peaks (max and spread), the capacity, the categories
// of the rank that peaked highest, and the same at target scale after a scale-down.
void memory_of(const Summary& s, json& row) {
  double cap = NAN, hi = NAN, lo = NAN;
  json cats;
  if (s.memory) {
    cap = s.memory->device_capacity_bytes ? static_cast<double>(*s.memory->device_capacity_bytes) : NAN;
    for (const auto& r : s.memory->ranks) {
      const double p = static_cast<double>(r.peak_bytes);
      if (!std::isfinite(hi) || p > hi) hi = p, cats = r.by_category;
      if (!std::isfinite(lo) || p < lo) lo = p;
    }
  }
  memory_figures(hi, lo, cap, cats, row);
  if (s.scale_down.is_object()) target_of(s.scale_down, hi, cap, row);
  // The caching allocator's cache flushes per step, the most any rank had: DeepSpeed's
  // "high memory pressure" ([Note: allocator retries], device/caching_pool.cpp).
  int64_t retries = 0;
  if (s.memory)
    for (const auto& r : s.memory->ranks) retries = std::max(retries, r.alloc_retries);
  row["alloc_retries_per_step"] =
      s.memory && !s.steps.empty() ? json(static_cast<double>(retries) / static_cast<double>(s.steps.size())) : json(nullptr);
}

// Rank 0's offload figures (the offload block keeps its builder's JSON, summary.h).
void offload_of(const Summary& s, json& row) {
  if (!s.offload.is_object() || !s.offload.contains("ranks") || s.offload["ranks"].empty()) return;
  const json& r0 = s.offload["ranks"][0];
  row["device_busy_fraction"] = r0.value("device_busy_fraction", json());
  row["overlap_ratio"] = r0.value("overlap_ratio", json());
  // What the device spent waiting on the host link per step: bytes over a modelled link,
  // so it does not move with the CPU's speed the way a busy fraction does.
  const json exposed = r0.value("exposed_s", json());
  row["offload_wait_s_per_step"] =
      exposed.is_number() && !s.steps.empty() ? json(exposed.get<double>() / s.steps.size()) : json(nullptr);
}

// Time of a run: median step, tokens/s, each part's share of the accounted time, the
// offload overlap of rank 0 and the largest per-rank collective wait.
void add_time_of(const Summary& s, json& row) {
  if (!s.time) return;
  const SummaryTime& t = *s.time;
  row["step_s_median"] = json_of(t.step_s_median);
  row["tokens_per_s"] = json_of(t.tokens_per_s);
  double total = 0;
  for (const auto& [k, v] : t.breakdown_s) total += v;
  for (const char* k : {"comm_wait", "offload_copy", "data_wait"}) {
    const auto it = t.breakdown_s.find(k);
    row[std::string(k) + "_share"] = total > 0 ? json((it == t.breakdown_s.end() ? 0 : it->second) / total) : json(nullptr);
  }
  double wait_max = NAN;
  for (const auto& r : t.ranks) wait_max = std::isfinite(wait_max) ? std::max(wait_max, r.comm_wait_s) : r.comm_wait_s;
  row["comm_wait_s_max"] = std::isfinite(wait_max) ? json(wait_max) : json(nullptr);
  row["straggler_rank"] = t.straggler.is_object() ? t.straggler.value("rank", json()) : json(nullptr);
  offload_of(s, row);
}

// What ab.html draws of a run besides the row's figures: every rank's peak by category,
// the plan's peak beside it, the factor to target scale, the failure as the run wrote
// it and each rank's collective wait.
void page_figures_of(const Summary& s, json& row) {
  json ranks = json::array();
  if (s.memory)
    for (const auto& r : s.memory->ranks)
      ranks.push_back({{"rank", r.rank}, {"peak_bytes", r.peak_bytes}, {"peak_phase", r.peak_phase},
                       {"by_category", r.by_category}, {"host_pinned_bytes", r.host_pinned_bytes}});
  row["rank_memory"] = ranks;
  row["device"] = s.device ? json(*s.device) : json(nullptr);
  const json planned = s.memory ? s.memory->planned : json();
  row["planned_peak_bytes"] = planned.is_object() ? planned.value("peak_bytes", json()) : json(nullptr);
  row["parameter_factor"] = s.scale_down.is_object() ? s.scale_down.value("parameter_factor", json()) : json(nullptr);
  if (s.failure && !s.failure->kind.empty()) {
    const SummaryFailure& f = *s.failure;
    json fj = {{"kind", f.kind}, {"rank", f.rank}, {"message", f.message}, {"hint", f.hint}};
    for (const char* k : {"needed_bytes", "memlock_limit_bytes", "locked_bytes"})
      if (f.details.contains(k)) fj[k] = f.details[k];
    // A hang: where each rank waits (the side's report.html has the whole table).
    const json hang = f.details.value("hang", json());
    if (hang.is_object()) {
      json hr = json::array();
      for (const auto& r : hang.value("ranks", json::array()))
        hr.push_back({{"rank", r.value("rank", json())}, {"waiting_in", r.value("waiting_in", json())},
                      {"waiting_seq", r.value("waiting_seq", json())}, {"last_completed", r.value("last_completed", json())},
                      {"idle_s", r.value("idle_s", json())}});
      fj["hang_ranks"] = hr;
      fj["hang_suspects"] = hang.value("suspects", json::array());
    }
    row["failure"] = fj;
  }
  json waits = json::array();
  if (s.time)
    for (const auto& r : s.time->ranks) waits.push_back({{"rank", r.rank}, {"comm_wait_s", r.comm_wait_s}, {"step_s", r.step_s}});
  row["rank_time"] = waits;
  // The emulated links a timing verdict rests on (null: this machine's own speed).
  row["host_link_gbps"] = s.offload.is_object() ? s.offload.value("host_link_gbps", json()) : json(nullptr);
  row["interconnect_busbw_gbps"] = s.comm && s.comm->modelled_busbw_GBps ? json(*s.comm->modelled_busbw_GBps) : json(nullptr);
}

// A plan's row (`zrepro plan --json`, MemoryPlan::to_json): its verdict and figures.
void plan_row(const json& p, json& row) {
  row["status"] = p.value("verdict", "?") == "oom" ? "oom (planned)" : "fits (planned)";
  row["phase"] = p.value("oom_phase", json());
  const double peak = number_or(p.value("peak_bytes", json()));
  memory_figures(peak, peak, number_or(p.value("device_capacity_bytes", json())), p.value("by_category", json()), row);
}

json row_of(const AbRun& r, bool plan_only) {
  json row = {{"side", r.side}, {"ranks", r.ranks}, {"exit_code", r.exit_code}, {"log", r.log}};
  if (plan_only ? r.plan.is_null() : !r.summary) {
    row["status"] = "no summary";
    return row;
  }
  if (plan_only) {
    plan_row(r.plan, row);
    return row;
  }
  const Summary& s = *r.summary;
  row["status"] = s.status;
  row["phase"] = s.failure && !s.failure->kind.empty() ? json(s.failure->phase) : json(nullptr);
  row["checkpoint"] = s.failure && !s.failure->kind.empty() ? json(s.failure->checkpoint) : json(nullptr);
  row["failed_ranks"] = r.failed_ranks;
  row["steps"] = s.steps.size();
  row["final_loss"] = s.steps.empty() ? json(nullptr) : json_of(s.steps.back().loss);
  add_time_of(s, row);
  memory_of(s, row);
  page_figures_of(s, row);
  return row;
}

bool failed(const AbRun& r, bool plan_only) {
  if (plan_only) return r.exit_code != 0;
  return r.exit_code != 0 || !r.summary;
}

std::string describe_failure(const json& row) {
  std::string s = row["status"].get<std::string>();
  if (row.value("phase", json()).is_string()) s += " in " + row["phase"].get<std::string>();
  const json fr = row.value("failed_ranks", json());
  const int ranks = row["ranks"].get<int>();
  if (fr.is_number() && ranks > 1)
    s += fr.get<int>() == ranks ? " on every rank" : " on " + std::to_string(fr.get<int>()) + " of " + std::to_string(ranks) + " ranks";
  return s + " (exit " + std::to_string(row["exit_code"].get<int>()) + ")";
}

std::string describe_fit(const json& row) {
  std::string s = "runs through";
  if (row.value("peak_share_of_capacity", json()).is_number())
    s += ", peak " + fixed(100 * row["peak_share_of_capacity"].get<double>(), 0) + "% of capacity";
  return s;
}

std::string losses_clause(const json& ra, const json& rb, bool a_fail, bool b_fail, double loss_diff) {
  std::string v;
  if (std::isfinite(loss_diff))
    v += "; losses " + (loss_diff <= 1e-6 ? std::string("equal within 1e-6") : "differ by up to " + fixed(loss_diff, 8));
  else
    v += "; no common steps to compare losses";
  const double ta = number_or(ra.value("step_s_median", json())), tb = number_or(rb.value("step_s_median", json()));
  if (!a_fail && !b_fail && ta > 0 && tb > 0) v += "; B's step time " + fixed(tb / ta, 2) + "x A's";
  return v;
}

// The verdict of one rank count when the symptom is a failure (or a refused config).
std::string failure_verdict(const json& ra, const json& rb, bool a_fail, bool b_fail, double loss_diff, bool plan_only) {
  std::string v = std::to_string(ra["ranks"].get<int>()) + " rank(s): ";
  v += a_fail ? "A reproduces: " + describe_failure(ra) : "A " + describe_fit(ra);
  v += "; ";
  if (b_fail)
    v += "B does not fix it: " + describe_failure(rb);
  else
    v += std::string("B ") + (a_fail ? "fixes it: " : "") + describe_fit(rb);
  if (!plan_only) v += losses_clause(ra, rb, a_fail, b_fail, loss_diff);
  return v;
}

// A measured symptom (slower, less, more, differs): A's figure against B's.
struct Measured {
  bool a_shows = false, b_fails = false;
  std::string line;
};

Measured measured_verdict(const Expectation& e, const AbRun& a, const AbRun& b, const json& ra, const json& rb) {
  Measured m;
  m.line = std::to_string(ra["ranks"].get<int>()) + " rank(s): ";
  m.b_fails = failed(b, false);
  if (failed(a, false) || m.b_fails) {
    m.line += failed(a, false) ? "A fails (" + describe_failure(ra) + "), not the expected symptom" : "A runs through";
    if (m.b_fails) m.line += "; B does not run through: " + describe_failure(rb);
    return m;
  }
  const std::string want = e.kind == Expectation::Kind::differs ? "> " + fixed(e.factor, 6) + " relative"
                           : e.kind == Expectation::Kind::less  ? "<= " + fixed(e.factor, 2) + "x B's"
                           : e.kind == Expectation::Kind::present ? "above 0, B's 0"
                                                                : ">= " + fixed(e.factor, 2) + "x B's";
  std::string figure;
  const double x = number_or(ra.value(e.key, json())), y = number_or(rb.value(e.key, json()));  // row figures
  if (e.kind == Expectation::Kind::present) {
    m.a_shows = x > 0 && y == 0;
    figure = e.key + " " + fixed(x, 4) + " vs B's " + fixed(y, 4) + " (expected " + want + ")";
  } else if (e.kind == Expectation::Kind::differs) {
    const double d = max_step_rel_diff(a.summary->steps, b.summary->steps, e.key);
    m.a_shows = std::isfinite(d) && d > e.factor;
    figure = e.key + " differs from B's by up to " + fixed(d, 6) + " relative (expected " + want + ")";
  } else {
    const double ratio = y != 0 ? x / y : NAN;
    // A share under 1% on both sides is no symptom, whatever its ratio (1e-6 vs 1e-7).
    const bool negligible = e.key.size() > 6 && e.key.compare(e.key.size() - 6, 6, "_share") == 0 && std::max(x, y) < 0.01;
    m.a_shows = std::isfinite(ratio) && !negligible &&
                (e.kind == Expectation::Kind::less ? ratio <= e.factor : ratio >= e.factor);
    figure = e.key + " " + fixed(x, 4) + " vs B's " + fixed(y, 4) + " = " + fixed(ratio, 2) + "x (expected " + want + ")";
  }
  m.line += (m.a_shows ? "A reproduces: " : "A does not show it: ") + figure + "; B " + (m.a_shows ? "fixes it: " : "") +
            describe_fit(rb);
  return m;
}

std::string table(const json& rows) {
  std::ostringstream os;
  char line[400];
  std::snprintf(line, sizeof line, "  %-4s %5s  %-16s %-9s %-11s %10s %6s %10s %12s %9s %9s %6s %6s %10s\n", "side",
                "ranks", "status", "exit", "phase", "peak max", "%cap", "spread", "target plan", "step s", "tok/s",
                "comm%", "copy%", "loss");
  os << line;
  for (const auto& r : rows) {
    auto pct = [&](const char* k) {
      return r.value(k, json()).is_number() ? fixed(100 * r[k].get<double>(), 0) : std::string("-");
    };
    std::snprintf(line, sizeof line, "  %-4s %5d  %-16s %-9d %-11s %10s %6s %10s %12s %9s %9s %6s %6s %10s\n",
                  r["side"].get<std::string>().c_str(), r["ranks"].get<int>(), r["status"].get<std::string>().c_str(),
                  r["exit_code"].get<int>(), r.value("phase", json()).is_string() ? r["phase"].get<std::string>().c_str() : "-",
                  bytes(number_or(r.value("peak_bytes_max", json()))).c_str(), pct("peak_share_of_capacity").c_str(),
                  bytes(number_or(r.value("peak_bytes_spread", json()))).c_str(),
                  bytes(number_or(r.value("target_planned_peak_bytes", json()))).c_str(),
                  fixed(number_or(r.value("step_s_median", json())), 4).c_str(),
                  fixed(number_or(r.value("tokens_per_s", json())), 0).c_str(), pct("comm_wait_share").c_str(),
                  pct("offload_copy_share").c_str(), fixed(number_or(r.value("final_loss", json())), 5).c_str());
    os << line;
  }
  return os.str();
}

// [Note: equivalence between rank counts] With the same global batch, N ranks give the
// losses of one rank up to reduction order, and each model state the stage shards is
// divided by the rank ratio while the others stay (zero/schedule/stage_policy.h).
// Persistent stage-3 parameters and padding keep this from being exact: 5% is allowed.
json equivalence(const AbRun& base, const AbRun& r, std::string& line) {
  json e = {{"side", r.side}, {"ranks", {base.ranks, r.ranks}}};
  const std::string head = r.side + " " + std::to_string(base.ranks) + " -> " + std::to_string(r.ranks) + " ranks: ";
  if (base.exit_code != 0 || r.exit_code != 0 || !base.summary || !r.summary) {
    line = head + "not compared (a run failed)";
    e["holds"] = nullptr;
    return e;
  }
  bool holds = true;
  const Summary &s0 = *base.summary, &s1 = *r.summary;
  const json g0 = s0.batch ? json(s0.batch->global) : json(nullptr), g1 = s1.batch ? json(s1.batch->global) : json(nullptr);
  if (g0 == g1) {
    const double tol = s0.precision.value_or("fp32") == "fp32" ? 1e-5 : 2e-2;  // 16-bit: rounding of a different reduction order
    const double d = max_step_rel_diff(s0.steps, s1.steps, "loss");
    e["max_loss_rel_diff"] = std::isfinite(d) ? json(d) : json(nullptr);
    holds = std::isfinite(d) && d <= tol;
    line = head + (holds ? "losses equal within " + fixed(tol, 6) : "losses differ by up to " + fixed(d, 8));
  } else {
    line = head + "global batch " + g0.dump() + " vs " + g1.dump() + ", losses not comparable";
  }
  const StagePolicy policy = stage_policy(static_cast<int>(s0.zero_stage.value_or(0)));
  const std::pair<const char*, ModelState> cats[] = {{"params", ModelState::parameters},
                                                     {"grads", ModelState::gradients},
                                                     {"optimizer_states", ModelState::optimizer_states}};
  json states = json::object();
  line += "; per-rank";
  for (const auto& [cat, state] : cats) {
    auto state_bytes = [&](const Summary& s) {
      const SummaryRankMemory* m = s.rank_memory(0);
      const auto it = m ? m->model_states.find(cat) : SummaryCategories::const_iterator{};
      return m && it != m->model_states.end() ? static_cast<double>(it->second) : 0.0;
    };
    const double m0 = state_bytes(s0), m1 = state_bytes(s1);
    const double expected = policy.shards(state) ? m0 * base.ranks / r.ranks : m0;
    const bool ok = std::abs(m1 - expected) <= 0.05 * expected + 64;
    holds = holds && ok;
    states[cat] = {{"measured", m1}, {"expected", expected}, {"holds", ok}};
    line += std::string(" ") + cat + " x" + fixed(m0 > 0 ? m1 / m0 : 1.0, 2) + (ok ? "" : " (expected x" + fixed(m0 > 0 ? expected / m0 : 1.0, 2) + ")");
  }
  line += std::string(holds ? ": as " : ": NOT as ") + "the equivalence rules predict for stage " + std::to_string(policy.stage);
  e["model_states"] = states;
  e["holds"] = holds;
  return e;
}

// Scaling: each side's tokens/s at rank count i against its first, per rank.
Measured scaling_verdict(const Expectation& e, const AbRun& a0, const AbRun& a, const AbRun& b0, const AbRun& b) {
  Measured m;
  m.line = std::to_string(a.ranks) + " rank(s): ";
  m.b_fails = failed(b, false) || failed(b0, false);
  if (failed(a, false) || failed(a0, false) || m.b_fails) {
    m.line += "not compared (a run failed)";
    return m;
  }
  auto efficiency = [&](const AbRun& base, const AbRun& r, std::string& text) {
    auto tokens_per_s = [](const AbRun& x) { return x.summary->time ? x.summary->time->tokens_per_s.value_or(NAN) : NAN; };
    const double t0 = tokens_per_s(base), t1 = tokens_per_s(r);
    const double speedup = t0 > 0 ? t1 / t0 : NAN, eff = speedup / (static_cast<double>(r.ranks) / base.ranks);
    text = fixed(speedup, 2) + "x the tokens/s of " + std::to_string(base.ranks) + " rank(s), efficiency " +
           fixed(eff, 2);
    return eff;
  };
  std::string ta, tb;
  const double ea = efficiency(a0, a, ta), eb = efficiency(b0, b, tb);
  m.a_shows = std::isfinite(ea) && ea < e.factor;
  m.b_fails = !(std::isfinite(eb) && eb >= e.factor);
  const std::string want = " (expected < " + fixed(e.factor, 2) + ")";
  m.line += (m.a_shows ? "A reproduces: " : "A does not show it: ") + ta + want + "; B " +
            (m.b_fails ? "does not fix it: " : "fixes it: ") + tb;
  return m;
}

}  // namespace

// ---- public

const std::vector<std::string>& ab_metric_keys() {
  static const std::vector<std::string> keys = {
      "step_s_median",      "tokens_per_s",         "comm_wait_share", "offload_copy_share", "data_wait_share",
      "comm_wait_s_max",    "device_busy_fraction", "overlap_ratio",   "offload_wait_s_per_step",
      "peak_bytes_max",     "alloc_retries_per_step"};
  return keys;
}

namespace {

std::vector<std::string> split_colons(const std::string& text) {
  std::vector<std::string> parts;
  for (size_t at = 0;;) {
    const size_t c = text.find(':', at);
    parts.push_back(text.substr(at, c == std::string::npos ? std::string::npos : c - at));
    if (c == std::string::npos) return parts;
    at = c + 1;
  }
}

// less/more name a row figure: one of ab_metric_keys, or ConfigError listing them.
const std::string& metric_key(const std::string& text, const std::string& key) {
  const auto& keys = ab_metric_keys();
  if (std::find(keys.begin(), keys.end(), key) != keys.end()) return key;
  std::string all;
  for (const auto& x : keys) all += (all.empty() ? "" : ", ") + x;
  throw ConfigError("--expect \"" + text + "\": unknown figure \"" + key + "\" (expected one of " + all + ")");
}

}  // namespace

Expectation parse_expectation(const std::string& text) {
  const char* forms =
      "failure, refused, slower:R, less:KEY:R, more:KEY:R, present:KEY, scaling:E or differs:loss|grad_norm:TOL";
  const std::vector<std::string> parts = split_colons(text);
  Expectation e;
  e.text = text;
  auto factor = [&](const std::string& v) {
    char* end = nullptr;
    const double f = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || !(f > 0))
      throw ConfigError("--expect \"" + text + "\": \"" + v + "\" is not a positive number (expected " + forms + ")");
    return f;
  };
  using Kind = Expectation::Kind;
  const std::string& k = parts[0];
  if ((k == "failure" || k == "refused") && parts.size() == 1) {
    e.kind = k == "failure" ? Kind::failure : Kind::refused;
  } else if (k == "slower" && parts.size() == 2) {
    e.kind = Kind::more, e.key = "step_s_median", e.factor = factor(parts[1]);
  } else if ((k == "less" || k == "more") && parts.size() == 3) {
    e.kind = k == "less" ? Kind::less : Kind::more, e.key = metric_key(text, parts[1]), e.factor = factor(parts[2]);
  } else if (k == "present" && parts.size() == 2) {
    e.kind = Kind::present, e.key = metric_key(text, parts[1]);
  } else if (k == "scaling" && parts.size() == 2) {
    e.kind = Kind::scaling, e.key = "tokens_per_s", e.factor = factor(parts[1]);
  } else if (k == "differs" && parts.size() == 3 && (parts[1] == "loss" || parts[1] == "grad_norm")) {
    e.kind = Kind::differs, e.key = parts[1], e.factor = factor(parts[2]);
  } else {
    throw ConfigError("--expect: got \"" + text + "\", expected " + forms);
  }
  return e;
}

// How a run that left no summary ended: its exit status, and for a signal what usually
// sends it.
std::string no_summary(const AbRun& r) {
  std::string s = r.side + " ended without its summary (exit " + std::to_string(r.exit_code);
  if (r.exit_code > 128) {
    const int sig = r.exit_code - 128;
    s += ": signal " + std::to_string(sig) +
         (sig == 9 ? ", SIGKILL: the kernel's OOM killer or a kill -9" : sig == 11 ? ", SIGSEGV: a crash" : "");
  }
  return s + "; its log: " + (r.log.empty() ? "none" : r.log) + ")";
}

namespace {

// One rank count's judgement: does A show the symptom, does B fail, the verdict line,
// and whether a side left no summary to judge.
struct PairVerdict {
  bool a_shows = false, b_fails = false, incomplete = false;
  std::string line;
};

PairVerdict judge_pair(const std::vector<AbRun>& a, const std::vector<AbRun>& b, size_t i, const json& ra,
                       const json& rb, double loss_diff, bool plan_only, const Expectation& e) {
  PairVerdict v;
  // [Note: a run without its summary] A side that ended without writing summary.json
  // (killed, crashed) is not a reproduction of anything: zrepro writes the summary on
  // every failure it can see, so its absence means the comparison could not be made.
  const AbRun* lost = plan_only ? nullptr : !a[i].summary ? &a[i] : !b[i].summary ? &b[i] : nullptr;
  // [Note: an interrupted side shows nothing] A side stopped from outside (SIGTERM or SIGINT
  // from a scheduler or a user, or a rank killed under it: its peers stop "interrupted") ended
  // before its own symptom could show or not: neither "A reproduces" nor "B fixes" rests on it.
  const AbRun* stopped = plan_only || lost                       ? nullptr
                         : a[i].summary->status == "interrupted" ? &a[i]
                         : b[i].summary->status == "interrupted" ? &b[i]
                                                                 : nullptr;
  if (lost) {
    v.incomplete = true;
    v.line = std::to_string(a[i].ranks) + " rank(s): no comparison: " + no_summary(*lost);
  } else if (stopped) {
    v.incomplete = true;
    const std::string why = stopped->summary->failure ? stopped->summary->failure->message : std::string("interrupted");
    v.line = std::to_string(a[i].ranks) + " rank(s): no comparison: " + stopped->side + " was interrupted before its "
             "outcome (exit " + std::to_string(stopped->exit_code) + ": " + why + "; its log: " +
             (stopped->log.empty() ? "none" : stopped->log) + "); rerun it";
  } else if (e.kind == Expectation::Kind::failure || e.kind == Expectation::Kind::refused) {
    v.a_shows = e.kind == Expectation::Kind::refused ? a[i].exit_code == kExitBadInput : failed(a[i], plan_only);
    v.b_fails = failed(b[i], plan_only);
    v.line = failure_verdict(ra, rb, v.a_shows, v.b_fails, loss_diff, plan_only) + target_basis(ra) + target_basis(rb);
  } else {
    const Measured m = e.kind != Expectation::Kind::scaling ? measured_verdict(e, a[i], b[i], ra, rb)
                       : i == 0 ? Measured{false, failed(b[0], false),
                                           std::to_string(a[0].ranks) + " rank(s): the base of the scaling comparison"}
                                : scaling_verdict(e, a[0], a[i], b[0], b[i]);
    v.a_shows = m.a_shows, v.b_fails = m.b_fails, v.line = m.line + target_basis(ra) + target_basis(rb);
  }
  return v;
}

// Whether a scaled-down side's target margin is inside the planner's band.
bool inside_band(const json& row) {
  const json band = row.value("target_band", json());
  return band.is_object() && band.value("inside_band", false);
}

// Every run's per-step losses or grad norms, for ab.html's curves.
json step_curves(const std::vector<AbRun>& a, const std::vector<AbRun>& b, bool grad_norm) {
  json curves = json::object();
  for (const auto* side : {&a, &b})
    for (const AbRun& r : *side) {
      json values = json::array();
      if (r.summary)
        for (const SummaryStep& st : r.summary->steps) values.push_back(json_of(grad_norm ? st.grad_norm : st.loss));
      curves[r.side + " x" + std::to_string(r.ranks)] = values;
    }
  return curves;
}

}  // namespace

AbResult compare_ab(const std::vector<AbRun>& a, const std::vector<AbRun>& b, bool plan_only, const Expectation& e) {
  AbResult out;
  json rows = json::array(), pairs = json::array();
  bool any_a_shows = false, any_unfixed = false, incomplete = false, any_inside = false;
  const bool by_failure = e.kind == Expectation::Kind::failure || e.kind == Expectation::Kind::refused;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const json ra = row_of(a[i], plan_only), rb = row_of(b[i], plan_only);
    const bool both = !plan_only && a[i].summary && b[i].summary;
    const double dl = both ? max_step_rel_diff(a[i].summary->steps, b[i].summary->steps, "loss") : NAN;
    const double dg = both ? max_step_rel_diff(a[i].summary->steps, b[i].summary->steps, "grad_norm") : NAN;
    const PairVerdict v = judge_pair(a, b, i, ra, rb, dl, plan_only, e);
    out.verdicts.push_back(v.line);
    incomplete = incomplete || v.incomplete;
    any_a_shows = any_a_shows || v.a_shows;
    any_unfixed = any_unfixed || (v.a_shows && v.b_fails) || (!by_failure && v.b_fails);
    const bool inside = inside_band(ra) || inside_band(rb);
    any_inside = any_inside || inside;
    rows.push_back(ra);
    rows.push_back(rb);
    pairs.push_back({{"ranks", a[i].ranks},
                     {"a_shows_symptom", v.a_shows},
                     {"b_fails", v.b_fails},
                     {"max_loss_rel_diff", std::isfinite(dl) ? json(dl) : json(nullptr)},
                     {"max_grad_norm_rel_diff", std::isfinite(dg) ? json(dg) : json(nullptr)},
                     {"target_inside_band", inside},
                     {"verdict", v.line}});
  }
  json equiv = json::array();
  for (const auto* side : {&a, &b})
    for (size_t i = 1; i < side->size() && !plan_only; ++i) {
      std::string line;
      equiv.push_back(equivalence(side->front(), (*side)[i], line));
      equiv.back()["line"] = line;
      out.verdicts.push_back(line);
    }
  out.exit_code = incomplete ? kExitInternal : any_unfixed ? kExitAbNotFixed : any_a_shows ? kExitOk : kExitAbNoFailure;
  // [Note: a verdict inside the band]: a margin at target inside the planner's band against
  // real DeepSpeed is not called; the toy's outcome stands, and says so.
  std::string outcome = incomplete ? "incomplete" : any_unfixed ? "not fixed" : any_a_shows ? "fixed" : "nothing to fix";
  if (any_inside && !incomplete) outcome += " on the toy; at target inside the planner's band, not called";
  out.table = table(rows);
  out.json = {{"plan_only", plan_only}, {"expect", e.text},  {"outcome", outcome},  {"exit_code", out.exit_code},
              {"rows", rows},           {"comparisons", pairs}, {"equivalence", equiv},
              {"loss_curves", step_curves(a, b, false)}, {"grad_norm_curves", step_curves(a, b, true)}};
  return out;
}

}  // namespace zrepro
