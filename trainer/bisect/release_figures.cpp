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

std::string num(double v) {
  char b[48];
  std::snprintf(b, sizeof b, "%.7g", v);
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

void compare_maps(const std::map<std::string, double>& a, const std::map<std::string, double>& b, double rel,
                  const std::string& unit, std::vector<std::string>& out) {
  for (const auto& [k, va] : a) {
    const auto it = b.find(k);
    const double vb = it == b.end() ? 0 : it->second;
    if (!within(va, vb, rel)) out.push_back(k + " " + num(va) + " -> " + num(vb) + " " + unit + change(va, vb));
  }
  for (const auto& [k, vb] : b)
    if (!a.count(k) && !within(0, vb, rel)) out.push_back(k + " 0 -> " + num(vb) + " " + unit);
}

}  // namespace

Tolerance default_tolerance(const std::string& precision) {
  Tolerance t;
  if (precision != "fp32") t.numerics = 1e-2;
  return t;
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

std::vector<std::string> moved(const ReleaseFigures& a, const ReleaseFigures& b, const Tolerance& tol,
                               bool steps_only, size_t limit) {
  std::vector<std::string> out;
  if (a.outcome != b.outcome) {
    out.push_back("outcome " + a.outcome + " -> " + b.outcome + (b.message.empty() ? "" : ": " + b.message));
    return out;
  }
  if (a.outcome != "ran") return out;  // two refusals (or failures) agree
  if (a.steps.size() != b.steps.size())
    out.push_back("steps " + std::to_string(a.steps.size()) + " -> " + std::to_string(b.steps.size()));
  for (size_t i = 0; i < std::min(a.steps.size(), b.steps.size()); ++i) {
    const StepFigures &x = a.steps[i], &y = b.steps[i];
    const std::string step = "step " + std::to_string(i + 1);
    if (x.skipped != y.skipped)
      out.push_back(step + (y.skipped ? " applied -> skipped (overflow)" : " skipped -> applied"));
    if (!within(x.loss, y.loss, tol.numerics))
      out.push_back(step + " loss " + num(x.loss) + " -> " + num(y.loss) + change(x.loss, y.loss));
    if (!x.skipped && !y.skipped && x.grad_norm && y.grad_norm && !within(*x.grad_norm, *y.grad_norm, tol.numerics))
      out.push_back(step + " grad norm " + num(*x.grad_norm) + " -> " + num(*y.grad_norm) +
                    change(*x.grad_norm, *y.grad_norm));
  }
  if (!steps_only) {
    compare_maps(a.bytes, b.bytes, tol.bytes, "B", out);
    compare_maps(a.comm_bytes, b.comm_bytes, tol.bytes, "B sent", out);
  }
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
  return {{"outcome", f.outcome}, {"message", f.message}, {"torch", f.torch}, {"steps", steps},
          {"bytes", f.bytes}, {"comm_bytes", f.comm_bytes}};
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
  return f;
}

}  // namespace zrepro
