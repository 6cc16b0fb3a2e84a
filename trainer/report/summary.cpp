// See summary.h.
#include "trainer/report/summary.h"

#include <algorithm>
#include <cmath>

namespace zrepro {

using json = nlohmann::json;

namespace {

SummaryStep step_of(const json& j) {
  SummaryStep s;
  s.step = j.value("step", int64_t(0));
  s.loss = optional_of<double>(j, "loss");
  s.grad_norm = optional_of<double>(j, "grad_norm");
  s.loss_scale = j.value("loss_scale", 1.0);
  s.skipped = j.value("skipped", false);
  s.lr = j.value("lr", 0.0);
  s.step_s = optional_of<double>(j, "step_s");
  s.replicas_identical = optional_of<bool>(j, "replicas_identical");
  return s;
}

json step_json(const SummaryStep& s) {
  json j = {{"step", s.step}, {"loss", json_of(s.loss)}, {"grad_norm", json_of(s.grad_norm)},
            {"loss_scale", s.loss_scale}, {"skipped", s.skipped}, {"lr", s.lr}};
  if (s.step_s) j["step_s"] = *s.step_s;
  if (s.replicas_identical) j["replicas_identical"] = *s.replicas_identical;
  return j;
}

SummaryRankMemory rank_memory_of(const json& j) {
  SummaryRankMemory m;
  m.rank = j.at("rank").get<int>();
  m.peak_bytes = j.at("peak_bytes").get<int64_t>();
  m.peak_phase = j.at("peak_phase").get<std::string>();
  m.peak_reserved_bytes = j.at("peak_reserved_bytes").get<int64_t>();
  m.by_category = categories_of(j.at("by_category"));
  m.category_peaks = categories_of(j.at("category_peaks"));
  m.model_states = categories_of(j.at("model_states"));
  for (const auto& p : j.at("phases"))
    m.phases.push_back({p.at("phase").get<std::string>(), p.at("peak_bytes").get<int64_t>(),
                        p.at("peak_reserved_bytes").get<int64_t>()});
  m.host_pinned_bytes = j.at("host_pinned_bytes").get<int64_t>();
  m.host_pageable_bytes = j.at("host_pageable_bytes").get<int64_t>();
  m.comm_wait_s = j.at("comm_wait_s").get<double>();
  m.alloc_retries = j.value("alloc_retries", int64_t{0});  // summaries before 2026-12-05 have none
  if (j.contains("growth_bytes_per_step") && j["growth_bytes_per_step"].is_object())
    for (const auto& [k, v] : j["growth_bytes_per_step"].items()) m.growth_bytes_per_step[k] = v.get<double>();
  return m;
}

json rank_memory_json(const SummaryRankMemory& m) {
  json phases = json::array();
  for (const auto& p : m.phases)
    phases.push_back({{"phase", p.phase}, {"peak_bytes", p.peak_bytes}, {"peak_reserved_bytes", p.peak_reserved_bytes}});
  return {{"rank", m.rank},
          {"peak_bytes", m.peak_bytes},
          {"peak_phase", m.peak_phase},
          {"peak_reserved_bytes", m.peak_reserved_bytes},
          {"by_category", categories_json(m.by_category)},
          {"category_peaks", categories_json(m.category_peaks)},
          {"phases", phases},
          {"model_states", categories_json(m.model_states)},
          {"host_pinned_bytes", m.host_pinned_bytes},
          {"host_pageable_bytes", m.host_pageable_bytes},
          {"comm_wait_s", m.comm_wait_s},
          {"alloc_retries", m.alloc_retries},
          {"growth_bytes_per_step", m.growth_bytes_per_step.empty() ? json::object() : json(m.growth_bytes_per_step)}};
}

std::optional<SummaryCalibration> calibration_of(const json& j) {
  if (!j.is_object()) return std::nullopt;
  SummaryCalibration c;
  c.kernel = j.at("kernel").get<std::string>();
  c.samples = j.at("samples").get<int64_t>();
  c.steps = j.at("steps").get<int64_t>();
  c.median_s = j.at("median_s").get<double>();
  c.spread = j.at("spread").get<double>();
  c.step_s_median = j.at("step_s_median").get<double>();
  c.step_spread = j.at("step_spread").get<double>();
  c.step_over_calibration = j.at("step_over_calibration").get<double>();
  return c;
}

json calibration_json(const std::optional<SummaryCalibration>& c) {
  if (!c) return nullptr;
  return {{"kernel", c->kernel}, {"samples", c->samples}, {"median_s", c->median_s}, {"spread", c->spread},
          {"steps", c->steps}, {"step_s_median", c->step_s_median}, {"step_spread", c->step_spread},
          {"step_over_calibration", c->step_over_calibration}};
}

SummaryTime time_of(const json& j) {
  SummaryTime t;
  t.step_s_median = optional_of<double>(j, "step_s_median");
  t.tokens_per_s = optional_of<double>(j, "tokens_per_s");
  for (const auto& [k, v] : j.at("breakdown_s").items()) t.breakdown_s[k] = v.get<double>();
  for (const auto& r : j.at("ranks"))
    t.ranks.push_back({r.at("rank").get<int>(), r.at("comm_wait_s").get<double>(), r.at("step_s").get<double>()});
  if (const json st = j.value("straggler", json()); st.is_object())
    t.straggler = SummaryStraggler{st.at("rank").get<int>(), st.at("others_wait_s").get<double>(),
                                   st.at("own_wait_s").get<double>()};
  t.calibration = calibration_of(j.value("calibration", json()));
  return t;
}

json time_json(const SummaryTime& t) {
  json breakdown = json::object(), ranks = json::array();
  for (const auto& [k, v] : t.breakdown_s) breakdown[k] = v;
  for (const auto& r : t.ranks) ranks.push_back({{"rank", r.rank}, {"comm_wait_s", r.comm_wait_s}, {"step_s", r.step_s}});
  return {{"step_s_median", json_of(t.step_s_median)}, {"tokens_per_s", json_of(t.tokens_per_s)},
          {"breakdown_s", breakdown}, {"ranks", ranks},
          {"straggler", t.straggler ? json{{"rank", t.straggler->rank}, {"others_wait_s", t.straggler->others_wait_s},
                                           {"own_wait_s", t.straggler->own_wait_s}}
                                    : json(nullptr)},
          {"calibration", calibration_json(t.calibration)}};
}

SummaryComm comm_of(const json& j) {
  SummaryComm c;
  for (const auto& [op, v] : j.at("bytes_per_step").items())
    c.bytes_per_step[op] = v.is_null() ? std::nullopt : std::optional<double>(v.get<double>());
  c.ops = j.value("ops", json());
  c.modelled_busbw_GBps = optional_of<double>(j, "modelled_busbw_GBps");
  c.paired_different_parameters = j.value("paired_different_parameters", json());
  return c;
}

json comm_json(const SummaryComm& c) {
  json per_step = json::object();
  for (const auto& [op, v] : c.bytes_per_step) per_step[op] = json_of(v);
  json out = {{"bytes_per_step", per_step}, {"ops", c.ops}, {"modelled_busbw_GBps", json_of(c.modelled_busbw_GBps)}};
  if (!c.paired_different_parameters.is_null()) out["paired_different_parameters"] = c.paired_different_parameters;
  return out;
}

constexpr const char* kFailureCore[] = {"kind", "rank", "phase", "message", "checkpoint", "hint"};
constexpr const char* kFailureViews[] = {"ranks", "ranks_reported", "ranks_without_a_view"};

bool one_of(const std::string& k, const char* const* begin, const char* const* end) {
  return std::any_of(begin, end, [&](const char* c) { return k == c; });
}

SummaryRankViews views_of(const json& j) {
  SummaryRankViews v;
  for (const auto& r : j.at("ranks")) {
    SummaryRankView x;
    x.rank = r.at("rank").get<int>();
    x.status = r.at("status").get<std::string>();
    x.kind = optional_of<std::string>(r, "kind");
    x.phase = optional_of<std::string>(r, "phase");
    x.message = optional_of<std::string>(r, "message");
    x.checkpoint = optional_of<std::string>(r, "checkpoint");
    x.allocated_bytes = optional_of<int64_t>(r, "allocated_bytes");
    x.capacity_bytes = optional_of<int64_t>(r, "capacity_bytes");
    v.ranks.push_back(x);
  }
  v.reported = j.at("ranks_reported").get<std::vector<int>>();
  v.without_a_view = j.at("ranks_without_a_view").get<std::vector<int>>();
  return v;
}

void add_views_json(const SummaryRankViews& v, json& j) {
  json ranks = json::array();
  for (const auto& r : v.ranks)
    ranks.push_back({{"rank", r.rank}, {"status", r.status}, {"kind", json_of(r.kind)}, {"phase", json_of(r.phase)},
                     {"message", json_of(r.message)}, {"checkpoint", json_of(r.checkpoint)},
                     {"allocated_bytes", json_of(r.allocated_bytes)}, {"capacity_bytes", json_of(r.capacity_bytes)}});
  j["ranks"] = ranks;
  j["ranks_reported"] = v.reported;
  j["ranks_without_a_view"] = v.without_a_view;
}

// A failure record: the six fields of make_failure, the ranks' views of a merged
// multi-process failure, the rest the kind's own. A record without a kind (a merged
// failure whose lowest view carried none) keeps every other field in details.
SummaryFailure failure_of(const json& j) {
  SummaryFailure f;
  const bool core = j.contains("kind");
  if (j.contains("ranks_reported")) f.views = views_of(j);
  if (core) {
    f.kind = j.at("kind").get<std::string>();
    f.rank = j.at("rank").get<int>();
    f.phase = j.at("phase").get<std::string>();
    f.message = j.at("message").get<std::string>();
    f.checkpoint = j.at("checkpoint").get<std::string>();
    f.hint = j.at("hint").get<std::string>();
  }
  for (const auto& item : j.items()) {
    const std::string& k = item.key();  // (clang 14 does not capture structured bindings)
    if (f.views && one_of(k, std::begin(kFailureViews), std::end(kFailureViews))) continue;
    if (!core || !one_of(k, std::begin(kFailureCore), std::end(kFailureCore))) f.details[k] = item.value();
  }
  return f;
}

json failure_json(const SummaryFailure& f) {
  json j = f.details.is_object() ? f.details : json::object();
  if (f.views) add_views_json(*f.views, j);
  if (f.kind.empty()) return j;
  j.update(json{{"kind", f.kind}, {"rank", f.rank}, {"phase", f.phase}, {"message", f.message},
                {"checkpoint", f.checkpoint}, {"hint", f.hint}});
  return j;
}

}  // namespace

Summary Summary::from_json(const json& j) {
  Summary s;
  s.schema = j.value("schema", std::string());
  s.status = j.at("status").get<std::string>();
  s.world_size = optional_of<int64_t>(j, "world_size");
  s.zero_stage = optional_of<int64_t>(j, "zero_stage");
  s.precision = optional_of<std::string>(j, "precision");
  s.deepspeed_version = optional_of<std::string>(j, "deepspeed_version");
  s.device = optional_of<std::string>(j, "device");
  if (j.contains("batch") && j["batch"].is_object())
    s.batch = SummaryBatch{j["batch"].at("micro").get<int64_t>(), j["batch"].at("grad_accum").get<int64_t>(),
                           j["batch"].at("global").get<int64_t>()};
  s.model = j.value("model", json());
  s.env = j.value("env", json());
  s.data = j.value("data", json());
  s.effective_config = j.value("effective_config", json());
  s.inputs = j.value("inputs", json());
  for (const auto& st : j.value("steps", json::array())) s.steps.push_back(step_of(st));
  s.skipped_steps = optional_of<int64_t>(j, "skipped_steps");
  if (j.contains("time") && j["time"].is_object()) s.time = time_of(j["time"]);
  if (j.contains("memory") && j["memory"].is_object()) {
    const json& m = j["memory"];
    SummaryMemory mem;
    mem.device_capacity_bytes = optional_of<int64_t>(m, "device_capacity_bytes");
    for (const auto& r : m.value("ranks", json::array())) mem.ranks.push_back(rank_memory_of(r));
    mem.planned = m.value("planned", json());
    for (const auto& p : m.value("timeline", json::array()))  // absent before 2026-12-05
      mem.timeline.push_back({p.at("step").get<int64_t>(), p.at("phase").get<std::string>(),
                              p.at("peak_bytes").get<int64_t>(), categories_of(p.at("by_category")),
                              p.value("unfinished", false)});
    s.memory = mem;
  }
  if (j.contains("comm") && j["comm"].is_object()) s.comm = comm_of(j["comm"]);
  s.offload = j.value("offload", json());
  if (j.contains("failure") && j["failure"].is_object()) s.failure = failure_of(j["failure"]);
  s.virtual_ranks = j.value("virtual_ranks", json());
  s.config_mismatch = j.value("config_mismatch", json());
  s.checkpoint = j.value("checkpoint", json());
  s.scale_down = j.value("scale_down", json());
  return s;
}

json Summary::to_json() const {
  json j;
  if (!schema.empty()) j["schema"] = schema;
  j["status"] = status;
  j["world_size"] = json_of(world_size);
  j["zero_stage"] = json_of(zero_stage);
  j["precision"] = json_of(precision);
  j["deepspeed_version"] = json_of(deepspeed_version);
  j["device"] = json_of(device);
  j["batch"] = batch ? json{{"micro", batch->micro}, {"grad_accum", batch->grad_accum}, {"global", batch->global}}
                     : json(nullptr);
  j["model"] = model;
  j["env"] = env;
  j["data"] = data;
  j["effective_config"] = effective_config;
  j["inputs"] = inputs;
  j["steps"] = json::array();
  for (const auto& st : steps) j["steps"].push_back(step_json(st));
  if (skipped_steps) j["skipped_steps"] = *skipped_steps;
  j["time"] = time ? time_json(*time) : json(nullptr);
  if (memory) {
    json ranks = json::array();
    for (const auto& r : memory->ranks) ranks.push_back(rank_memory_json(r));
    json timeline = json::array();
    for (const auto& p : memory->timeline) {
      json pj = {{"step", p.step}, {"phase", p.phase}, {"peak_bytes", p.peak_bytes}, {"by_category", categories_json(p.by_category)}};
      if (p.unfinished) pj["unfinished"] = true;
      timeline.push_back(pj);
    }
    j["memory"] = {{"device_capacity_bytes", json_of(memory->device_capacity_bytes)}, {"ranks", ranks}, {"timeline", timeline}};
    if (!memory->planned.is_null()) j["memory"]["planned"] = memory->planned;
  } else {
    j["memory"] = nullptr;
  }
  j["comm"] = comm ? comm_json(*comm) : json(nullptr);
  j["offload"] = offload;
  j["failure"] = failure ? failure_json(*failure) : json(nullptr);
  if (!virtual_ranks.is_null()) j["virtual_ranks"] = virtual_ranks;
  if (!config_mismatch.is_null()) j["config_mismatch"] = config_mismatch;
  if (!checkpoint.is_null()) j["checkpoint"] = checkpoint;
  if (!scale_down.is_null()) j["scale_down"] = scale_down;
  return j;
}

std::optional<SummaryCalibration> SummaryCalibration::from_json(const json& j) { return calibration_of(j); }

SummaryFailure SummaryFailure::from_json(const json& j) { return failure_of(j); }

SummaryPlanned SummaryPlanned::from_json(const json& j) {
  SummaryPlanned p;
  p.verdict = j.at("verdict").get<std::string>();
  p.oom_phase = optional_of<std::string>(j, "oom_phase");
  p.peak_bytes = j.at("peak_bytes").get<int64_t>();
  p.peak_phase = j.at("peak_phase").get<std::string>();
  p.device_capacity_bytes = optional_of<int64_t>(j, "device_capacity_bytes");
  if (j.contains("by_category")) p.by_category = categories_of(j["by_category"]);
  return p;
}

SummaryScaleDown SummaryScaleDown::from_json(const json& j) {
  SummaryScaleDown s;
  s.target_name = j.at("target_model").at("name").get<std::string>();
  s.target_params = j.at("target_model").at("params").get<int64_t>();
  s.toy_params = j.at("toy_model").at("params").get<int64_t>();
  s.parameter_factor = j.at("parameter_factor").get<double>();
  s.target_planned = SummaryPlanned::from_json(j.at("target_planned"));
  for (const auto& r : j.at("fidelity"))
    s.fidelity.push_back({r.at("category").get<std::string>(), r.at("target_share").get<double>(), r.at("toy_share").get<double>()});
  s.target_band = j.value("target_band", json());
  for (const auto& l : j.value("limits", json::array()))
    s.limits.push_back({l.at("flag").get<std::string>(), l.at("target_limit_bytes").get<int64_t>(),
                        l.at("target_need_bytes").get<int64_t>(), l.at("fits_at_target").get<bool>()});
  return s;
}

SummaryOffload SummaryOffload::from_json(const json& j) {
  SummaryOffload o;
  o.host_link_gbps = optional_of<double>(j, "host_link_gbps");
  for (const auto& r : j.at("ranks")) {
    SummaryOffloadRank x;
    x.rank = r.at("rank").get<int>();
    x.d2h_bytes = r.at("d2h_bytes").get<int64_t>();
    x.h2d_bytes = r.at("h2d_bytes").get<int64_t>();
    x.host_pinned_bytes = r.at("host_pinned_bytes").get<int64_t>();
    x.host_pageable_bytes = r.at("host_pageable_bytes").get<int64_t>();
    x.copy_s = r.at("copy_s").get<double>();
    x.exposed_s = r.at("exposed_s").get<double>();
    x.overlap_ratio = optional_of<double>(r, "overlap_ratio");
    x.device_busy_fraction = optional_of<double>(r, "device_busy_fraction");
    o.ranks.push_back(x);
  }
  return o;
}

std::optional<SummaryPlanned> SummaryMemory::plan() const {
  if (!planned.is_object()) return std::nullopt;
  return SummaryPlanned::from_json(planned);
}

std::optional<SummaryPlanned> Summary::planned() const { return memory ? memory->plan() : std::nullopt; }

std::optional<SummaryScaleDown> Summary::scaled() const {
  if (!scale_down.is_object()) return std::nullopt;
  return SummaryScaleDown::from_json(scale_down);
}

std::optional<SummaryOffload> Summary::offloaded() const {
  if (!offload.is_object()) return std::nullopt;
  return SummaryOffload::from_json(offload);
}

SummaryCheckpoint SummaryCheckpoint::from_json(const json& j) {
  SummaryCheckpoint c;
  c.format = j.at("format").get<std::string>();
  for (const auto& x : j.at("saved"))
    c.saved.push_back({x.at("step").get<int64_t>(), x.at("folder").get<std::string>(), x.at("seconds").get<double>(),
                       x.at("consolidated_16bit_host_bytes").get<int64_t>()});
  const json& r = j.at("resumed");
  if (r.is_object())
    c.resumed = Resumed{r.at("folder").get<std::string>(), r.at("tag").get<std::string>(), r.at("step").get<int64_t>(),
                        r.value("universal", false)};
  const json z = j.value("zero_to_fp32", json());
  if (z.is_object())
    c.zero_to_fp32 = ZeroToFp32{z.at("mode").get<std::string>(), z.at("tag").get<std::string>(), z.at("files").size(),
                                z.at("peak_anon_host_bytes").get<int64_t>(), z.at("mapped_bytes").get<int64_t>()};
  return c;
}

std::map<std::string, SummaryCommOp> SummaryComm::op_figures() const {
  std::map<std::string, SummaryCommOp> out;
  if (!ops.is_object()) return out;
  for (const auto& [op, v] : ops.items())
    out[op] = {v.at("calls_per_step").get<double>(), v.at("bytes_per_step").get<double>(),
               v.at("seconds_per_step").get<double>(), optional_of<double>(v, "algbw_GBps"), optional_of<double>(v, "busbw_GBps")};
  return out;
}

std::optional<SummaryCheckpoint> Summary::checkpoints() const {
  if (!checkpoint.is_object()) return std::nullopt;
  return SummaryCheckpoint::from_json(checkpoint);
}

std::vector<SummaryConfigEntry> Summary::config_entries() const {
  std::vector<SummaryConfigEntry> out;
  if (!effective_config.is_object()) return out;
  for (const auto& e : effective_config.value("entries", json::array()))
    out.push_back({e.at("key").get<std::string>(), e.value("value", json()), e.at("source").get<std::string>(),
                   optional_of<std::string>(e, "note")});
  return out;
}

std::optional<SummaryModelSizes> Summary::model_sizes() const {
  if (!model.is_object()) return std::nullopt;
  return SummaryModelSizes{model.at("name").get<std::string>(), model.value("family", std::string()),
                           model.at("params").get<int64_t>(),
                           model.at("layers").get<int64_t>(), model.at("hidden").get<int64_t>(), model.at("seq").get<int64_t>()};
}

json Summary::resolved_config() const {
  return effective_config.is_object() ? effective_config.value("resolved", json::object()) : json::object();
}

std::optional<SummaryVirtualRanks> Summary::virtual_figures() const {
  if (!virtual_ranks.is_object()) return std::nullopt;
  return SummaryVirtualRanks{virtual_ranks.at("world_size").get<int64_t>(), virtual_ranks.at("as_rank").get<int64_t>(),
                             virtual_ranks.at("data_rule").get<std::string>(), virtual_ranks.value("note", std::string())};
}

SummaryInputs SummaryInputs::from_json(const json& j) {
  return {j.at("args").get<std::vector<std::string>>(), j.value("config_file", json()), j.value("config", json())};
}

std::optional<SummaryInputs> Summary::run_inputs() const {
  if (!inputs.is_object() || !inputs.contains("args")) return std::nullopt;
  return SummaryInputs::from_json(inputs);
}

std::optional<SummaryData> Summary::data_figures() const {
  if (!data.is_object()) return std::nullopt;
  SummaryData d;
  d.entropy_floor_nats = data.at("entropy_floor_nats").get<double>();
  d.seq_len_dist = data.value("seq_len_dist", d.seq_len_dist);  // absent: a run that did not train
  if (data.contains("loss_normalization")) d.loss_normalization = data.at("loss_normalization").at("kind").get<std::string>();
  return d;
}

const SummaryRankMemory* Summary::rank_memory(int rank) const {
  if (!memory) return nullptr;
  for (const auto& r : memory->ranks)
    if (r.rank == rank) return &r;
  return nullptr;
}

int64_t Summary::peak_bytes() const {
  int64_t peak = 0;
  if (memory)
    for (const auto& r : memory->ranks) peak = std::max(peak, r.peak_bytes);
  return peak;
}

std::vector<SummaryStep> steps_of(const json& summary) {
  std::vector<SummaryStep> steps;
  if (summary.is_object() && summary.contains("steps") && summary["steps"].is_array())
    for (const auto& st : summary["steps"])
      if (st.is_object()) steps.push_back(step_of(st));
  return steps;
}

double max_step_rel_diff(const std::vector<SummaryStep>& a, const std::vector<SummaryStep>& b,
                         const std::string& figure) {
  auto value = [&](const SummaryStep& s) {
    const std::optional<double>& v = figure == "grad_norm" ? s.grad_norm : s.loss;
    return v ? *v : NAN;
  };
  double worst = NAN;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const double x = value(a[i]), y = value(b[i]);
    if (!std::isfinite(x) || !std::isfinite(y)) continue;
    const double d = std::abs(x - y) / std::max(std::abs(x), 1e-12);
    worst = std::isfinite(worst) ? std::max(worst, d) : d;
  }
  return worst;
}

SummaryCategories categories_of(const json& j) {
  SummaryCategories c;
  if (j.is_object())
    for (const auto& [k, v] : j.items()) c[k] = v.get<int64_t>();
  return c;
}

json categories_json(const SummaryCategories& c) {
  json j = json::object();
  for (const auto& [k, v] : c) j[k] = v;
  return j;
}

}  // namespace zrepro
