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
void memory_figures(double hi, double lo, double cap, std::optional<SummaryCategories> cats, AbRow& row) {
  row.capacity_bytes = std::isfinite(cap) && cap > 0 ? std::optional<double>(cap) : std::nullopt;
  row.peak_bytes_max = finite_value(hi);
  row.peak_bytes_spread = finite_value(hi - lo);
  row.peak_share_of_capacity = std::isfinite(hi) && cap > 0 ? std::optional<double>(hi / cap) : std::nullopt;
  row.by_category = std::move(cats);
}

// [Note: a verdict at target scale says what it rests on] A scale-down toy keeps each
// memory category's share of capacity only as well as its shapes allow (scale_down.h:
// the planner's share of every category in the target and in the toy). A row of a
// scaled-down run carries both "at target" figures - the planner's for the target, and
// the toy's measured peak times the parameter factor beside it - and the fidelity: the
// category whose toy share is furthest from the target's, in percentage points. Past
// kFidelityPoints the verdict says the toy's answer may not hold at target.
constexpr double kFidelityPoints = 5.0;

void target_of(const SummaryScaleDown& sd, double hi, double cap, AbRow& row) {
  const double f = sd.parameter_factor;
  if (std::isfinite(hi)) row.target_peak_bytes_max = hi * f;
  if (std::isfinite(cap)) row.target_capacity_bytes = cap * f;
  row.target_planned_peak_bytes = static_cast<double>(sd.target_planned.peak_bytes);
  row.target_planned_verdict = sd.target_planned.verdict;
  row.target_model = sd.target_name;
  for (const auto& l : sd.limits) {
    if (l.target_need <= 0) continue;  // nothing to compare at target (a shard size, nothing gathered)
    const std::string t = l.flag + ": " + format_bytes(l.target_need) + " needed of " + format_bytes(l.target_limit) +
                          " at target scale (" + (l.fits_at_target ? "within it" : "past it") + ")";
    row.target_limits = row.target_limits ? *row.target_limits + "; " + t : t;
  }
  if (sd.target_band.is_object()) row.target_band = BandCall::from_json(sd.target_band);
  for (const auto& r : sd.fidelity) {
    const double off = 100 * std::abs(r.toy_share - r.target_share);
    if (!row.fidelity_worst || off > row.fidelity_worst->off_points)
      row.fidelity_worst = AbFidelityWorst{r.category, r.toy_share, r.target_share, off};
  }
  if (row.fidelity_worst) row.fidelity_ok = row.fidelity_worst->off_points <= kFidelityPoints;
}

double value_or_nan(const std::optional<double>& v) { return v.value_or(NAN); }

// What a verdict on a scaled-down side rests on: the planner's figure at target with the
// toy's beside it, and the fidelity of the toy's shares (empty when no scale-down).
std::string target_basis(const AbRow& row) {
  if (!row.fidelity_worst) return "";
  const AbFidelityWorst& w = *row.fidelity_worst;
  const double cap = value_or_nan(row.target_capacity_bytes);
  std::string s = "; " + row.side + " at target";
  if (row.target_model) s += " (" + *row.target_model + ")";
  const double planned = value_or_nan(row.target_planned_peak_bytes), toy = value_or_nan(row.target_peak_bytes_max);
  if (cap > 0 && std::isfinite(planned))
    s += ": planned peak " + fixed(100 * planned / cap, 0) + "% of capacity" +
         (std::isfinite(toy) ? " (the toy measured " + fixed(100 * toy / cap, 0) + "%)" : "");
  if (row.target_band) s += "; " + row.target_band->text();
  if (row.target_limits) s += "; " + *row.target_limits;
  s += ", scale-down fidelity: ";
  if (row.fidelity_ok.value_or(false))
    s += "every category within " + fixed(kFidelityPoints, 0) + " points of the target's share (worst " + w.category +
         ", " + fixed(w.off_points, 1) + ")";
  else
    s += w.category + " off by " + fixed(w.off_points, 0) + " points (toy " + fixed(100 * value_or_nan(w.toy_share), 0) +
         "% vs target " + fixed(100 * value_or_nan(w.target_share), 0) + "% of capacity): the toy's verdict may not hold at target";
  return s;
}

// Memory of a run: the per-rank peaks (max and spread), the capacity, the categories
// of the rank that peaked highest, and the same at target scale after a scale-down.
void memory_of(const Summary& s, AbRow& row) {
  double cap = NAN, hi = NAN, lo = NAN;
  std::optional<SummaryCategories> cats;
  int64_t retries = 0;
  if (s.memory) {
    cap = s.memory->device_capacity_bytes ? static_cast<double>(*s.memory->device_capacity_bytes) : NAN;
    for (const auto& r : s.memory->ranks) {
      const double p = static_cast<double>(r.peak_bytes);
      if (!std::isfinite(hi) || p > hi) hi = p, cats = r.by_category;
      if (!std::isfinite(lo) || p < lo) lo = p;
      retries = std::max(retries, r.alloc_retries);
    }
  }
  memory_figures(hi, lo, cap, cats, row);
  if (const auto sd = s.scaled()) target_of(*sd, hi, cap, row);
  // The caching allocator's cache flushes per step, the most any rank had: DeepSpeed's
  // "high memory pressure" ([Note: allocator retries], device/caching_pool.cpp).
  if (s.memory && !s.steps.empty()) row.alloc_retries_per_step = static_cast<double>(retries) / static_cast<double>(s.steps.size());
}

// Rank 0's offload figures.
void offload_of(const Summary& s, AbRow& row) {
  const auto off = s.offloaded();
  if (!off || off->ranks.empty()) return;
  const SummaryOffloadRank& r0 = off->ranks[0];
  row.device_busy_fraction = r0.device_busy_fraction;
  row.overlap_ratio = r0.overlap_ratio;
  // What the device spent waiting on the host link per step: bytes over a modelled link,
  // so it does not move with the CPU's speed the way a busy fraction does.
  if (!s.steps.empty()) row.offload_wait_s_per_step = r0.exposed_s / static_cast<double>(s.steps.size());
}

// Time of a run: median step, tokens/s, each part's share of the accounted time, the
// offload overlap of rank 0 and the largest per-rank collective wait.
void add_time_of(const Summary& s, AbRow& row) {
  if (!s.time) return;
  const SummaryTime& t = *s.time;
  row.step_s_median = t.step_s_median;
  row.tokens_per_s = t.tokens_per_s;
  double total = 0;
  for (const auto& [k, v] : t.breakdown_s) total += v;
  auto share = [&](const char* k) {
    const auto it = t.breakdown_s.find(k);
    return total > 0 ? std::optional<double>((it == t.breakdown_s.end() ? 0 : it->second) / total) : std::nullopt;
  };
  row.comm_wait_share = share("comm_wait");
  row.offload_copy_share = share("offload_copy");
  row.data_wait_share = share("data_wait");
  for (const auto& r : t.ranks) row.comm_wait_s_max = std::max(row.comm_wait_s_max.value_or(r.comm_wait_s), r.comm_wait_s);
  if (t.straggler) row.straggler_rank = t.straggler->rank;
  offload_of(s, row);
}

// A failing side's failure as its summary wrote it, with its kind's figures.
AbFailure failure_of(const SummaryFailure& f) {
  AbFailure out;
  out.kind = f.kind, out.rank = f.rank, out.message = f.message, out.hint = f.hint;
  out.needed_bytes = optional_of<int64_t>(f.details, "needed_bytes");
  out.memlock_limit_bytes = optional_of<int64_t>(f.details, "memlock_limit_bytes");
  out.locked_bytes = optional_of<int64_t>(f.details, "locked_bytes");
  out.hang = hang_in(f.details);
  return out;
}

// What ab.html draws of a run besides the row's figures: every rank's peak by category,
// the plan's peak beside it, the factor to target scale, the failure as the run wrote
// it and each rank's collective wait.
void page_figures_of(const Summary& s, AbRow& row) {
  if (s.memory)
    for (const auto& r : s.memory->ranks)
      row.rank_memory.push_back({r.rank, r.peak_bytes, r.peak_phase, r.by_category, r.host_pinned_bytes});
  row.device = s.device;
  if (const auto p = s.planned()) row.planned_peak_bytes = static_cast<double>(p->peak_bytes);
  if (const auto sd = s.scaled()) row.parameter_factor = sd->parameter_factor;
  if (s.failure && !s.failure->kind.empty()) row.failure = failure_of(*s.failure);
  if (s.time) row.rank_time = s.time->ranks;
  // The emulated links a timing verdict rests on (null: this machine's own speed).
  if (const auto off = s.offloaded()) row.host_link_gbps = off->host_link_gbps;
  if (s.comm) row.interconnect_busbw_gbps = s.comm->modelled_busbw_GBps;
}

// A plan's row (`zrepro plan --json`, MemoryPlan::to_json): its verdict and figures.
void plan_row(const SummaryPlanned& p, AbRow& row) {
  row.status = p.verdict == "oom" ? "oom (planned)" : "fits (planned)";
  row.phase = p.oom_phase;
  const double peak = static_cast<double>(p.peak_bytes);
  memory_figures(peak, peak, p.device_capacity_bytes ? static_cast<double>(*p.device_capacity_bytes) : NAN, p.by_category, row);
}

AbRow row_of(const AbRun& r, bool plan_only) {
  AbRow row;
  row.side = r.side, row.ranks = r.ranks, row.exit_code = r.exit_code, row.log = r.log;
  if (plan_only ? r.plan.is_null() : !r.summary) {
    row.status = "no summary";
    return row;
  }
  if (plan_only) {
    plan_row(SummaryPlanned::from_json(r.plan), row);
    return row;
  }
  const Summary& s = *r.summary;
  row.status = s.status;
  const bool failure = s.failure && !s.failure->kind.empty();
  if (failure) row.phase = s.failure->phase, row.checkpoint = s.failure->checkpoint;
  row.failed_ranks = r.failed_ranks;
  row.steps = static_cast<int64_t>(s.steps.size());
  if (!s.steps.empty()) row.final_loss = s.steps.back().loss;
  add_time_of(s, row);
  memory_of(s, row);
  page_figures_of(s, row);
  return row;
}

bool failed(const AbRun& r, bool plan_only) {
  if (plan_only) return r.exit_code != 0;
  return r.exit_code != 0 || !r.summary;
}

std::string describe_failure(const AbRow& row) {
  std::string s = row.status;
  if (row.phase) s += " in " + *row.phase;
  if (row.failed_ranks && row.ranks > 1)
    s += *row.failed_ranks == row.ranks ? " on every rank"
                                        : " on " + std::to_string(*row.failed_ranks) + " of " + std::to_string(row.ranks) + " ranks";
  return s + " (exit " + std::to_string(row.exit_code) + ")";
}

std::string describe_fit(const AbRow& row) {
  std::string s = "runs through";
  if (row.peak_share_of_capacity) s += ", peak " + fixed(100 * *row.peak_share_of_capacity, 0) + "% of capacity";
  return s;
}

std::string losses_clause(const AbRow& ra, const AbRow& rb, bool a_fail, bool b_fail, double loss_diff) {
  std::string v;
  if (std::isfinite(loss_diff))
    v += "; losses " + (loss_diff <= 1e-6 ? std::string("equal within 1e-6") : "differ by up to " + fixed(loss_diff, 8));
  else
    v += "; no common steps to compare losses";
  const double ta = value_or_nan(ra.step_s_median), tb = value_or_nan(rb.step_s_median);
  if (!a_fail && !b_fail && ta > 0 && tb > 0) v += "; B's step time " + fixed(tb / ta, 2) + "x A's";
  return v;
}

// The verdict of one rank count when the symptom is a failure (or a refused config).
std::string failure_verdict(const AbRow& ra, const AbRow& rb, bool a_fail, bool b_fail, double loss_diff, bool plan_only) {
  std::string v = std::to_string(ra.ranks) + " rank(s): ";
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

Measured measured_verdict(const Expectation& e, const AbRun& a, const AbRun& b, const AbRow& ra, const AbRow& rb) {
  Measured m;
  m.line = std::to_string(ra.ranks) + " rank(s): ";
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
  const double x = value_or_nan(ra.figure(e.key)), y = value_or_nan(rb.figure(e.key));  // row figures
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

std::string table(const std::vector<AbRow>& rows) {
  std::ostringstream os;
  char line[400];
  std::snprintf(line, sizeof line, "  %-4s %5s  %-16s %-9s %-11s %10s %6s %10s %12s %9s %9s %6s %6s %10s\n", "side",
                "ranks", "status", "exit", "phase", "peak max", "%cap", "spread", "target plan", "step s", "tok/s",
                "comm%", "copy%", "loss");
  os << line;
  for (const auto& r : rows) {
    auto pct = [](const std::optional<double>& v) { return v ? fixed(100 * *v, 0) : std::string("-"); };
    std::snprintf(line, sizeof line, "  %-4s %5d  %-16s %-9d %-11s %10s %6s %10s %12s %9s %9s %6s %6s %10s\n",
                  r.side.c_str(), r.ranks, r.status.c_str(), r.exit_code, r.phase ? r.phase->c_str() : "-",
                  bytes(value_or_nan(r.peak_bytes_max)).c_str(), pct(r.peak_share_of_capacity).c_str(),
                  bytes(value_or_nan(r.peak_bytes_spread)).c_str(), bytes(value_or_nan(r.target_planned_peak_bytes)).c_str(),
                  fixed(value_or_nan(r.step_s_median), 4).c_str(), fixed(value_or_nan(r.tokens_per_s), 0).c_str(),
                  pct(r.comm_wait_share).c_str(), pct(r.offload_copy_share).c_str(), fixed(value_or_nan(r.final_loss), 5).c_str());
    os << line;
  }
  // A scaled-down side mixes two scales in one row: say which column is which.
  for (const auto& r : rows)
    if (r.target_model) {
      os << "  (scale-down: peak max and spread are the toy's bytes, %cap its share, the same at target; target plan is "
            "the planner's peak at target scale ("
         << *r.target_model << "); step s and tok/s are the toy's own compute, not the target's throughput)\n";
      break;
    }
  return os.str();
}

// [Note: equivalence between rank counts] With the same global batch, N ranks give the
// losses of one rank up to reduction order, and each model state the stage shards is
// divided by the rank ratio while the others stay (zero/schedule/stage_policy.h).
// Persistent stage-3 parameters and padding keep this from being exact: 5% is allowed.
// The model states of the larger rank count against the first's, each divided by the rank
// ratio where the stage shards it; `holds` (the losses' verdict) and false where one moved
// past 5%, the line ending with the whole verdict.
bool model_states_scale(const AbRun& base, const AbRun& r, bool holds, AbEquivalence& e) {
  const Summary &s0 = *base.summary, &s1 = *r.summary;
  const StagePolicy policy = stage_policy(static_cast<int>(s0.zero_stage.value_or(0)));
  const std::pair<const char*, ModelState> cats[] = {{"params", ModelState::parameters},
                                                     {"grads", ModelState::gradients},
                                                     {"optimizer_states", ModelState::optimizer_states}};
  auto state_bytes = [](const Summary& s, const char* cat) {
    const SummaryRankMemory* m = s.rank_memory(0);
    const auto it = m ? m->model_states.find(cat) : SummaryCategories::const_iterator{};
    return m && it != m->model_states.end() ? static_cast<double>(it->second) : 0.0;
  };
  e.line += "; per-rank";
  for (const auto& [cat, state] : cats) {
    const double m0 = state_bytes(s0, cat), m1 = state_bytes(s1, cat);
    const double expected = policy.shards(state) ? m0 * base.ranks / r.ranks : m0;
    const bool ok = std::abs(m1 - expected) <= 0.05 * expected + 64;
    holds = holds && ok;
    e.model_states[cat] = {m1, expected, ok};
    e.line += std::string(" ") + cat + " x" + fixed(m0 > 0 ? m1 / m0 : 1.0, 2) +
              (ok ? "" : " (expected x" + fixed(m0 > 0 ? expected / m0 : 1.0, 2) + ")");
  }
  e.line += std::string(holds ? ": as " : ": NOT as ") + "the equivalence rules predict for stage " + std::to_string(policy.stage);
  return holds;
}

AbEquivalence equivalence(const AbRun& base, const AbRun& r) {
  AbEquivalence e;
  e.side = r.side, e.base_ranks = base.ranks, e.ranks = r.ranks;
  e.line = r.side + " " + std::to_string(base.ranks) + " -> " + std::to_string(r.ranks) + " ranks: ";
  if (base.exit_code != 0 || r.exit_code != 0 || !base.summary || !r.summary) {
    e.line += "not compared (a run failed)";
    return e;
  }
  bool holds = true;
  const Summary &s0 = *base.summary, &s1 = *r.summary;
  const json g0 = s0.batch ? json(s0.batch->global) : json(nullptr), g1 = s1.batch ? json(s1.batch->global) : json(nullptr);
  if (g0 == g1) {
    const double tol = s0.precision.value_or("fp32") == "fp32" ? 1e-5 : 2e-2;  // 16-bit: rounding of a different reduction order
    const double d = max_step_rel_diff(s0.steps, s1.steps, "loss");
    if (std::isfinite(d)) e.max_loss_rel_diff = d;
    holds = std::isfinite(d) && d <= tol;
    e.line += holds ? "losses equal within " + fixed(tol, 6) : "losses differ by up to " + fixed(d, 8);
  } else {
    e.line += "global batch " + g0.dump() + " vs " + g1.dump() + ", losses not comparable";
  }
  e.holds = model_states_scale(base, r, holds, e);
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

namespace expect_forms {

const char* kForms =
    "failure, refused, slower:R, less:KEY:R, more:KEY:R, present:KEY, scaling:E or differs:loss|grad_norm:TOL";

double factor(const std::string& text, const std::string& v) {
  char* end = nullptr;
  const double f = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(f > 0))
    throw ConfigError("--expect \"" + text + "\": \"" + v + "\" is not a positive number (expected " + kForms + ")");
  return f;
}

// One form of --expect: its first word, how many colon-separated parts it takes, and what
// it makes of them.
struct Form {
  const char* word;
  size_t parts;
  void (*read)(const std::string& text, const std::vector<std::string>& parts, Expectation& e);
};

const std::vector<Form>& forms() {
  using Kind = Expectation::Kind;
  using Parts = std::vector<std::string>;
  static const std::vector<Form> f = {
      {"failure", 1, [](const std::string&, const Parts&, Expectation& e) { e.kind = Kind::failure; }},
      {"refused", 1, [](const std::string&, const Parts&, Expectation& e) { e.kind = Kind::refused; }},
      {"slower", 2,
       [](const std::string& t, const Parts& p, Expectation& e) {
         e.kind = Kind::more, e.key = "step_s_median", e.factor = factor(t, p[1]);
       }},
      {"less", 3,
       [](const std::string& t, const Parts& p, Expectation& e) {
         e.kind = Kind::less, e.key = metric_key(t, p[1]), e.factor = factor(t, p[2]);
       }},
      {"more", 3,
       [](const std::string& t, const Parts& p, Expectation& e) {
         e.kind = Kind::more, e.key = metric_key(t, p[1]), e.factor = factor(t, p[2]);
       }},
      {"present", 2,
       [](const std::string& t, const Parts& p, Expectation& e) { e.kind = Kind::present, e.key = metric_key(t, p[1]); }},
      {"scaling", 2,
       [](const std::string& t, const Parts& p, Expectation& e) {
         e.kind = Kind::scaling, e.key = "tokens_per_s", e.factor = factor(t, p[1]);
       }},
      {"differs", 3,
       [](const std::string& t, const Parts& p, Expectation& e) {
         if (p[1] != "loss" && p[1] != "grad_norm") throw ConfigError("--expect: got \"" + t + "\", expected " + kForms);
         e.kind = Kind::differs, e.key = p[1], e.factor = factor(t, p[2]);
       }},
  };
  return f;
}

}  // namespace expect_forms

Expectation parse_expectation(const std::string& text) {
  using namespace expect_forms;
  const std::vector<std::string> parts = split_colons(text);
  Expectation e;
  e.text = text;
  for (const Form& f : forms())
    if (parts[0] == f.word && parts.size() == f.parts) {
      f.read(text, parts, e);
      return e;
    }
  throw ConfigError("--expect: got \"" + text + "\", expected " + kForms);
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

PairVerdict judge_pair(const std::vector<AbRun>& a, const std::vector<AbRun>& b, size_t i, const AbRow& ra,
                       const AbRow& rb, double loss_diff, bool plan_only, const Expectation& e) {
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
bool inside_band(const AbRow& row) { return row.target_band && row.target_band->inside; }

// Every run's per-step losses or grad norms, for ab.html's curves.
AbCurves step_curves(const std::vector<AbRun>& a, const std::vector<AbRun>& b, bool grad_norm) {
  AbCurves curves;
  for (const auto* side : {&a, &b})
    for (const AbRun& r : *side) {
      auto& values = curves[r.side + " x" + std::to_string(r.ranks)];
      if (r.summary)
        for (const SummaryStep& st : r.summary->steps) values.push_back(grad_norm ? st.grad_norm : st.loss);
    }
  return curves;
}

}  // namespace

namespace {

// What the rank counts decided, for the outcome and the exit code.
struct Tally {
  bool a_shows = false, unfixed = false, incomplete = false, inside = false;
};

// One rank count: both rows, the verdict, the comparison, into the document.
void compare_rank_count(const std::vector<AbRun>& a, const std::vector<AbRun>& b, size_t i, bool plan_only,
                        const Expectation& e, AbResult& out, Tally& t) {
  const AbRow ra = row_of(a[i], plan_only), rb = row_of(b[i], plan_only);
  const bool both = !plan_only && a[i].summary && b[i].summary;
  const double dl = both ? max_step_rel_diff(a[i].summary->steps, b[i].summary->steps, "loss") : NAN;
  const double dg = both ? max_step_rel_diff(a[i].summary->steps, b[i].summary->steps, "grad_norm") : NAN;
  const PairVerdict v = judge_pair(a, b, i, ra, rb, dl, plan_only, e);
  const bool by_failure = e.kind == Expectation::Kind::failure || e.kind == Expectation::Kind::refused;
  out.verdicts.push_back(v.line);
  t.incomplete = t.incomplete || v.incomplete;
  t.a_shows = t.a_shows || v.a_shows;
  t.unfixed = t.unfixed || (v.a_shows && v.b_fails) || (!by_failure && v.b_fails);
  AbComparison c;
  c.ranks = a[i].ranks, c.a_shows_symptom = v.a_shows, c.b_fails = v.b_fails, c.verdict = v.line;
  c.target_inside_band = inside_band(ra) || inside_band(rb);
  t.inside = t.inside || c.target_inside_band;
  if (std::isfinite(dl)) c.max_loss_rel_diff = dl;
  if (std::isfinite(dg)) c.max_grad_norm_rel_diff = dg;
  out.doc.rows.push_back(ra);
  out.doc.rows.push_back(rb);
  out.doc.comparisons.push_back(c);
}

}  // namespace

AbResult compare_ab(const std::vector<AbRun>& a, const std::vector<AbRun>& b, bool plan_only, const Expectation& e) {
  AbResult out;
  AbDocument& doc = out.doc;
  doc.plan_only = plan_only, doc.expect = e.text;
  Tally t;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) compare_rank_count(a, b, i, plan_only, e, out, t);
  for (const auto* side : {&a, &b})
    for (size_t i = 1; i < side->size() && !plan_only; ++i) {
      doc.equivalence.push_back(equivalence(side->front(), (*side)[i]));
      out.verdicts.push_back(doc.equivalence.back().line);
    }
  out.exit_code = t.incomplete ? kExitInternal : t.unfixed ? kExitAbNotFixed : t.a_shows ? kExitOk : kExitAbNoFailure;
  // [Note: a verdict inside the band]: a margin at target inside the planner's band against
  // real DeepSpeed is not called; the toy's outcome stands, and says so.
  doc.outcome = t.incomplete ? "incomplete" : t.unfixed ? "not fixed" : t.a_shows ? "fixed" : "nothing to fix";
  if (t.inside && !t.incomplete) doc.outcome += " on the toy; at target inside the planner's band, not called";
  doc.exit_code = out.exit_code;
  out.table = table(doc.rows);
  doc.loss_curves = step_curves(a, b, false);
  doc.grad_norm_curves = step_curves(a, b, true);
  return out;
}

}  // namespace zrepro
