// See release_figures.h.
#include "trainer/bisect/release_figures.h"

#include <cmath>
#include <cstdio>

namespace zrepro {

using json = nlohmann::json;

namespace {

// The phases and categories of ds_run.py's memory walk that are compared ("other" holds
// the walk's own leftovers: the token tensor, masks; not the engine's).
const char* const kPhases[] = {"init", "boundary"};
const char* const kCategories[] = {"params", "optimizer_states", "grads", "bucket_buffers"};
constexpr double kScalarCommBytes = 1024;

std::optional<double> number(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number()) return std::nullopt;
  return j[key].get<double>();
}

// One step of ds_run.py's record, zrepro's summary or the cache: the same three fields.
StepFigures step_figures(const json& s) {
  StepFigures st;
  st.loss = number(s, "loss").value_or(NAN);
  st.grad_norm = number(s, "grad_norm");
  st.skipped = s.value("skipped", false);
  return st;
}

std::string num(double v, int digits = 7) {
  char b[48];
  std::snprintf(b, sizeof b, "%.*g", digits, v);
  return b;
}

std::string change(double a, double b) {
  if (a == 0) return "";
  char p[32];
  std::snprintf(p, sizeof p, " (%+.1f%%)", (b - a) / std::fabs(a) * 100);
  return p;
}

bool within(double a, double b, double rel) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::fabs(a - b) <= rel * std::max(std::fabs(a), std::fabs(b)) + 1e-12;
}

// A compared figure with numbers on both sides: "step 1 grad norm 1.434 -> 0.7802 (-45.6%)".
// [Note: a release's own spread]: a move smaller than the 16-bit rounding is shown to the
// digits that differ and named a change of rounding.
FigureRow numeric_row(const std::string& figure, double a, double b, const std::string& unit, double rel,
                      double rounding = 0) {
  FigureRow r{figure, a, b, unit, within(a, b, rel), ""};
  const int digits = a != b && num(a) == num(b) ? 17 : 7;
  r.text = figure + " " + num(a, digits) + " -> " + num(b, digits) + (unit.empty() ? "" : " " + unit) + change(a, b);
  const double moved = std::fabs(a - b) / std::max(std::fabs(a), 1e-12);
  if (!r.ok && rounding > 0 && moved < rounding)
    r.text += " (" + num(moved, 3) + " relative: under one unit of 16-bit rounding, " + num(rounding, 3) +
              ": a change of rounding, as a reduction order or an accumulation dtype makes)";
  return r;
}

void compare_maps(const std::map<std::string, double>& a, const std::map<std::string, double>& b, double rel,
                  const std::string& unit, std::vector<FigureRow>& out) {
  for (const auto& [k, va] : a) {
    const auto it = b.find(k);
    out.push_back(numeric_row(k, va, it == b.end() ? 0 : it->second, unit, rel));
  }
  for (const auto& [k, vb] : b)
    if (!a.count(k)) out.push_back(numeric_row(k, 0, vb, unit, rel));
}

// One step's rows: skipped, loss, and the grad norm where both runs applied the step.
void compare_step(size_t i, const StepFigures& x, const StepFigures& y, const Tolerance& tol, std::vector<FigureRow>& out) {
  const std::string step = "step " + std::to_string(i + 1);
  const auto applied = [](bool skipped) { return skipped ? "skipped" : "applied"; };
  out.push_back({step + " skipped", applied(x.skipped), applied(y.skipped), "", x.skipped == y.skipped,
                 step + (y.skipped ? " applied -> skipped (overflow)" : " skipped -> applied")});
  out.push_back(numeric_row(step + " loss", x.loss, y.loss, "", tol.numerics, tol.rounding));
  if (!x.skipped && !y.skipped && x.grad_norm && y.grad_norm)
    out.push_back(numeric_row(step + " grad norm", *x.grad_norm, *y.grad_norm, "", tol.numerics, tol.rounding));
}

}  // namespace

Tolerance default_tolerance(const std::string& precision) {
  Tolerance t;
  if (precision != "fp32") t.numerics = 1e-2;
  t.rounding = precision == "bf16" ? std::ldexp(1.0, -8) : precision == "fp16" ? std::ldexp(1.0, -11) : 0;
  t.basis = "fixed " + num(t.numerics) + " relative for " + precision + " losses and grad norms (no run-to-run spread "
            "measured for both releases: the cache holds one run of each)";
  return t;
}

Tolerance spread_tolerance(const std::string& precision, std::optional<double> good, std::optional<double> bad) {
  Tolerance t = default_tolerance(precision);
  if (!good || !bad) return t;
  t.numerics = std::max(4 * std::max(*good, *bad), 1e-9);
  t.basis = "the releases' own run-to-run spread, measured by a second run of each (good " + num(*good) + ", bad " +
            num(*bad) + "): a loss or grad norm that moves past " + num(t.numerics) + " relative moved";
  return t;
}

std::optional<double> run_spread(const ReleaseFigures& a, const ReleaseFigures& b) {
  if (a.outcome != "ran" || b.outcome != "ran" || a.steps.size() != b.steps.size()) return std::nullopt;
  double worst = 0;
  auto rel = [](double x, double y) { return std::fabs(x - y) / std::max(std::fabs(x), 1e-12); };
  for (size_t i = 0; i < a.steps.size(); ++i) {
    worst = std::max(worst, rel(a.steps[i].loss, b.steps[i].loss));
    if (a.steps[i].grad_norm && b.steps[i].grad_norm) worst = std::max(worst, rel(*a.steps[i].grad_norm, *b.steps[i].grad_norm));
  }
  return worst;
}

ReleaseFigures figures_from_deepspeed(const json& record, const std::string& log_tail) {
  ReleaseFigures f;
  if (record.is_object() && record.contains("versions")) f.torch = record["versions"].value("torch", "");
  if (record.is_object() && record.contains("refused")) {
    f.outcome = "refused";
    f.message = record["refused"].get<std::string>();
    return f;
  }
  if (!record.is_object() || !record.contains("ranks") || !record["ranks"].is_array() || record["ranks"].empty()) {
    f.outcome = "failed";
    f.message = log_tail;
    return f;
  }
  const json& ranks = record["ranks"];
  for (const json& s : ranks[0].value("steps", json::array())) {
    f.steps.push_back(step_figures(s));
    const int step = s.value("step", 0);
    const json comm = s.value("comm_bytes", json::object());  // bound: items() of a temporary dangles
    for (const auto& [op, bytes] : comm.items())
      if (bytes.is_number() && bytes.get<double>() >= kScalarCommBytes)
        f.comm_bytes["step " + std::to_string(step + 1) + " " + op] = bytes.get<double>();
  }
  for (const json& r : ranks) {
    const std::string rank = "rank " + std::to_string(r.value("rank", 0));
    const json memory = r.value("memory", json::object());
    for (const char* phase : kPhases) {
      if (!memory.contains(phase)) continue;
      const json bytes = memory[phase].value("bytes", json::object());
      for (const char* cat : kCategories)
        if (const auto v = number(bytes, cat)) f.bytes[rank + " " + phase + " " + cat] = *v;
    }
  }
  return f;
}

ReleaseFigures figures_from_zrepro(const Summary& summary) {
  ReleaseFigures f;
  if (summary.status != "ok") {
    f.outcome = summary.status == "config_error" ? "refused" : "failed";
    f.message = summary.failure && !summary.failure->message.empty() ? summary.failure->message : summary.status;
  }
  for (const SummaryStep& s : summary.steps) {
    StepFigures st;
    st.loss = s.loss.value_or(NAN);
    st.grad_norm = s.grad_norm;
    st.skipped = s.skipped;
    f.steps.push_back(st);
  }
  return f;
}

ReleaseFigures zrepro_refusal(const std::string& message) {
  ReleaseFigures f;
  f.outcome = "refused";
  f.message = message;
  return f;
}

std::vector<FigureRow> compare_figures(const ReleaseFigures& a, const ReleaseFigures& b, const Tolerance& tol,
                                       bool steps_only) {
  // [Note: what counts as a move]
  std::vector<FigureRow> out;
  out.push_back({"outcome", a.outcome, b.outcome, "", a.outcome == b.outcome,
                 "outcome " + a.outcome + " -> " + b.outcome + (b.message.empty() ? "" : ": " + b.message)});
  if (a.outcome != b.outcome || a.outcome != "ran") return out;  // two refusals (or failures) agree
  out.push_back({"steps", a.steps.size(), b.steps.size(), "", a.steps.size() == b.steps.size(),
                 "steps " + std::to_string(a.steps.size()) + " -> " + std::to_string(b.steps.size())});
  for (size_t i = 0; i < std::min(a.steps.size(), b.steps.size()); ++i)
    compare_step(i, a.steps[i], b.steps[i], tol, out);
  if (!steps_only) {
    compare_maps(a.bytes, b.bytes, tol.bytes, "B", out);
    compare_maps(a.comm_bytes, b.comm_bytes, tol.bytes, "B sent", out);
  }
  return out;
}

std::vector<std::string> moved(const ReleaseFigures& a, const ReleaseFigures& b, const Tolerance& tol,
                               bool steps_only, size_t limit) {
  std::vector<std::string> out;
  for (const FigureRow& r : compare_figures(a, b, tol, steps_only))
    if (!r.ok) out.push_back(r.text);
  if (out.size() > limit) {
    const size_t more = out.size() - limit;
    out.resize(limit);
    out.push_back("... and " + std::to_string(more) + " more");
  }
  return out;
}

json to_json(const ReleaseFigures& f) {
  json steps = json::array();
  for (const StepFigures& s : f.steps)
    steps.push_back({{"loss", s.loss}, {"grad_norm", s.grad_norm ? json(*s.grad_norm) : json(nullptr)},
                     {"skipped", s.skipped}});
  json j = {{"outcome", f.outcome}, {"message", f.message}, {"torch", f.torch}, {"steps", steps},
            {"bytes", f.bytes}, {"comm_bytes", f.comm_bytes}};
  if (f.spread) j["spread"] = *f.spread;
  return j;
}

ReleaseFigures figures_from_json(const json& j) {
  ReleaseFigures f;
  f.outcome = j.value("outcome", "failed");
  f.message = j.value("message", "");
  f.torch = j.value("torch", "");
  for (const json& s : j.value("steps", json::array())) {
    f.steps.push_back(step_figures(s));
  }
  f.bytes = j.value("bytes", std::map<std::string, double>());
  f.comm_bytes = j.value("comm_bytes", std::map<std::string, double>());
  if (j.contains("spread") && j["spread"].is_number()) f.spread = j["spread"].get<double>();
  return f;
}

}  // namespace zrepro
