// See log_figures.h.
#include "trainer/diagnose/log_figures.h"

#include <cmath>
#include <utility>

#include "device/base/json_optional.h"

namespace zrepro {

using json = nlohmann::json;

// Named, not anonymous: the unity build puts this file beside others with helpers of
// the same names.
namespace log_figures {

// The scalar figures by their JSON name: to_json and from_json walk these tables.
template <class T>
using Figures = std::vector<std::pair<const char*, std::optional<T> LogFigures::*>>;

const Figures<int64_t>& whole_figures() {
  static const Figures<int64_t> t = {
      {"request_bytes", &LogFigures::request_bytes},
      {"capacity_bytes", &LogFigures::capacity_bytes},
      {"free_bytes", &LogFigures::free_bytes},
      {"reserved_unallocated_bytes", &LogFigures::reserved_unallocated_bytes},
      {"allocated_bytes", &LogFigures::allocated_bytes},
      {"reserved_bytes", &LogFigures::reserved_bytes},
      {"process_bytes", &LogFigures::process_bytes},
      {"train_batch_size", &LogFigures::train_batch_size},
      {"micro_batch", &LogFigures::micro_batch},
      {"grad_accum", &LogFigures::grad_accum},
      {"world_size", &LogFigures::world_size},
      {"saved_world_size", &LogFigures::saved_world_size},
      {"zero_stage", &LogFigures::zero_stage},
      {"completed_steps", &LogFigures::completed_steps},
      {"straggler_rank", &LogFigures::straggler_rank},
      {"allocator_cache_flushes", &LogFigures::allocator_cache_flushes},
      {"preprocessing_elapsed_s", &LogFigures::preprocessing_elapsed_s},
      {"size_mismatch_a", &LogFigures::size_mismatch_a},
      {"size_mismatch_b", &LogFigures::size_mismatch_b},
      {"overflow_steps", &LogFigures::overflow_steps},
      {"overflows_at_scale_1", &LogFigures::overflows_at_scale_1},
      {"collective_seq", &LogFigures::collective_seq},
      {"timeout_ms", &LogFigures::timeout_ms},
      {"ran_ms", &LogFigures::ran_ms}};
  return t;
}

const Figures<double>& real_figures() {
  static const Figures<double> t = {{"last_attempted_loss_scale", &LogFigures::last_attempted_loss_scale},
                                    {"min_attempted_loss_scale", &LogFigures::min_attempted_loss_scale},
                                    {"allocated_gb_before_failure", &LogFigures::allocated_gb_before_failure},
                                    {"model_states_share", &LogFigures::model_states_share},
                                    {"host_memory_percent", &LogFigures::host_memory_percent}};
  return t;
}

const Figures<std::string>& text_figures() {
  static const Figures<std::string> t = {{"category", &LogFigures::category}, {"collective_op", &LogFigures::collective_op}};
  return t;
}

template <class T>
void write(const LogFigures& f, const Figures<T>& table, json& j) {
  for (const auto& [name, member] : table)
    if (f.*member) j[name] = *(f.*member);
}

template <class T>
void read(const json& j, const Figures<T>& table, LogFigures& f) {
  for (const auto& [name, member] : table) f.*member = optional_of<T>(j, name);
}

json memory_line_json(const MemoryLine& m) {
  return {{"line", m.line}, {"label", m.label}, {"MA_GB", m.ma_gb}, {"Max_MA_GB", m.max_ma_gb},
          {"CA_GB", m.ca_gb}, {"Max_CA_GB", m.max_ca_gb}};
}

MemoryLine memory_line_of(const json& j) {
  return {j.at("line").get<int>(), j.at("label").get<std::string>(), j.at("MA_GB").get<double>(),
          j.at("Max_MA_GB").get<double>(), j.at("CA_GB").get<double>(), j.at("Max_CA_GB").get<double>()};
}

json config_json(const JobConfigFacts& c) {
  json j = json::object();
  if (c.gather_16bit_on_save) j["gather_16bit_on_save"] = true;
  if (c.offload) j["offload"] = true;
  if (c.pin_memory_off) j["pin_memory"] = false;
  if (c.pin_memory_unset) j["pin_memory_unset"] = true;
  return j;
}

JobConfigFacts config_of(const json& j) {
  return {j.value("gather_16bit_on_save", false), j.value("offload", false), !j.value("pin_memory", true),
          j.value("pin_memory_unset", false)};
}

json shares_json(const std::optional<WallClockShares>& s) {
  if (!s) return nullptr;
  return {{"fwd", s->fwd}, {"bwd", s->bwd}, {"bwd_allreduce", s->bwd_allreduce}, {"step", s->step}};
}

}  // namespace log_figures

json WatchdogEntry::to_json() const {
  json j = {{"rank", rank}};
  if (seq) j["seq"] = *seq;
  if (op) j["op"] = *op;
  if (numel_in) j["numel_in"] = *numel_in;
  if (numel_out) j["numel_out"] = *numel_out;
  if (recorded) j["state"] = json_of(recorded->state), j["entries"] = recorded->entries, j["file"] = recorded->file;
  return j;
}

WatchdogEntry WatchdogEntry::from_json(const json& j) {
  WatchdogEntry w;
  w.rank = j.at("rank").get<int>();
  w.seq = optional_of<int64_t>(j, "seq");
  w.op = optional_of<std::string>(j, "op");
  w.numel_in = optional_of<int64_t>(j, "numel_in");
  w.numel_out = optional_of<int64_t>(j, "numel_out");
  if (j.contains("file"))
    w.recorded = Recorded{optional_of<std::string>(j, "state"), j.at("entries").get<int64_t>(), j.at("file").get<std::string>()};
  return w;
}

std::optional<WallClockShares> LogFigures::wall_clock_shares() const {
  if (!wall_clock_ms) return std::nullopt;
  const auto& w = *wall_clock_ms;
  const std::string p = w.count("fwd") || w.count("step") ? "" : "micro_";
  const auto ms = [&](const std::string& k) {
    const auto it = w.find(p + k);
    return it == w.end() ? 0.0 : it->second;
  };
  const double fwd = ms("fwd"), bwd = ms("bwd"), step = ms("step"), total = fwd + bwd + step;
  if (!(fwd > 0) || !(bwd > 0) || !std::isfinite(total)) return std::nullopt;
  return WallClockShares{fwd / total, bwd / total, ms("bwd_allreduce") / total, step / total};
}

json LogFigures::to_json() const {
  using namespace log_figures;
  json j = json::object();
  write(*this, whole_figures(), j);
  write(*this, real_figures(), j);
  write(*this, text_figures(), j);
  if (const auto p = oom_phase()) j["phase"] = *p;
  if (pinned_allocation_oom) j["pinned_allocation_oom"] = *pinned_allocation_oom;
  if (!trainer_mismatch.empty()) j["trainer_mismatch"] = trainer_mismatch;
  if (!watchdog.empty()) {
    j["watchdog"] = json::array();
    for (const WatchdogEntry& w : watchdog) j["watchdog"].push_back(w.to_json());
  }
  if (!memory_timeline.empty()) {
    j["memory_timeline"] = json::array();
    for (const MemoryLine& m : memory_timeline) j["memory_timeline"].push_back(memory_line_json(m));
  }
  if (wall_clock_ms) j["wall_clock_ms"] = *wall_clock_ms, j["wall_clock_shares"] = shares_json(wall_clock_shares());
  if (config.any()) j["config"] = config_json(config);
  if (!ranks_seen.empty()) j["ranks_seen"] = ranks_seen;
  return j;
}

LogFigures LogFigures::from_json(const json& j) {
  using namespace log_figures;
  LogFigures f;
  read(j, whole_figures(), f);
  read(j, real_figures(), f);
  read(j, text_figures(), f);
  f.phase = optional_of<std::string>(j, "phase");
  f.pinned_allocation_oom = optional_of<bool>(j, "pinned_allocation_oom");
  f.trainer_mismatch = j.value("trainer_mismatch", std::map<std::string, std::string>());
  for (const json& w : j.value("watchdog", json::array())) f.watchdog.push_back(WatchdogEntry::from_json(w));
  for (const json& m : j.value("memory_timeline", json::array())) f.memory_timeline.push_back(memory_line_of(m));
  f.wall_clock_ms = optional_of<std::map<std::string, double>>(j, "wall_clock_ms");
  f.config = config_of(j.value("config", json::object()));
  f.ranks_seen = j.value("ranks_seen", std::vector<int>());
  return f;
}

}  // namespace zrepro
