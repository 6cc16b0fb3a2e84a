// See baseline.h.
#include "trainer/report/baseline.h"
#include "trainer/report/summary.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "device/base/errors.h"
#include "device/device_memory.h"

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
  r.rows.push_back({metric, a, b, fmt(100 * tol.memory_rel) + "%", std::fabs(static_cast<double>(b - a)) <= allowed, note,
                    RowKind::figure, "bytes"});
}

// Growth per step by category (a leak is a slope): at most growth_floor_bytes above the
// baseline's. Compared only where the baseline has a figure (runs of 5 steps or more).
void growth_rows(CheckResult& r, const std::string& at, const json& base, const json& now, const CheckTolerances& tol) {
  if (!base.is_object()) return;
  for (const auto& [cat, v] : base.items()) {
    if (!v.is_number()) continue;
    const json n = now.is_object() ? now.value(cat, json()) : json();
    const bool ok = n.is_number() && n.get<double>() <= v.get<double>() + tol.growth_floor_bytes;
    r.rows.push_back({at + "growth." + cat, std::llround(v.get<double>()), n.is_number() ? json(std::llround(n.get<double>())) : n,
                      "+" + format_bytes(static_cast<int64_t>(tol.growth_floor_bytes)) + "/step", ok,
                      ok ? "" : n.is_number() ? "grows every step after warm-up: a leak (bytes held across steps)"
                                             : "no growth figure now (fewer than 5 steps?)",
                      RowKind::figure, "bytes/step"});
  }
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
    growth_rows(r, at, br[k].value("growth", json()), nr[k].value("growth", json()), tol);
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
    // Where each value came from, with the release that set a default ("since DeepSpeed 0.19.5 (...)").
    auto origin = [](const json& e) {
      if (!e.is_object()) return std::string("absent");
      const json note = e.value("note", json());
      return e.value("source", std::string("?")) + (note.is_string() && !note.get<std::string>().empty()
                                                        ? " (" + note.get<std::string>() + ")" : "");
    };
    r.rows.push_back({"config." + key, was.value("value", json()), is.is_object() ? is.value("value", json()) : json(),
                      "exact", false, "source " + origin(was) + " -> " + origin(is) + "; zrepro config --config ... shows each value"});
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

// [Note: step time against the machine]: the allowed ratio widens with the spread both runs
// measured (a loaded machine's steps and kernel timings scatter more); advisory unless gated.
void time_rows(CheckResult& r, const json& base, const json& now, const CheckTolerances& tol) {
  const double a = number_or(base["time"], "ratio", 0.0), b = number_or(now["time"], "ratio", 0.0);
  if (a <= 0 || b <= 0) return;
  const double spread = number_or(base["time"], "spread", 0.0) + number_or(now["time"], "spread", 0.0);
  const double allowed = std::max(tol.time_ratio, 1 + 2 * spread);
  const bool within = b <= allowed * a;
  const std::string basis = "calibration " + fmt(number_or(now["time"], "calibration_s", 0.0)) + " s now (" +
                            now["time"].value("source", std::string("?")) + "), " +
                            fmt(number_or(base["time"], "calibration_s", 0.0)) + " s then (" +
                            base["time"].value("source", std::string("?")) + "); spreads " +
                            fmt(number_or(base["time"], "spread", 0.0)) + " then, " +
                            fmt(number_or(now["time"], "spread", 0.0)) + " now";
  r.rows.push_back({"step time / calibration", a, b, "<= " + fmt(allowed) + "x", within || !tol.time_gate,
                    "now " + fmt(b / a) + "x the baseline; " + basis +
                        (tol.time_gate ? "" : within ? "" : "; advisory (--time-gate fails on it)"),
                    tol.time_gate ? RowKind::figure : RowKind::advisory, ""});
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

// A run's arguments as flag -> value ("--steps 3", "--steps=3"; a flag without a value is
// "true"; a repeated flag's values joined by ","). --config is left out: its file is
// compared by content, wherever it lies.
std::map<std::string, std::string> flags_of(const json& args) {
  std::map<std::string, std::string> m;
  if (!args.is_array()) return m;
  for (size_t i = 0; i < args.size(); ++i) {
    if (!args[i].is_string()) continue;
    std::string a = args[i].get<std::string>(), v = "true";
    if (a.rfind("--", 0) != 0) continue;
    if (const size_t eq = a.find('='); eq != std::string::npos) {
      v = a.substr(eq + 1), a = a.substr(0, eq);
    } else if (i + 1 < args.size() && args[i + 1].is_string() && args[i + 1].get<std::string>().rfind("--", 0) != 0) {
      v = args[++i].get<std::string>();
    }
    if (a == "--config") continue;
    m[a] = m.count(a) ? m[a] + "," + v : v;
  }
  return m;
}

// The config file's JSON flattened to dotted keys ("zero_optimization.stage").
void flatten(const json& j, const std::string& prefix, std::map<std::string, json>& out) {
  if (j.is_object() && !j.empty()) {
    for (const auto& [k, v] : j.items()) flatten(v, prefix.empty() ? k : prefix + "." + k, out);
  } else {
    out[prefix] = j;
  }
}

// What each run was asked, first: a flag or config key that differs means the run is not
// the baseline's job, and the figures below follow from that, not from an upgrade.
// --deepspeed-version is a version (reported with the versions), not an input.
void input_rows(CheckResult& r, const json& base, const json& now) {
  const json bi = base.value("inputs", json()), ni = now.value("inputs", json());
  if (!bi.is_object() || !ni.is_object()) {
    r.rows.push_back({"inputs", nullptr, nullptr, "exact", true,
                      "not compared: " + std::string(bi.is_object() ? "the run" : "the baseline") +
                          " keeps no inputs (written by an older zrepro)", RowKind::input, ""});
    return;
  }
  const auto fa = flags_of(bi.value("args", json())), fb = flags_of(ni.value("args", json()));
  std::map<std::string, bool> keys;
  for (const auto& [k, v] : fa) keys[k] = true;
  for (const auto& [k, v] : fb) keys[k] = true;
  int same = 0;
  for (const auto& [k, unused] : keys) {
    if (k == "--deepspeed-version") continue;
    const json a = fa.count(k) ? json(fa.at(k)) : json(nullptr), b = fb.count(k) ? json(fb.at(k)) : json(nullptr);
    if (a == b) {
      ++same;
      continue;
    }
    r.rows.push_back({"input " + k, a, b, "exact", false, "the run was asked differently (null: not given)",
                      RowKind::input, ""});
  }
  const json ca = bi.value("config", json()), cb = ni.value("config", json());
  if (ca.is_object() && cb.is_object()) {
    std::map<std::string, json> ka, kb;
    flatten(ca, "", ka), flatten(cb, "", kb);
    for (const auto& [k, v] : kb) ka.emplace(k, json());  // keys only the run's config has: null in the baseline's
    for (const auto& [k, v] : ka) {
      const json n = kb.count(k) ? kb.at(k) : json();
      if (v == n) {
        ++same;
        continue;
      }
      r.rows.push_back({"input config " + k, v, n, "exact", false,
                        "the config file (" + ni.value("config_file", std::string("?")) + ") differs from the baseline's",
                        RowKind::input, ""});
    }
  }
  r.rows.push_back({"inputs (flags and config keys unchanged)", same, same, "exact", true, "", RowKind::input, ""});
}

}  // namespace

bool calibrated_in_run(const Summary& s) { return s.time && s.time->calibration; }

json make_baseline(const Summary& s, double check_time_calibration_s, const std::string& from) {
  json b = {{"zrepro_baseline", 1},
            {"from", from},
            {"status", s.status},
            {"world_size", json_of(s.world_size)},
            {"zero_stage", json_of(s.zero_stage)},
            {"precision", json_of(s.precision)},
            {"deepspeed_version", json_of(s.deepspeed_version)},
            {"skipped_steps", json_of(s.skipped_steps)},
            {"env", s.env},
            {"inputs", s.inputs},
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
                       {"host", {{"pinned", r.host_pinned_bytes}, {"pageable", r.host_pageable_bytes}}},
                       {"growth", r.growth_bytes_per_step.empty() ? json(nullptr) : json(r.growth_bytes_per_step)}});
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
        config[e["key"].get<std::string>()] = {{"value", e.value("value", json())}, {"source", e.value("source", json())},
                                               {"note", e.value("note", json())}};
  b["effective_config"] = config;
  const json planned = s.memory ? s.memory->planned : json();
  const int64_t planned_peak = planned.is_object() ? planned.value("peak_bytes", int64_t(0)) : 0;
  if (peak > 0 && planned_peak > 0) b["plan_over_measured"] = static_cast<double>(planned_peak) / static_cast<double>(peak);
  if (calibrated_in_run(s)) {
    const SummaryCalibration& c = *s.time->calibration;
    b["time"] = {{"step_s_median", c.step_s_median}, {"calibration_s", c.median_s}, {"ratio", c.step_over_calibration},
                 {"spread", c.spread + c.step_spread},
                 {"source", "during the run, " + std::to_string(c.samples) + " samples"}};
  } else {
    const double step = s.time && s.time->step_s_median ? *s.time->step_s_median : 0.0;
    const double k = check_time_calibration_s;
    b["time"] = {{"step_s_median", step}, {"calibration_s", k}, {"ratio", k > 0 ? step / k : 0.0}, {"spread", 0.0},
                 {"source", "at check time, not during the run (a summary from an older zrepro)"}};
  }
  return b;
}

namespace {

// A baseline's keys read with errors that name them (validate_baseline).
struct BaselineShape {
  using Is = bool (json::*)() const noexcept;
  const std::string& path;

  [[noreturn]] void refuse(const std::string& key, const json& got, const std::string& want) const {
    throw ConfigError("--baseline: \"" + path + "\": " + key + " is " + (got.is_null() ? "missing" : got.dump().substr(0, 60)) +
                      ", expected " + want + ". Write the baseline again with zrepro check --save (this zrepro's format " +
                      std::to_string(kBaselineVersion) + ")");
  }
  const json& need(const json& obj, const std::string& where, const char* key, Is is, const char* want) const {
    static const json missing;
    const json& v = obj.contains(key) ? obj[key] : missing;
    if (!(v.*is)()) refuse(where + key, v, want);
    return v;
  }
  // obj[key] is an object whose every value passes `is`; optional: absent or null is
  // fine (baselines saved before the key was kept).
  void map_of(const json& obj, const std::string& where, const char* key, Is is, const char* want, bool optional) const {
    if (optional && (!obj.contains(key) || obj[key].is_null())) return;
    for (const auto& [k, v] : need(obj, where, key, &json::is_object, "an object").items())
      if (!(v.*is)()) refuse(where + key + "." + k, v, want);
  }
  void memory(const json& b) const {
    const json& m = need(b, "", "memory", &json::is_object, "an object with ranks and peak_bytes");
    need(m, "memory.", "peak_bytes", &json::is_number, "bytes");
    for (const auto& r : need(m, "memory.", "ranks", &json::is_array, "an array of ranks")) {
      if (!r.is_object()) refuse("memory.ranks[...]", r, "an object with by_category");
      map_of(r, "memory.ranks[].", "by_category", &json::is_number_integer, "bytes", false);
      map_of(r, "memory.ranks[].", "host", &json::is_number_integer, "bytes", true);
      map_of(r, "memory.ranks[].", "growth", &json::is_number, "bytes per step", true);
    }
  }
  void optional_parts(const json& b) const {
    if (b.contains("inputs") && !b["inputs"].is_null()) {
      const json& in = b["inputs"];
      if (!in.is_object() || !in.contains("args") || !in["args"].is_array())
        refuse("inputs", in, "{args: [the run's arguments], config_file, config}");
      for (const auto& a : in["args"])
        if (!a.is_string()) refuse("inputs.args[...]", a, "strings (the run's arguments)");
    }
    if (b.contains("effective_config")) {
      if (!b["effective_config"].is_object()) refuse("effective_config", b["effective_config"], "an object of keys");
      for (const auto& [key, e] : b["effective_config"].items())
        if (!e.is_object() || !e.contains("value")) refuse("effective_config." + key, e, "{value, source}");
    }
    if (b.contains("plan_over_measured") && !b["plan_over_measured"].is_number())
      refuse("plan_over_measured", b["plan_over_measured"], "a ratio");
  }
};

}  // namespace

void validate_baseline(const json& b, const std::string& path) {
  const BaselineShape shape{path};
  if (!b.is_object()) shape.refuse("the file", b, "a JSON object (a zrepro baseline)");
  const json version = b.value("zrepro_baseline", json());
  if (!version.is_number_integer() || version.get<int64_t>() != kBaselineVersion)
    shape.refuse("\"zrepro_baseline\" (the format version)", version, std::to_string(kBaselineVersion));
  shape.need(b, "", "steps", &json::is_number_integer, "a whole number of steps");
  for (const char* k : {"loss", "grad_norm"})
    for (const auto& x : shape.need(b, "", k, &json::is_array, "an array of per-step values"))
      if (!x.is_number() && !x.is_null()) shape.refuse(std::string(k) + "[...]", x, "numbers (null for a skipped step)");
  shape.memory(b);
  shape.map_of(b, "", "comm_bytes_per_step", &json::is_number, "bytes", false);
  const json& time = shape.need(b, "", "time", &json::is_object, "an object with step_s_median, calibration_s and ratio");
  for (const char* k : {"step_s_median", "calibration_s", "ratio"}) shape.need(time, "time.", k, &json::is_number, "seconds");
  shape.optional_parts(b);
}

CheckResult check_against(const json& base, const json& now, const CheckTolerances& tol) {
  CheckResult r;
  input_rows(r, base, now);
  for (const char* k : {"world_size", "zero_stage", "precision", "model"})
    exact(r, std::string("setup.") + k, base.value(k, json()), now.value(k, json()),
          "a different setup is not comparable: check the same config and flags");
  exact(r, "status", base.value("status", json()), now.value("status", json()));
  exact(r, "steps", base.value("steps", json()), now.value("steps", json()));
  exact(r, "skipped_steps", base.value("skipped_steps", json()), now.value("skipped_steps", json()));
  memory_rows(r, base, now, tol);
  config_rows(r, base, now);
  const json comm = base.value("comm_bytes_per_step", json::object());  // items() of a temporary dangles
  for (const auto& [op, v] : comm.items()) {
    exact(r, "comm.bytes_per_step." + op, v, now["comm_bytes_per_step"].value(op, json()));
    r.rows.back().unit = "bytes";
  }
  trajectory_rows(r, base, now, tol);
  time_rows(r, base, now, tol);
  plan_rows(r, base, now, tol);
  // What changed underneath: reported, never failed on.
  const json be = base.value("env", json::object()), ne = now.value("env", json::object());
  auto at = [](const json& e, const char* pointer) {
    const json::json_pointer p(pointer);
    return e.is_object() && e.contains(p) ? e.at(p) : json();
  };
  for (const char* p : {"/libtorch/version", "/nccl/version", "/cuda/runtime", "/mpi", "/cpu/model", "/zrepro/commit"})
    if (at(be, p) != at(ne, p)) {
      std::string name = std::string("env") + p;
      std::replace(name.begin(), name.end(), '/', '.');
      r.rows.push_back({name, at(be, p), at(ne, p), "reported", true, "changed", RowKind::version, ""});
    }
  if (base.value("deepspeed_version", json()) != now.value("deepspeed_version", json()))
    r.rows.push_back({"deepspeed_version", base["deepspeed_version"], now["deepspeed_version"], "reported", true,
                      "changed: zrepro config --diff-versions names what the profile changes", RowKind::version, ""});
  return r;
}

const char* row_kind_name(RowKind k) {
  switch (k) {
    case RowKind::input: return "input";
    case RowKind::figure: return "figure";
    case RowKind::version: return "version";
    case RowKind::advisory: return "advisory";
  }
  return "?";
}

bool CheckResult::passed() const {
  return std::all_of(rows.begin(), rows.end(), [](const CheckRow& x) { return x.ok; });
}

bool CheckResult::inputs_differ() const {
  return std::any_of(rows.begin(), rows.end(), [](const CheckRow& x) { return !x.ok && x.kind == RowKind::input; });
}

int CheckResult::failures() const {
  return static_cast<int>(std::count_if(rows.begin(), rows.end(), [](const CheckRow& x) { return !x.ok; }));
}

std::string CheckResult::verdict() const {
  return passed() ? "PASS" : inputs_differ() ? "INPUTS DIFFER" : "REGRESSION";
}

json CheckResult::to_json() const {
  json rj = json::array();
  for (const auto& x : rows)
    rj.push_back({{"metric", x.metric}, {"kind", row_kind_name(x.kind)}, {"baseline", x.baseline}, {"now", x.now},
                  {"unit", x.unit}, {"tolerance", x.tolerance}, {"ok", x.ok}, {"note", x.note}});
  return {{"passed", passed()}, {"verdict", verdict()}, {"failures", failures()}, {"rows", rj}};
}

namespace {

// A value as the table shows it: bytes in KiB/MiB/GiB, other values as JSON (cut at 16).
std::string shown(const json& v, const std::string& unit) {
  if (v.is_number() && (unit == "bytes" || unit == "bytes/step")) {
    const double b = v.get<double>();
    return (b < 0 ? "-" : "") + format_bytes(static_cast<int64_t>(std::fabs(b))) + (unit == "bytes/step" ? "/step" : "");
  }
  if (v.is_null()) return "(none)";
  return v.is_string() ? v.get<std::string>().substr(0, 24) : v.dump().substr(0, 24);
}

}  // namespace

// The inputs that differ come first, then what moved, then versions and advisories.
std::string CheckResult::table() const {
  std::ostringstream o;
  int reported = 0;
  for (const RowKind kind : {RowKind::input, RowKind::figure, RowKind::version, RowKind::advisory})
    for (const auto& x : rows) {
      if (x.kind != kind) continue;
      const bool show = !x.ok || kind == RowKind::version || (kind == RowKind::advisory && x.note.find("advisory") != std::string::npos);
      if (!show) continue;
      reported += x.ok;
      char line[768];
      std::snprintf(line, sizeof line, "  %-8s %-4s %-40s %-24s -> %-24s (%s)%s%s\n", row_kind_name(kind),
                    x.ok ? "ok" : "FAIL", x.metric.c_str(), shown(x.baseline, x.unit).c_str(), shown(x.now, x.unit).c_str(),
                    x.tolerance.c_str(), x.note.empty() ? "" : ": ", x.note.c_str());
      o << line;
    }
  o << "[zrepro check] " << rows.size() << " figures compared, " << failures() << " moved past their tolerance"
    << (reported > 0 ? ", " + std::to_string(reported) + " reported (versions, advisories)" : "") << ": " << verdict();
  if (inputs_differ())
    o << " - the run was not asked what the baseline's was (input rows first); the other rows follow from that. "
         "Rerun with the stored inputs: zrepro check --baseline FILE (no run arguments)";
  o << "\n";
  return o.str();
}

}  // namespace zrepro
