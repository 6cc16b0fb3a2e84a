// See baseline.h.
#include "trainer/report/baseline.h"
#include "trainer/report/summary.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "device/base/errors.h"

namespace zrepro {

using json = nlohmann::json;

namespace {

// A number at key of an object, else dflt (missing, null, or not a number: a failed run's summary).
double number_or(const json& j, const char* key, double dflt) {
  return j.is_object() && j.contains(key) && j[key].is_number() ? j[key].get<double>() : dflt;
}
int64_t integer_or(const json& j, const char* key, int64_t dflt) {
  return j.is_object() && j.contains(key) && j[key].is_number() ? j[key].get<int64_t>() : dflt;
}
std::string fmt(double v) {
  char b[48];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

// Relative tolerance of loss trajectories by precision (grad norms get 3x).
double loss_tolerance(const std::string& precision) {
  return precision == "bf16" ? 3e-2 : precision == "fp16" ? 1e-2 : 1e-4;
}

void exact(CheckResult& r, const std::string& metric, const json& a, const json& b, const std::string& note = "") {
  r.rows.push_back({metric, a, b, "exact", a == b, note});
}

void bytes_row(CheckResult& r, const std::string& metric, int64_t a, int64_t b, const CheckTolerances& tol,
               const std::string& note = "") {
  const double allowed = std::max<double>(tol.memory_rel * static_cast<double>(a), tol.memory_floor_bytes);
  r.rows.push_back({metric, a, b, fmt(100 * tol.memory_rel) + "%", std::fabs(static_cast<double>(b - a)) <= allowed, note});
}

// Device bytes by category and host bytes by kind, per rank. Host bytes are what an
// upgrade that flips offload's pin_memory default moves (issue 31: DeepSpeed 0.19.4 ->
// 0.19.8 pinned 2.26 MiB where it pinned none); a baseline from before they were kept
// has no "host" and is compared without them.
void memory_rows(CheckResult& r, const json& base, const json& now, const CheckTolerances& tol) {
  const json& br = base["memory"]["ranks"];
  const json& nr = now["memory"]["ranks"];
  for (size_t k = 0; k < br.size() && k < nr.size(); ++k) {
    const std::string at = "memory.rank" + std::to_string(k) + ".";
    for (const auto& [cat, v] : br[k]["by_category"].items())
      bytes_row(r, at + cat, v.get<int64_t>(), integer_or(nr[k]["by_category"], cat.c_str(), 0), tol);
    if (br[k].contains("host") && br[k]["host"].is_object())
      for (const auto& [kind, v] : br[k]["host"].items())
        bytes_row(r, at + "host_" + kind, v.get<int64_t>(),
                  nr[k].contains("host") ? integer_or(nr[k]["host"], kind.c_str(), 0) : 0, tol,
                  kind == "pinned" ? "page-locked host memory (offload pin_memory)" : "");
  }
}

// The effective DeepSpeed config, key by key: a value that differs fails, with where each
// came from (a release's default, the file, a flag, "auto"), so an upgrade that changes a
// default is named as the change it is. One passing row when nothing differs.
void config_rows(CheckResult& r, const json& base, const json& now) {
  const json b = base.value("effective_config", json()), n = now.value("effective_config", json());
  if (!b.is_object() || !n.is_object()) return;
  int same = 0;
  for (const auto& [key, was] : b.items()) {
    const json is = n.value(key, json());
    if (is.is_object() && is.value("value", json()) == was.value("value", json())) {
      ++same;
      continue;
    }
    const std::string from = was.value("source", "?"), to = is.is_object() ? is.value("source", "?") : "absent";
    r.rows.push_back({"config." + key, was.value("value", json()), is.is_object() ? is.value("value", json()) : json(),
                      "exact", false, "source " + from + " -> " + to + "; zrepro config --config ... shows each value"});
  }
  r.rows.push_back({"config (effective keys unchanged)", same, same, "exact", true, ""});
}

void trajectory_rows(CheckResult& r, const json& base, const json& now, const CheckTolerances& tol) {
  const double t = loss_tolerance(base.value("precision", "fp32")) * tol.loss_scale;
  for (const auto& [key, scale] : {std::pair<const char*, double>{"loss", 1.0}, {"grad_norm", 3.0}}) {
    const json& a = base[key];
    const json& b = now[key];
    double worst = 0;
    int64_t at = -1;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
      if (!a[i].is_number() || !b[i].is_number()) {  // a skipped step's grad norm is null
        if (a[i] != b[i]) worst = INFINITY, at = static_cast<int64_t>(i);
        continue;
      }
      const double x = a[i].get<double>(), y = b[i].get<double>();
      const double rel = std::fabs(y - x) / std::max(std::fabs(x), 1e-12);
      if (rel > worst) worst = rel, at = static_cast<int64_t>(i);
    }
    r.rows.push_back({std::string(key) + " (worst step)", at >= 0 ? a[at] : json(nullptr), at >= 0 ? b[at] : json(nullptr),
                      fmt(t * scale) + " relative", worst <= t * scale,
                      at >= 0 ? "step " + std::to_string(at) + ", relative difference " + fmt(worst) : ""});
  }
}

void time_rows(CheckResult& r, const json& base, const json& now, const CheckTolerances& tol) {
  const double a = number_or(base["time"], "ratio", 0.0), b = number_or(now["time"], "ratio", 0.0);
  if (a <= 0 || b <= 0) return;
  r.rows.push_back({"step time / calibration", a, b, "<= " + fmt(tol.time_ratio) + "x", b <= tol.time_ratio * a,
                    "now " + fmt(b / a) + "x the baseline (calibration " + fmt(number_or(now["time"], "calibration_s", 0.0)) +
                        " s here, " + fmt(number_or(base["time"], "calibration_s", 0.0)) + " s then)"});
}

void plan_rows(CheckResult& r, const json& base, const json& now, const CheckTolerances& tol) {
  const double a = number_or(base, "plan_over_measured", 0.0), b = number_or(now, "plan_over_measured", 0.0);
  if (a <= 0 || b <= 0) return;
  r.rows.push_back({"planned / measured peak", a, b, "+-" + fmt(tol.plan_ratio), std::fabs(b - a) <= tol.plan_ratio,
                    std::fabs(b - a) <= tol.plan_ratio
                        ? ""
                        : "the planner no longer predicts this run's peak: after a LibTorch upgrade re-derive its "
                          "activation tapes (docs/design/ARCHITECTURE.md, --memory-log)"});
}

}  // namespace

json make_baseline(const Summary& s, double calibration_s, const std::string& from) {
  json b = {{"zrepro_baseline", 1},
            {"from", from},
            {"status", s.status},
            {"world_size", json_of(s.world_size)},
            {"zero_stage", json_of(s.zero_stage)},
            {"precision", json_of(s.precision)},
            {"deepspeed_version", json_of(s.deepspeed_version)},
            {"skipped_steps", json_of(s.skipped_steps)},
            {"env", s.env},
            {"model", s.model.is_object() ? s.model.value("name", json()) : json(nullptr)}};
  json loss = json::array(), gn = json::array();
  for (const SummaryStep& st : s.steps) loss.push_back(json_of(st.loss)), gn.push_back(json_of(st.grad_norm));
  b["steps"] = loss.size();
  b["loss"] = loss, b["grad_norm"] = gn;
  json ranks = json::array();
  if (s.memory)
    for (const SummaryRankMemory& r : s.memory->ranks)
      ranks.push_back({{"rank", r.rank},
                       {"by_category", r.category_peaks},
                       {"host", {{"pinned", r.host_pinned_bytes}, {"pageable", r.host_pageable_bytes}}}});
  const int64_t peak = s.peak_bytes();
  b["memory"] = {{"ranks", ranks}, {"peak_bytes", peak}};
  json comm = json::object();
  if (s.comm)
    for (const auto& [op, v] : s.comm->bytes_per_step)
      if (v) comm[op] = *v;
  b["comm_bytes_per_step"] = comm;
  json config = json::object();  // key -> {value, source}: the effective config (DsConfig::effective_json)
  if (s.effective_config.is_object())
    for (const auto& e : s.effective_config.value("entries", json::array()))
      if (e.is_object() && e.contains("key"))
        config[e["key"].get<std::string>()] = {{"value", e.value("value", json())}, {"source", e.value("source", json())}};
  b["effective_config"] = config;
  const json planned = s.memory ? s.memory->planned : json();
  const int64_t planned_peak = planned.is_object() ? planned.value("peak_bytes", int64_t(0)) : 0;
  if (peak > 0 && planned_peak > 0) b["plan_over_measured"] = static_cast<double>(planned_peak) / static_cast<double>(peak);
  const double step = s.time && s.time->step_s_median ? *s.time->step_s_median : 0.0;
  b["time"] = {{"step_s_median", step}, {"calibration_s", calibration_s},
               {"ratio", calibration_s > 0 ? step / calibration_s : 0.0}};
  return b;
}

void validate_baseline(const json& b, const std::string& path) {
  auto refuse = [&](const std::string& key, const json& got, const std::string& want) {
    throw ConfigError("--baseline: \"" + path + "\": " + key + " is " + (got.is_null() ? "missing" : got.dump().substr(0, 60)) +
                      ", expected " + want + ". Write the baseline again with zrepro check --save (this zrepro's format " +
                      std::to_string(kBaselineVersion) + ")");
  };
  if (!b.is_object()) refuse("the file", b, "a JSON object (a zrepro baseline)");
  const json version = b.value("zrepro_baseline", json());
  if (!version.is_number_integer() || version.get<int64_t>() != kBaselineVersion)
    refuse("\"zrepro_baseline\" (the format version)", version, std::to_string(kBaselineVersion));
  auto need = [&](const json& obj, const std::string& where, const char* key, bool (json::*is)() const noexcept,
                  const char* want) -> const json& {
    static const json missing;
    const json& v = obj.contains(key) ? obj[key] : missing;
    if (!(v.*is)()) refuse(where + key, v, want);
    return v;
  };
  need(b, "", "steps", &json::is_number_integer, "a whole number of steps");
  for (const char* k : {"loss", "grad_norm"}) {
    const json& a = need(b, "", k, &json::is_array, "an array of per-step values");
    for (const auto& x : a)
      if (!x.is_number() && !x.is_null()) refuse(std::string(k) + "[...]", x, "numbers (null for a skipped step)");
  }
  const json& memory = need(b, "", "memory", &json::is_object, "an object with ranks and peak_bytes");
  need(memory, "memory.", "peak_bytes", &json::is_number, "bytes");
  for (const auto& r : need(memory, "memory.", "ranks", &json::is_array, "an array of ranks")) {
    if (!r.is_object()) refuse("memory.ranks[...]", r, "an object with by_category");
    for (const auto& [cat, v] : need(r, "memory.ranks[].", "by_category", &json::is_object, "bytes by category").items())
      if (!v.is_number_integer()) refuse("memory.ranks[].by_category." + cat, v, "bytes");
  }
  for (const auto& r : memory["ranks"])
    if (r.contains("host")) {  // optional: baselines saved before host bytes were kept have none
      if (!r["host"].is_object()) refuse("memory.ranks[].host", r["host"], "bytes by kind (pinned, pageable)");
      for (const auto& [kind, v] : r["host"].items())
        if (!v.is_number_integer()) refuse("memory.ranks[].host." + kind, v, "bytes");
    }
  if (b.contains("effective_config")) {  // optional, as host
    if (!b["effective_config"].is_object()) refuse("effective_config", b["effective_config"], "an object of keys");
    for (const auto& [key, e] : b["effective_config"].items())
      if (!e.is_object() || !e.contains("value")) refuse("effective_config." + key, e, "{value, source}");
  }
  for (const auto& [op, v] : need(b, "", "comm_bytes_per_step", &json::is_object, "bytes by collective").items())
    if (!v.is_number()) refuse("comm_bytes_per_step." + op, v, "bytes");
  const json& time = need(b, "", "time", &json::is_object, "an object with step_s_median, calibration_s and ratio");
  for (const char* k : {"step_s_median", "calibration_s", "ratio"}) need(time, "time.", k, &json::is_number, "seconds");
  if (b.contains("plan_over_measured") && !b["plan_over_measured"].is_number())
    refuse("plan_over_measured", b["plan_over_measured"], "a ratio");
}

CheckResult check_against(const json& base, const json& now, const CheckTolerances& tol) {
  CheckResult r;
  for (const char* k : {"world_size", "zero_stage", "precision", "model"})
    exact(r, std::string("setup.") + k, base.value(k, json()), now.value(k, json()),
          "a different setup is not comparable: check the same config and flags");
  exact(r, "status", base.value("status", json()), now.value("status", json()));
  exact(r, "steps", base.value("steps", json()), now.value("steps", json()));
  exact(r, "skipped_steps", base.value("skipped_steps", json()), now.value("skipped_steps", json()));
  memory_rows(r, base, now, tol);
  config_rows(r, base, now);
  const json comm = base.value("comm_bytes_per_step", json::object());  // items() of a temporary dangles
  for (const auto& [op, v] : comm.items())
    exact(r, "comm.bytes_per_step." + op, v, now["comm_bytes_per_step"].value(op, json()));
  trajectory_rows(r, base, now, tol);
  time_rows(r, base, now, tol);
  plan_rows(r, base, now, tol);
  // What changed underneath: reported, never failed on.
  const json& be = base.value("env", json::object());
  const json& ne = now.value("env", json::object());
  auto version = [](const json& e, const char* a, const char* b) {
    return e.contains(a) && e[a].is_object() ? e[a].value(b, json()) : json();
  };
  for (const auto& [a, b] : {std::pair<const char*, const char*>{"libtorch", "version"}, {"nccl", "version"},
                             {"cuda", "runtime"}, {"zrepro", "commit"}})
    if (version(be, a, b) != version(ne, a, b))
      r.rows.push_back({std::string("env.") + a, version(be, a, b), version(ne, a, b), "reported", true, "changed"});
  if (base.value("deepspeed_version", json()) != now.value("deepspeed_version", json()))
    r.rows.push_back({"deepspeed_version", base["deepspeed_version"], now["deepspeed_version"], "reported", true,
                      "changed: zrepro config --diff-versions names what the profile changes"});
  return r;
}

bool CheckResult::passed() const {
  return std::all_of(rows.begin(), rows.end(), [](const CheckRow& x) { return x.ok; });
}

json CheckResult::to_json() const {
  json rj = json::array();
  for (const auto& x : rows)
    rj.push_back({{"metric", x.metric}, {"baseline", x.baseline}, {"now", x.now}, {"tolerance", x.tolerance},
                  {"ok", x.ok}, {"note", x.note}});
  return {{"passed", passed()}, {"rows", rj}};
}

std::string CheckResult::table() const {
  std::ostringstream o;
  int moved = 0;
  for (const auto& x : rows) {
    if (x.ok && x.note != "changed" && x.note.rfind("changed:", 0) != 0) continue;
    ++moved;
    char line[512];
    std::snprintf(line, sizeof line, "  %-4s %-38s %-16s -> %-16s (%s)%s%s\n", x.ok ? "ok" : "FAIL", x.metric.c_str(),
                  x.baseline.dump().substr(0, 16).c_str(), x.now.dump().substr(0, 16).c_str(), x.tolerance.c_str(),
                  x.note.empty() ? "" : ": ", x.note.c_str());
    o << line;
  }
  int failed = 0;
  for (const auto& x : rows) failed += !x.ok;
  o << "[zrepro check] " << rows.size() << " figures compared, " << failed << " moved past their tolerance"
    << (moved - failed > 0 ? ", " + std::to_string(moved - failed) + " version change(s) reported" : "") << ": "
    << (passed() ? "PASS" : "REGRESSION") << "\n";
  return o.str();
}

}  // namespace zrepro
