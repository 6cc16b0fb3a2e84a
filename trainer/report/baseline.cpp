// See baseline.h.
#include "trainer/report/baseline.h"
#include "trainer/report/environment.h"
#include "trainer/report/summary.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <tuple>

#include "device/base/errors.h"
#include "device/device_memory.h"

namespace zrepro {

using json = nlohmann::json;

namespace {

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
void growth_rows(CheckResult& r, const std::string& at, const BaselineRank& base, const BaselineRank* now,
                 const CheckTolerances& tol) {
  if (!base.growth) return;
  for (const auto& [cat, v] : *base.growth) {
    std::optional<double> n;
    if (now && now->growth && now->growth->count(cat)) n = now->growth->at(cat);
    const bool ok = n && *n <= v + tol.growth_floor_bytes;
    r.rows.push_back({at + "growth." + cat, std::llround(v), n ? json(std::llround(*n)) : json(nullptr),
                      "+" + format_bytes(static_cast<int64_t>(tol.growth_floor_bytes)) + "/step", ok,
                      ok ? "" : n ? "grows every step after warm-up: a leak (bytes held across steps)"
                                  : "no growth figure now (fewer than 5 steps?)",
                      RowKind::figure, "bytes/step"});
  }
}

int64_t bytes_of(const SummaryCategories& c, const std::string& key) {
  const auto it = c.find(key);
  return it == c.end() ? 0 : it->second;
}

// Device bytes by category and host bytes by kind, per rank. Host bytes are what an
// upgrade that flips offload's pin_memory default moves (issue 31: DeepSpeed 0.19.4 ->
// 0.19.8 pinned 2.26 MiB where it pinned none); a baseline from before they were kept
// has no "host" and is compared without them.
void memory_rows(CheckResult& r, const Baseline& base, const Baseline& now, const CheckTolerances& tol) {
  for (size_t k = 0; k < base.ranks.size() && k < now.ranks.size(); ++k) {
    const BaselineRank &b = base.ranks[k], &n = now.ranks[k];
    const std::string at = "memory.rank" + std::to_string(k) + ".";
    for (const auto& [cat, v] : b.by_category) bytes_row(r, at + cat, v, bytes_of(n.by_category, cat), tol);
    if (b.host)
      for (const auto& [kind, v] : *b.host)
        bytes_row(r, at + "host_" + kind, v, n.host ? bytes_of(*n.host, kind) : 0, tol,
                  kind == "pinned" ? "page-locked host memory (offload pin_memory)" : "");
    growth_rows(r, at, b, &n, tol);
  }
}

// Where a config value came from, with the release that set a default ("since DeepSpeed 0.19.5 (...)").
std::string origin(const BaselineConfigValue* e) {
  if (!e) return "absent";
  const std::string source = e->source.is_string() ? e->source.get<std::string>() : "?";
  return source + (e->note.is_string() && !e->note.get<std::string>().empty() ? " (" + e->note.get<std::string>() + ")" : "");
}

// The effective DeepSpeed config, key by key: a value that differs fails, with where each
// came from (a release's default, the file, a flag, "auto"), so an upgrade that changes a
// default is named as the change it is. One passing row when nothing differs.
void config_rows(CheckResult& r, const Baseline& base, const Baseline& now) {
  if (!base.effective_config || !now.effective_config) return;
  int same = 0;
  for (const auto& [key, was] : *base.effective_config) {
    const auto it = now.effective_config->find(key);
    const BaselineConfigValue* is = it == now.effective_config->end() ? nullptr : &it->second;
    if (is && is->value == was.value) {
      ++same;
      continue;
    }
    r.rows.push_back({"config." + key, was.value, is ? is->value : json(), "exact", false,
                      "source " + origin(&was) + " -> " + origin(is) + "; zrepro config --config ... shows each value"});
  }
  r.rows.push_back({"config (effective keys unchanged)", same, same, "exact", true, ""});
}

void trajectory_rows(CheckResult& r, const Baseline& base, const Baseline& now, const CheckTolerances& tol) {
  const double t = loss_tolerance(base.precision.value_or("fp32")) * tol.loss_scale;
  using Steps = std::vector<std::optional<double>> Baseline::*;
  for (const auto& [key, member, scale] : {std::tuple<const char*, Steps, double>{"loss", &Baseline::loss, 1.0},
                                           {"grad_norm", &Baseline::grad_norm, 3.0}}) {
    const auto &a = base.*member, &b = now.*member;
    double worst = 0;
    int64_t at = -1;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
      if (!a[i] || !b[i]) {  // a skipped step's grad norm is null
        if (a[i] != b[i]) worst = INFINITY, at = static_cast<int64_t>(i);
        continue;
      }
      const double rel = std::fabs(*b[i] - *a[i]) / std::max(std::fabs(*a[i]), 1e-12);
      if (rel > worst) worst = rel, at = static_cast<int64_t>(i);
    }
    r.rows.push_back({std::string(key) + " (worst step)", at >= 0 ? json_of(a[at]) : json(nullptr),
                      at >= 0 ? json_of(b[at]) : json(nullptr), fmt(t * scale) + " relative", worst <= t * scale,
                      at >= 0 ? "step " + std::to_string(at) + ", relative difference " + fmt(worst) : ""});
  }
}

// [Note: step time against the machine]: the allowed ratio widens with the spread both runs
// measured (a loaded machine's steps and kernel timings scatter more); advisory unless gated.
void time_rows(CheckResult& r, const Baseline& base, const Baseline& now, const CheckTolerances& tol) {
  const BaselineTime &a = base.time, &b = now.time;
  if (a.ratio <= 0 || b.ratio <= 0) {  // under --time-gate a time not measured is no pass
    if (tol.time_gate)
      r.rows.push_back({"step time / calibration", a.ratio, b.ratio, "measured on both sides", false,
                        std::string("--time-gate: the step time was not measured ") +
                            (a.ratio <= 0 ? "in the baseline" : "in this run") + ", so it cannot be judged",
                        RowKind::figure, ""});
    return;
  }
  const double allowed = std::max(tol.time_ratio, 1 + 2 * (a.spread + b.spread));
  const bool within = b.ratio <= allowed * a.ratio;
  const std::string basis = "calibration " + fmt(b.calibration_s) + " s now (" + b.source + "), " + fmt(a.calibration_s) +
                            " s then (" + a.source + "); spreads " + fmt(a.spread) + " then, " + fmt(b.spread) + " now";
  r.rows.push_back({"step time / calibration", a.ratio, b.ratio, "<= " + fmt(allowed) + "x", within || !tol.time_gate,
                    "now " + fmt(b.ratio / a.ratio) + "x the baseline; " + basis +
                        (tol.time_gate ? "" : within ? "" : "; advisory (--time-gate fails on it)"),
                    tol.time_gate ? RowKind::figure : RowKind::advisory, ""});
}

// Why the planner stopped predicting the run's peak, from what changed between the runs:
// only a LibTorch that changed is blamed for the tapes (issue 60: a row blamed "a LibTorch
// upgrade" when there was none).
std::string plan_moved_cause(const Baseline& base, const Baseline& now) {
  const Environment a = Environment::from_json(base.env), b = Environment::from_json(now.env);
  std::vector<std::string> changed;
  const auto va = a.versions(), vb = b.versions();
  for (size_t i = 0; i < va.size(); ++i)
    if (va[i].second && vb[i].second && va[i].second != vb[i].second)
      changed.push_back(va[i].first + " " + *va[i].second + " -> " + *vb[i].second);
  const bool libtorch = a.libtorch_version && b.libtorch_version && a.libtorch_version != b.libtorch_version;
  if (libtorch)
    return "the planner no longer predicts this run's peak: LibTorch changed (" + *a.libtorch_version + " -> " +
           *b.libtorch_version + "); re-derive its activation tapes (docs/design/ARCHITECTURE.md, --memory-log)";
  std::string joined;
  for (const auto& c : changed) joined += (joined.empty() ? "" : ", ") + c;
  return "the planner no longer predicts this run's peak" +
         (changed.empty() ? std::string(" and no version changed between the runs (LibTorch ") +
                                b.libtorch_version.value_or("unknown") +
                                " on both): the run's own memory moved; the bytes rows above say which category"
                          : " with the same LibTorch; what changed: " + joined);
}

void plan_rows(CheckResult& r, const Baseline& base, const Baseline& now, const CheckTolerances& tol) {
  const double a = base.plan_over_measured.value_or(0), b = now.plan_over_measured.value_or(0);
  if (a <= 0 || b <= 0) return;
  const bool within = std::fabs(b - a) <= tol.plan_ratio;
  r.rows.push_back({"planned / measured peak", a, b, "+-" + fmt(tol.plan_ratio), within,
                    within ? "" : plan_moved_cause(base, now)});
}

// A run's arguments as flag -> value ("--steps 3", "--steps=3"; a flag without a value is
// "true"; a repeated flag's values joined by ","). --config is left out: its file is
// compared by content, wherever it lies.
std::map<std::string, std::string> flags_of(const std::vector<std::string>& args) {
  std::map<std::string, std::string> m;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i], v = "true";
    if (a.rfind("--", 0) != 0) continue;
    if (const size_t eq = a.find('='); eq != std::string::npos) {
      v = a.substr(eq + 1), a = a.substr(0, eq);
    } else if (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) {
      v = args[++i];
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
void input_rows(CheckResult& r, const Baseline& base, const Baseline& now) {
  if (!base.inputs || !now.inputs) {
    r.rows.push_back({"inputs", nullptr, nullptr, "exact", true,
                      "not compared: " + std::string(base.inputs ? "the run" : "the baseline") +
                          " keeps no inputs (written by an older zrepro)", RowKind::input, ""});
    return;
  }
  const SummaryInputs &bi = *base.inputs, &ni = *now.inputs;
  const auto fa = flags_of(bi.args), fb = flags_of(ni.args);
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
  const json &ca = bi.config, &cb = ni.config;
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
                        "the config file (" + (ni.config_file.is_string() ? ni.config_file.get<std::string>() : "?") +
                            ") differs from the baseline's",
                        RowKind::input, ""});
    }
  }
  r.rows.push_back({"inputs (flags and config keys unchanged)", same, same, "exact", true, "", RowKind::input, ""});
}

}  // namespace

bool calibrated_in_run(const Summary& s) { return s.time && s.time->calibration; }

namespace {

BaselineTime time_of(const Summary& s, double check_time_calibration_s) {
  if (calibrated_in_run(s)) {
    const SummaryCalibration& c = *s.time->calibration;
    return {c.step_s_median, c.median_s, c.step_over_calibration, c.spread + c.step_spread,
            "during the run, " + std::to_string(c.samples) + " samples"};
  }
  const double step = s.time && s.time->step_s_median ? *s.time->step_s_median : 0.0;
  const double k = check_time_calibration_s;
  return {step, k, k > 0 ? step / k : 0.0, 0.0, "at check time, not during the run (a summary from an older zrepro)"};
}

// The effective config's entries as key -> value and source.
std::map<std::string, BaselineConfigValue> config_of(const Summary& s) {
  std::map<std::string, BaselineConfigValue> config;
  for (const SummaryConfigEntry& e : s.config_entries())
    config[e.key] = {e.value, e.source, e.note ? json(*e.note) : json(nullptr)};
  return config;
}

}  // namespace

Baseline make_baseline(const Summary& s, double check_time_calibration_s, const std::string& from) {
  Baseline b;
  b.from = from, b.status = s.status;
  b.world_size = s.world_size, b.zero_stage = s.zero_stage, b.skipped_steps = s.skipped_steps;
  b.precision = s.precision, b.deepspeed_version = s.deepspeed_version;
  if (s.model.is_object()) b.model = optional_of<std::string>(s.model, "name");
  b.env = s.env;
  b.inputs = s.run_inputs();
  for (const SummaryStep& st : s.steps) b.loss.push_back(st.loss), b.grad_norm.push_back(st.grad_norm);
  b.steps = static_cast<int64_t>(s.steps.size());
  if (s.memory)
    for (const SummaryRankMemory& r : s.memory->ranks) {
      BaselineRank br{r.rank, r.category_peaks, SummaryCategories{{"pinned", r.host_pinned_bytes}, {"pageable", r.host_pageable_bytes}}, std::nullopt};
      if (!r.growth_bytes_per_step.empty()) br.growth = r.growth_bytes_per_step;
      b.ranks.push_back(br);
    }
  b.peak_bytes = s.peak_bytes();
  if (s.comm)
    for (const auto& [op, v] : s.comm->bytes_per_step)
      if (v) b.comm_bytes_per_step[op] = *v;
  b.effective_config = config_of(s);
  const auto planned = s.planned();
  if (b.peak_bytes > 0 && planned && planned->peak_bytes > 0)
    b.plan_over_measured = static_cast<double>(planned->peak_bytes) / static_cast<double>(b.peak_bytes);
  b.time = time_of(s, check_time_calibration_s);
  return b;
}

json Baseline::to_json() const {
  json loss_j = json::array(), gn_j = json::array(), ranks_j = json::array(), config = json::object();
  for (size_t i = 0; i < loss.size(); ++i) loss_j.push_back(json_of(loss[i]));
  for (const auto& g : grad_norm) gn_j.push_back(json_of(g));
  for (const auto& r : ranks) {
    json rj = {{"rank", r.rank}, {"by_category", categories_json(r.by_category)},
               {"growth", r.growth ? json(*r.growth) : json(nullptr)}};
    if (r.host) rj["host"] = categories_json(*r.host);
    ranks_j.push_back(rj);
  }
  json j = {{"zrepro_baseline", kBaselineVersion}, {"from", from},
            {"status", status},                    {"world_size", json_of(world_size)},
            {"zero_stage", json_of(zero_stage)},   {"precision", json_of(precision)},
            {"deepspeed_version", json_of(deepspeed_version)}, {"skipped_steps", json_of(skipped_steps)},
            {"env", env},                          {"model", json_of(model)},
            {"inputs", inputs ? json{{"args", inputs->args}, {"config_file", inputs->config_file}, {"config", inputs->config}}
                              : json(nullptr)},
            {"steps", steps},                      {"loss", loss_j},
            {"grad_norm", gn_j},                   {"memory", {{"ranks", ranks_j}, {"peak_bytes", peak_bytes}}},
            {"comm_bytes_per_step", comm_bytes_per_step},
            {"time", {{"step_s_median", time.step_s_median}, {"calibration_s", time.calibration_s}, {"ratio", time.ratio},
                      {"spread", time.spread}, {"source", time.source}}}};
  if (effective_config) {
    for (const auto& [k, v] : *effective_config) config[k] = {{"value", v.value}, {"source", v.source}, {"note", v.note}};
    j["effective_config"] = config;
  }
  if (plan_over_measured) j["plan_over_measured"] = *plan_over_measured;
  return j;
}

namespace {

// A baseline's keys read with errors that name them (Baseline::from_json).
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
  // The setup's scalars: absent or null, or of their type.
  void scalars(const json& b) const {
    for (const char* k : {"world_size", "zero_stage", "skipped_steps"})
      if (b.contains(k) && !b[k].is_null() && !b[k].is_number_integer()) refuse(k, b[k], "a whole number or null");
    for (const char* k : {"status", "from", "precision", "deepspeed_version", "model"})
      if (b.contains(k) && !b[k].is_null() && !b[k].is_string()) refuse(k, b[k], "a string or null");
  }
  void check(const json& b) const {
    if (!b.is_object()) refuse("the file", b, "a JSON object (a zrepro baseline)");
    const json version = b.value("zrepro_baseline", json());
    if (!version.is_number_integer() || version.get<int64_t>() != kBaselineVersion)
      refuse("\"zrepro_baseline\" (the format version)", version, std::to_string(kBaselineVersion));
    need(b, "", "steps", &json::is_number_integer, "a whole number of steps");
    for (const char* k : {"loss", "grad_norm"})
      for (const auto& x : need(b, "", k, &json::is_array, "an array of per-step values"))
        if (!x.is_number() && !x.is_null()) refuse(std::string(k) + "[...]", x, "numbers (null for a skipped step)");
    memory(b);
    map_of(b, "", "comm_bytes_per_step", &json::is_number, "bytes", false);
    const json& time = need(b, "", "time", &json::is_object, "an object with step_s_median, calibration_s and ratio");
    for (const char* k : {"step_s_median", "calibration_s", "ratio"})
      if (need(time, "time.", k, &json::is_number, "seconds").get<double>() < 0)  // a negative ratio skipped --time-gate
        refuse(std::string("time.") + k, time[k], "a time or ratio >= 0 (0: not measured)");
    if (time.contains("spread") && !time["spread"].is_null() && (!time["spread"].is_number() || time["spread"].get<double>() < 0))
      refuse("time.spread", time["spread"], "a relative spread >= 0");
    optional_parts(b);
    scalars(b);
  }
};

std::vector<std::optional<double>> per_step(const json& a) {
  std::vector<std::optional<double>> v;
  for (const auto& x : a) v.push_back(x.is_null() ? std::nullopt : std::optional<double>(x.get<double>()));
  return v;
}

BaselineRank rank_of(const json& r) {
  BaselineRank br;
  br.rank = r.value("rank", 0);
  br.by_category = categories_of(r.at("by_category"));
  if (r.contains("host") && r["host"].is_object()) br.host = categories_of(r["host"]);
  if (r.contains("growth") && r["growth"].is_object()) br.growth = r["growth"].get<std::map<std::string, double>>();
  return br;
}

BaselineTime baseline_time_of(const json& t) {
  return {t.at("step_s_median").get<double>(), t.at("calibration_s").get<double>(), t.at("ratio").get<double>(),
          optional_of<double>(t, "spread").value_or(0), optional_of<std::string>(t, "source").value_or("?")};
}

}  // namespace

Baseline Baseline::from_json(const json& j, const std::string& path) {
  BaselineShape{path}.check(j);
  Baseline b;
  b.from = optional_of<std::string>(j, "from").value_or("");
  b.status = optional_of<std::string>(j, "status").value_or("");
  b.world_size = optional_of<int64_t>(j, "world_size");
  b.zero_stage = optional_of<int64_t>(j, "zero_stage");
  b.skipped_steps = optional_of<int64_t>(j, "skipped_steps");
  b.precision = optional_of<std::string>(j, "precision");
  b.deepspeed_version = optional_of<std::string>(j, "deepspeed_version");
  b.model = optional_of<std::string>(j, "model");
  b.env = j.value("env", json());
  if (j.contains("inputs") && !j["inputs"].is_null())
    b.inputs = SummaryInputs::from_json(j["inputs"]);
  b.steps = j["steps"].get<int64_t>();
  b.loss = per_step(j["loss"]), b.grad_norm = per_step(j["grad_norm"]);
  for (const auto& r : j["memory"]["ranks"]) b.ranks.push_back(rank_of(r));
  b.peak_bytes = j["memory"]["peak_bytes"].get<int64_t>();
  b.comm_bytes_per_step = j["comm_bytes_per_step"].get<std::map<std::string, double>>();
  if (j.contains("effective_config")) {
    b.effective_config.emplace();
    for (const auto& [k, e] : j["effective_config"].items())
      (*b.effective_config)[k] = {e["value"], e.value("source", json()), e.value("note", json())};
  }
  b.plan_over_measured = optional_of<double>(j, "plan_over_measured");
  b.time = baseline_time_of(j["time"]);
  return b;
}

namespace {

// What changed underneath: reported, never failed on.
void version_rows(CheckResult& r, const Baseline& base, const Baseline& now) {
  const auto was = Environment::from_json(base.env).versions(), is = Environment::from_json(now.env).versions();
  for (size_t i = 0; i < was.size(); ++i)
    if (was[i].second != is[i].second)
      r.rows.push_back({"env." + was[i].first, json_of(was[i].second), json_of(is[i].second), "reported", true, "changed",
                        RowKind::version, ""});
  if (base.deepspeed_version != now.deepspeed_version)
    r.rows.push_back({"deepspeed_version", json_of(base.deepspeed_version), json_of(now.deepspeed_version), "reported", true,
                      "changed: zrepro config --diff-versions names what the profile changes", RowKind::version, ""});
}

}  // namespace

CheckResult check_against(const Baseline& base, const Baseline& now, const CheckTolerances& tol) {
  CheckResult r;
  input_rows(r, base, now);
  const char* setup = "a different setup is not comparable: check the same config and flags";
  exact(r, "setup.world_size", json_of(base.world_size), json_of(now.world_size), setup);
  exact(r, "setup.zero_stage", json_of(base.zero_stage), json_of(now.zero_stage), setup);
  exact(r, "setup.precision", json_of(base.precision), json_of(now.precision), setup);
  exact(r, "setup.model", json_of(base.model), json_of(now.model), setup);
  exact(r, "status", base.status, now.status);
  exact(r, "steps", base.steps, now.steps);
  exact(r, "skipped_steps", json_of(base.skipped_steps), json_of(now.skipped_steps));
  memory_rows(r, base, now, tol);
  config_rows(r, base, now);
  for (const auto& [op, v] : base.comm_bytes_per_step) {
    const auto it = now.comm_bytes_per_step.find(op);
    exact(r, "comm.bytes_per_step." + op, v, it == now.comm_bytes_per_step.end() ? json() : json(it->second));
    r.rows.back().unit = "bytes";
  }
  trajectory_rows(r, base, now, tol);
  time_rows(r, base, now, tol);
  plan_rows(r, base, now, tol);
  version_rows(r, base, now);
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

std::string CheckResult::headline() const {
  if (passed()) return verdict();
  const bool inputs = inputs_differ();
  const auto first = std::find_if(rows.begin(), rows.end(), [&](const CheckRow& x) {
    return !x.ok && (!inputs || x.kind == RowKind::input);
  });
  auto text = [&](const json& v) {
    if (v.is_number() && first->unit.rfind("bytes", 0) == 0) return format_bytes(v.get<int64_t>());
    return v.is_string() ? v.get<std::string>() : v.dump();
  };
  std::string s = verdict() + ": " + first->metric + " " + text(first->baseline) + " -> " + text(first->now) +
                  (first->tolerance.empty() ? "" : " (tolerance " + first->tolerance + ")");
  if (failures() > 1) s += "; " + std::to_string(failures() - 1) + " more row(s) moved";
  return s;
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
