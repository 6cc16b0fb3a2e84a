// See ab_doc.h.
#include "trainer/report/ab_doc.h"

#include <sstream>
#include <utility>

#include "device/base/errors.h"
#include "device/base/json_optional.h"

namespace zrepro {

using json = nlohmann::json;

// Named, not anonymous: the unity build puts this file beside others with helpers of
// the same names.
namespace ab_doc {

// [Note: a row's figures by name] The optional figures of a row, by their ab.json name:
// to_json, from_json and `--expect less|more:KEY` (AbRow::figure) walk this one table.
using RowNumber = std::optional<double> AbRow::*;
const std::vector<std::pair<const char*, RowNumber>>& row_numbers() {
  static const std::vector<std::pair<const char*, RowNumber>> t = {
      {"final_loss", &AbRow::final_loss},
      {"step_s_median", &AbRow::step_s_median},
      {"tokens_per_s", &AbRow::tokens_per_s},
      {"comm_wait_share", &AbRow::comm_wait_share},
      {"offload_copy_share", &AbRow::offload_copy_share},
      {"data_wait_share", &AbRow::data_wait_share},
      {"comm_wait_s_max", &AbRow::comm_wait_s_max},
      {"device_busy_fraction", &AbRow::device_busy_fraction},
      {"overlap_ratio", &AbRow::overlap_ratio},
      {"offload_wait_s_per_step", &AbRow::offload_wait_s_per_step},
      {"capacity_bytes", &AbRow::capacity_bytes},
      {"peak_bytes_max", &AbRow::peak_bytes_max},
      {"peak_bytes_spread", &AbRow::peak_bytes_spread},
      {"peak_share_of_capacity", &AbRow::peak_share_of_capacity},
      {"alloc_retries_per_step", &AbRow::alloc_retries_per_step},
      {"target_peak_bytes_max", &AbRow::target_peak_bytes_max},
      {"target_capacity_bytes", &AbRow::target_capacity_bytes},
      {"target_planned_peak_bytes", &AbRow::target_planned_peak_bytes},
      {"planned_peak_bytes", &AbRow::planned_peak_bytes},
      {"parameter_factor", &AbRow::parameter_factor},
      {"host_link_gbps", &AbRow::host_link_gbps},
      {"interconnect_busbw_gbps", &AbRow::interconnect_busbw_gbps}};
  return t;
}

using RowText = std::optional<std::string> AbRow::*;
const std::vector<std::pair<const char*, RowText>>& row_texts() {
  static const std::vector<std::pair<const char*, RowText>> t = {{"phase", &AbRow::phase},
                                                                 {"checkpoint", &AbRow::checkpoint},
                                                                 {"target_planned_verdict", &AbRow::target_planned_verdict},
                                                                 {"target_model", &AbRow::target_model},
                                                                 {"target_limits", &AbRow::target_limits},
                                                                 {"device", &AbRow::device}};
  return t;
}

json failure_json(const AbFailure& f) {
  return {{"kind", f.kind},
          {"rank", f.rank},
          {"message", f.message},
          {"hint", f.hint},
          {"needed_bytes", json_of(f.needed_bytes)},
          {"memlock_limit_bytes", json_of(f.memlock_limit_bytes)},
          {"locked_bytes", json_of(f.locked_bytes)},
          {"hang", f.hang ? f.hang->to_json() : json(nullptr)}};
}

AbFailure failure_of(const json& j) {
  AbFailure f;
  f.kind = j.at("kind").get<std::string>();
  f.rank = j.at("rank").get<int>();
  f.message = j.at("message").get<std::string>();
  f.hint = j.at("hint").get<std::string>();
  f.needed_bytes = optional_of<int64_t>(j, "needed_bytes");
  f.memlock_limit_bytes = optional_of<int64_t>(j, "memlock_limit_bytes");
  f.locked_bytes = optional_of<int64_t>(j, "locked_bytes");
  if (j.contains("hang") && !j["hang"].is_null()) f.hang = HangDiagnosis::from_json(j["hang"]);
  return f;
}

json worst_json(const std::optional<AbFidelityWorst>& w) {
  if (!w) return nullptr;
  return {{"category", w->category}, {"toy_share", json_of(w->toy_share)}, {"target_share", json_of(w->target_share)},
          {"off_points", w->off_points}};
}

AbFidelityWorst worst_of(const json& j) {
  return {j.at("category").get<std::string>(), optional_of<double>(j, "toy_share"), optional_of<double>(j, "target_share"),
          j.at("off_points").get<double>()};
}

json rank_parts_json(const AbRow& r) {
  json mem = json::array(), time = json::array();
  for (const auto& m : r.rank_memory)
    mem.push_back({{"rank", m.rank}, {"peak_bytes", m.peak_bytes}, {"peak_phase", m.peak_phase},
                   {"by_category", categories_json(m.by_category)}, {"host_pinned_bytes", m.host_pinned_bytes}});
  for (const auto& t : r.rank_time) time.push_back({{"rank", t.rank}, {"comm_wait_s", t.comm_wait_s}, {"step_s", t.step_s}});
  return {{"rank_memory", mem}, {"rank_time", time}};
}

void rank_parts_of(const json& j, AbRow& r) {
  for (const auto& m : j.at("rank_memory"))
    r.rank_memory.push_back({m.at("rank").get<int>(), m.at("peak_bytes").get<int64_t>(), m.at("peak_phase").get<std::string>(),
                             categories_of(m.at("by_category")), m.at("host_pinned_bytes").get<int64_t>()});
  for (const auto& t : j.at("rank_time"))
    r.rank_time.push_back({t.at("rank").get<int>(), t.at("comm_wait_s").get<double>(), t.at("step_s").get<double>()});
}

json curves_json(const AbCurves& c) {
  json j = json::object();
  for (const auto& [run, values] : c) {
    json v = json::array();
    for (const auto& x : values) v.push_back(json_of(x));
    j[run] = v;
  }
  return j;
}

AbCurves curves_of(const json& j) {
  AbCurves c;
  for (const auto& [run, values] : j.items())
    for (const auto& x : values) c[run].push_back(x.is_null() ? std::nullopt : std::optional<double>(x.get<double>()));
  return c;
}

json comparison_json(const AbComparison& c) {
  return {{"ranks", c.ranks},
          {"a_shows_symptom", c.a_shows_symptom},
          {"b_fails", c.b_fails},
          {"max_loss_rel_diff", json_of(c.max_loss_rel_diff)},
          {"max_grad_norm_rel_diff", json_of(c.max_grad_norm_rel_diff)},
          {"target_inside_band", c.target_inside_band},
          {"verdict", c.verdict}};
}

AbComparison comparison_of(const json& j) {
  AbComparison c;
  c.ranks = j.at("ranks").get<int>();
  c.a_shows_symptom = j.at("a_shows_symptom").get<bool>();
  c.b_fails = j.at("b_fails").get<bool>();
  c.max_loss_rel_diff = optional_of<double>(j, "max_loss_rel_diff");
  c.max_grad_norm_rel_diff = optional_of<double>(j, "max_grad_norm_rel_diff");
  c.target_inside_band = j.at("target_inside_band").get<bool>();
  c.verdict = j.at("verdict").get<std::string>();
  return c;
}

json equivalence_json(const AbEquivalence& e) {
  json states = json::object();
  for (const auto& [cat, s] : e.model_states)
    states[cat] = {{"measured", s.measured}, {"expected", s.expected}, {"holds", s.holds}};
  return {{"side", e.side},         {"ranks", {e.base_ranks, e.ranks}}, {"holds", json_of(e.holds)},
          {"max_loss_rel_diff", json_of(e.max_loss_rel_diff)}, {"model_states", states}, {"line", e.line}};
}

AbEquivalence equivalence_of(const json& j) {
  AbEquivalence e;
  e.side = j.at("side").get<std::string>();
  e.base_ranks = j.at("ranks").at(0).get<int>();
  e.ranks = j.at("ranks").at(1).get<int>();
  e.holds = optional_of<bool>(j, "holds");
  e.max_loss_rel_diff = optional_of<double>(j, "max_loss_rel_diff");
  for (const auto& [cat, s] : j.at("model_states").items())
    e.model_states[cat] = {s.at("measured").get<double>(), s.at("expected").get<double>(), s.at("holds").get<bool>()};
  e.line = j.at("line").get<std::string>();
  return e;
}

}  // namespace ab_doc

std::string AbRow::label() const { return side + " x" + std::to_string(ranks); }

std::optional<double> AbRow::figure(const std::string& key) const {
  using namespace ab_doc;
  for (const auto& [name, member] : row_numbers())
    if (key == name) return this->*member;
  return std::nullopt;
}

json AbRow::to_json() const {
  using namespace ab_doc;
  json j = {{"side", side},
            {"ranks", ranks},
            {"exit_code", exit_code},
            {"log", log},
            {"status", status},
            {"failed_ranks", json_of(failed_ranks)},
            {"steps", json_of(steps)},
            {"straggler_rank", json_of(straggler_rank)},
            {"by_category", by_category ? categories_json(*by_category) : json(nullptr)},
            {"target_band", target_band ? target_band->to_json() : json(nullptr)},
            {"fidelity_worst", worst_json(fidelity_worst)},
            {"fidelity_ok", json_of(fidelity_ok)},
            {"failure", failure ? failure_json(*failure) : json(nullptr)}};
  for (const auto& [name, member] : row_numbers()) j[name] = json_of(this->*member);
  for (const auto& [name, member] : row_texts()) j[name] = json_of(this->*member);
  j.update(rank_parts_json(*this));
  return j;
}

AbRow AbRow::from_json(const json& j) {
  using namespace ab_doc;
  AbRow r;
  r.side = j.at("side").get<std::string>();
  r.ranks = j.at("ranks").get<int>();
  r.exit_code = j.at("exit_code").get<int>();
  r.log = j.at("log").get<std::string>();
  r.status = j.at("status").get<std::string>();
  r.failed_ranks = optional_of<int>(j, "failed_ranks");
  r.steps = optional_of<int64_t>(j, "steps");
  r.straggler_rank = optional_of<int>(j, "straggler_rank");
  if (!j.at("by_category").is_null()) r.by_category = categories_of(j["by_category"]);
  if (!j.at("target_band").is_null()) r.target_band = BandCall::from_json(j["target_band"]);
  if (!j.at("fidelity_worst").is_null()) r.fidelity_worst = worst_of(j["fidelity_worst"]);
  r.fidelity_ok = optional_of<bool>(j, "fidelity_ok");
  if (!j.at("failure").is_null()) r.failure = failure_of(j["failure"]);
  for (const auto& [name, member] : row_numbers()) r.*member = optional_of<double>(j, name);
  for (const auto& [name, member] : row_texts()) r.*member = optional_of<std::string>(j, name);
  rank_parts_of(j, r);
  return r;
}

json AbDocument::to_json() const {
  using namespace ab_doc;
  json rs = json::array(), cs = json::array(), es = json::array();
  for (const auto& r : rows) rs.push_back(r.to_json());
  for (const auto& c : comparisons) cs.push_back(comparison_json(c));
  for (const auto& e : equivalence) es.push_back(equivalence_json(e));
  return {{"schema", schema},         {"plan_only", plan_only},      {"expect", expect},
          {"outcome", outcome},       {"exit_code", exit_code},      {"message", json_of(message)},
          {"rows", rs},               {"comparisons", cs},           {"equivalence", es},
          {"loss_curves", curves_json(loss_curves)}, {"grad_norm_curves", curves_json(grad_norm_curves)}};
}

AbDocument AbDocument::from_json(const json& j) {
  using namespace ab_doc;
  require_schema(j, kAbSchema, "ab.json", "rerun the comparison with this zrepro (docs/reference/ab-json.md)");
  AbDocument d;
  d.plan_only = j.at("plan_only").get<bool>();
  d.expect = j.at("expect").get<std::string>();
  d.outcome = j.at("outcome").get<std::string>();
  d.exit_code = j.at("exit_code").get<int>();
  d.message = optional_of<std::string>(j, "message");
  for (const auto& r : j.at("rows")) d.rows.push_back(AbRow::from_json(r));
  for (const auto& c : j.at("comparisons")) d.comparisons.push_back(comparison_of(c));
  for (const auto& e : j.at("equivalence")) d.equivalence.push_back(equivalence_of(e));
  d.loss_curves = curves_of(j.at("loss_curves"));
  d.grad_norm_curves = curves_of(j.at("grad_norm_curves"));
  return d;
}

}  // namespace zrepro
