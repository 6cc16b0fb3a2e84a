// See diagnose.h.
#include "trainer/diagnose/diagnose.h"

#include <algorithm>
#include <sstream>

#include "device/base/errors.h"
#include "device/base/json_optional.h"
#include "trainer/diagnose/decide.h"
#include "trainer/diagnose/evidence.h"
#include "trainer/diagnose/log_text.h"

namespace zrepro {

using json = nlohmann::json;
using diagnosis::Scan;
using diagnosis::decide;
using diagnosis::decide_hang;
using diagnosis::scan;

namespace diagnose_detail {

// What the job's --config says that the config print would have (its ZeRO stage when the
// log does not say it, its save-time gather, offload and pinning).
void add_config_facts(const json& job_config, LogFigures& n) {
  const json z = job_config.value("zero_optimization", json::object());
  if (!n.zero_stage && z.value("stage", json()).is_number_integer()) n.zero_stage = z["stage"].get<int64_t>();
  if (z.value("stage3_gather_16bit_weights_on_model_save", z.value("stage3_gather_fp16_weights_on_model_save", false)) ==
      true)
    n.config.gather_16bit_on_save = true;
  for (const char* section : {"offload_optimizer", "offload_param"}) {
    const json o = z.value(section, json::object());
    if (!o.is_object() || o.value("device", "none") == "none") continue;
    n.config.offload = true;
    // pin_memory unset: true since DeepSpeed 0.19.5 (the upgrade-pinned-default scenario)
    if (!o.value("pin_memory", true)) n.config.pin_memory_off = true;
    if (!o.contains("pin_memory")) n.config.pin_memory_unset = true;
  }
}

}  // namespace diagnose_detail

Diagnosis diagnose_log(const std::string& text, const json& job_config) { return diagnose_scan(scan(text), job_config); }

Diagnosis diagnose_scan(Scan s, const json& job_config) {
  if (job_config.is_object()) diagnose_detail::add_config_facts(job_config, s.numbers);
  Diagnosis d;
  decide(s, d);
  for (const auto& [id, ev] : s.found)
    if (id != "zero_stage" && id != "completed_steps" && id != "model_state_share")  // context, in numbers
      d.evidence.insert(d.evidence.end(), ev.begin(), ev.end());
  std::sort(d.evidence.begin(), d.evidence.end(), [](const Evidence& a, const Evidence& b) { return a.line < b.line; });
  d.numbers = s.numbers;
  if (d.confidence == "none") d.closest = s.error_lines;
  if (d.closest.empty() && d.scenario.empty() && s.found.count("wall_clock")) d.closest = s.found.at("wall_clock");
  return d;
}

Diagnosis diagnose_flight_recorder(const std::vector<WatchdogEntry>& rows) {
  Scan s;
  for (const WatchdogEntry& r : rows) {
    const WatchdogEntry::Recorded rec = r.recorded.value_or(WatchdogEntry::Recorded{});
    const std::string text = "rank " + std::to_string(r.rank) + ": last collective #" +
                             std::to_string(r.seq.value_or(-1)) + " " + r.op.value_or("?") + " (" +
                             std::to_string(r.numel_in.value_or(-1)) + " -> " + std::to_string(r.numel_out.value_or(-1)) +
                             " elements, " + rec.state.value_or("?") + ") of " + std::to_string(rec.entries) +
                             " recorded, " + rec.file;
    s.found["flight_recorder"].push_back({"flight_recorder", 0, text});
  }
  s.numbers.watchdog = rows;
  if (!rows.empty()) s.numbers.collective_seq = rows[0].seq, s.numbers.collective_op = rows[0].op;
  Diagnosis d;
  if (rows.empty()) {
    d.confidence = "none";
    d.reason = "the Flight Recorder dumps hold no collective";
    return d;
  }
  decide_hang(s, d);
  d.reason = "PyTorch's Flight Recorder, every rank's last collective: " + d.reason;
  d.evidence = s.found["flight_recorder"];
  d.numbers = s.numbers;
  return d;
}

namespace diagnose_detail {

json evidence_json(const std::vector<Evidence>& v) {
  json a = json::array();
  for (const auto& e : v) a.push_back({{"fingerprint", e.fingerprint}, {"line", e.line}, {"text", e.text}});
  return a;
}

std::vector<Evidence> evidence_of(const json& a) {
  std::vector<Evidence> v;
  for (const json& e : a)
    v.push_back({e.at("fingerprint").get<std::string>(), e.at("line").get<int>(), e.at("text").get<std::string>()});
  return v;
}

json planner_json(const PlannerCheck& c) {
  if (c.refused) return {{"planned_verdict", c.planned_verdict}, {"agrees", c.agrees}, {"refused", *c.refused}};
  return {{"planned_verdict", c.planned_verdict}, {"agrees", c.agrees},
          {"planned_phase", json_of(c.planned_phase)}, {"planned_peak_bytes", json_of(c.planned_peak_bytes)},
          {"capacity_bytes", json_of(c.capacity_bytes)}, {"log_phase", json_of(c.log_phase)}};
}

PlannerCheck planner_of(const json& j) {
  return {j.at("planned_verdict").get<std::string>(), j.at("agrees").get<bool>(), optional_of<std::string>(j, "refused"),
          optional_of<std::string>(j, "planned_phase"), optional_of<std::string>(j, "log_phase"),
          optional_of<int64_t>(j, "planned_peak_bytes"), optional_of<int64_t>(j, "capacity_bytes")};
}

void write_read(const LogRead& r, json& j) {
  if (r.log_bytes) j["log_bytes"] = *r.log_bytes;
  if (r.log_encoding) j["log_encoding"] = *r.log_encoding;
  if (r.log_read) j["log_read"] = *r.log_read;
  if (r.flight_recorder_ranks) j["flight_recorder_ranks"] = *r.flight_recorder_ranks;
}

LogRead read_of(const json& j) {
  return {optional_of<int64_t>(j, "log_bytes"), optional_of<std::string>(j, "log_encoding"),
          optional_of<std::string>(j, "log_read"), optional_of<int64_t>(j, "flight_recorder_ranks")};
}

// null (none) as "", how the type holds it.
std::string text_or_empty(const json& j, const char* key) { return j.at(key).is_null() ? "" : j.at(key).get<std::string>(); }

}  // namespace diagnose_detail

json Diagnosis::to_json() const {
  using namespace diagnose_detail;
  json j = {{"schema", kDiagnoseSchema},
          {"checkpoint", checkpoint.empty() ? json(nullptr) : json(checkpoint)},
          {"scenario", scenario.empty() ? json(nullptr) : json(scenario)},
          {"cause", cause.empty() ? json(nullptr) : json(cause)},
          {"confidence", confidence},
          {"reason", reason},
          {"alternatives", alternatives},
          {"try_next", try_next},
          {"numbers", numbers.to_json()},
          {"evidence", evidence_json(evidence)},
          {"closest", evidence_json(closest)}};
  write_read(read, j);
  if (planner) j["planner"] = planner_json(*planner);
  return j;
}

Diagnosis Diagnosis::from_json(const json& j) {
  using namespace diagnose_detail;
  require_schema(j, kDiagnoseSchema, "diagnosis JSON",
                 "diagnose the log again with this zrepro (docs/reference/diagnose-json.md)");
  Diagnosis d;
  d.checkpoint = text_or_empty(j, "checkpoint");
  d.scenario = text_or_empty(j, "scenario");
  d.cause = text_or_empty(j, "cause");
  d.confidence = j.at("confidence").get<std::string>();
  d.reason = j.at("reason").get<std::string>();
  d.alternatives = j.at("alternatives").get<std::vector<std::string>>();
  d.try_next = j.at("try_next").get<std::vector<std::string>>();
  d.numbers = LogFigures::from_json(j.at("numbers"));
  d.evidence = evidence_of(j.at("evidence"));
  d.closest = evidence_of(j.at("closest"));
  d.read = read_of(j);
  if (j.contains("planner")) d.planner = planner_of(j.at("planner"));
  return d;
}

std::string Diagnosis::to_text() const {
  std::ostringstream o;
  if (scenario.empty()) {
    o << "[zrepro diagnose] " << reason << "\n";
  } else {
    o << "[zrepro diagnose] checkpoint " << checkpoint << ": " << scenario << " (" << confidence << "): " << reason << "\n";
  }
  if (scenario.empty() && !cause.empty())
    o << "[zrepro diagnose] checkpoint " << checkpoint << ": " << cause << " (" << confidence << "; no catalogue scenario "
      << "reproduces it yet)\n";
  for (const auto& e : evidence)
    o << "  " << (e.line > 0 ? "line " + std::to_string(e.line) + " " : std::string()) << "[" << e.fingerprint << "] "
      << printable(e.text) << "\n";
  json shown = numbers.to_json();
  shown.erase("memory_timeline");  // below, in one line
  if (!shown.empty()) o << "  numbers: " << shown.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
  if (const std::vector<MemoryLine>& t = numbers.memory_timeline; !t.empty()) {
    const auto peak = std::max_element(t.begin(), t.end(), [](const MemoryLine& a, const MemoryLine& b) {
      return a.max_ma_gb < b.max_ma_gb;
    });
    o << "  memory (DeepSpeed's see_memory_usage, " << t.size() << " lines): Max_MA " << json(peak->max_ma_gb).dump()
      << " GB at line " << peak->line << " (" << peak->label << "); last MA " << json(t.back().ma_gb).dump()
      << " GB, CA " << json(t.back().ca_gb).dump() << " GB (numbers.memory_timeline)\n";
  }
  for (const auto& a : alternatives) o << "  or " << a << "\n";
  for (const auto& t : try_next) o << "  try: " << t << "\n";
  if (!scenario.empty()) o << "  reproduce: zrepro scenario run " << scenario << "  (configs/scenarios/" << scenario << "/README.md)\n";
  for (const auto& e : closest) o << "  closest, line " << e.line << ": " << printable(e.text) << "\n";
  return o.str();
}

}  // namespace zrepro
