// See diagnose.h.
#include "trainer/diagnose/diagnose.h"

#include <algorithm>
#include <sstream>

#include "trainer/diagnose/decide.h"
#include "trainer/diagnose/evidence.h"
#include "trainer/diagnose/log_text.h"

namespace zrepro {

using json = nlohmann::json;
using diagnosis::Scan;
using diagnosis::decide;
using diagnosis::decide_hang;
using diagnosis::scan;
using diagnosis::wall_clock_shares;

Diagnosis diagnose_log(const std::string& text, const json& job_config) {
  Scan s = scan(text);
  if (job_config.is_object()) {  // what the config print would have said
    const json z = job_config.value("zero_optimization", json::object());
    if (!s.numbers.contains("zero_stage") && z.value("stage", json()).is_number_integer())
      s.numbers["zero_stage"] = z["stage"];
    if (z.value("stage3_gather_16bit_weights_on_model_save", z.value("stage3_gather_fp16_weights_on_model_save", false)) ==
        true)
      s.numbers["config"]["gather_16bit_on_save"] = true;
    for (const char* section : {"offload_optimizer", "offload_param"}) {
      const json o = z.value(section, json::object());
      if (!o.is_object() || o.value("device", "none") == "none") continue;
      s.numbers["config"]["offload"] = true;
      // pin_memory unset: true since DeepSpeed 0.19.5 (the upgrade-pinned-default scenario)
      if (!o.value("pin_memory", true)) s.numbers["config"]["pin_memory"] = false;
      if (!o.contains("pin_memory")) s.numbers["config"]["pin_memory_unset"] = true;
    }
  }
  Diagnosis d;
  decide(s, d);
  for (const auto& [id, ev] : s.found)
    if (id != "zero_stage" && id != "completed_steps" && id != "model_state_share")  // context, in numbers
      d.evidence.insert(d.evidence.end(), ev.begin(), ev.end());
  std::sort(d.evidence.begin(), d.evidence.end(), [](const Evidence& a, const Evidence& b) { return a.line < b.line; });
  d.numbers = s.numbers;
  d.numbers.erase("phase_hint");
  if (s.numbers.contains("wall_clock_ms")) d.numbers["wall_clock_shares"] = wall_clock_shares(s.numbers);
  if (s.numbers.contains("phase_hint") && !s.numbers.contains("phase")) d.numbers["phase"] = s.numbers["phase_hint"];
  if (!s.ranks.empty()) d.numbers["ranks_seen"] = s.ranks;
  if (d.confidence == "none") d.closest = s.error_lines;
  if (d.closest.empty() && d.scenario.empty() && s.found.count("wall_clock")) d.closest = s.found.at("wall_clock");
  return d;
}

Diagnosis diagnose_flight_recorder(const std::vector<json>& rows) {
  Scan s;
  json w = json::array();
  for (const auto& r : rows) {
    w.push_back(r);
    const std::string text = "rank " + std::to_string(r.value("rank", -1)) + ": last collective #" +
                             std::to_string(r.value("seq", int64_t(-1))) + " " + r.value("op", std::string("?")) + " (" +
                             std::to_string(r.value("numel_in", int64_t(-1))) + " -> " +
                             std::to_string(r.value("numel_out", int64_t(-1))) + " elements, " +
                             (r["state"].is_string() ? r["state"].get<std::string>() : std::string("?")) + ") of " +
                             std::to_string(r.value("entries", 0)) + " recorded, " + r.value("file", std::string());
    s.found["flight_recorder"].push_back({"flight_recorder", 0, text});
  }
  s.numbers["watchdog"] = w;
  if (!rows.empty()) s.numbers["collective_seq"] = rows[0].value("seq", json()), s.numbers["collective_op"] = rows[0].value("op", json());
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

json Diagnosis::to_json() const {
  auto ev = [](const std::vector<Evidence>& v) {
    json a = json::array();
    for (const auto& e : v) a.push_back({{"fingerprint", e.fingerprint}, {"line", e.line}, {"text", e.text}});
    return a;
  };
  return {{"checkpoint", checkpoint.empty() ? json(nullptr) : json(checkpoint)},
          {"scenario", scenario.empty() ? json(nullptr) : json(scenario)},
          {"cause", cause.empty() ? json(nullptr) : json(cause)},
          {"confidence", confidence},
          {"reason", reason},
          {"alternatives", alternatives},
          {"try_next", try_next},
          {"numbers", numbers},
          {"evidence", ev(evidence)},
          {"closest", ev(closest)}};
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
  json shown = numbers;
  shown.erase("memory_timeline");  // below, in one line
  if (!shown.empty()) o << "  numbers: " << shown.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
  if (numbers.contains("memory_timeline") && !numbers["memory_timeline"].empty()) {
    const json& t = numbers["memory_timeline"];
    const auto peak = std::max_element(t.begin(), t.end(), [](const json& a, const json& b) {
      return a.value("Max_MA_GB", 0.0) < b.value("Max_MA_GB", 0.0);
    });
    o << "  memory (DeepSpeed's see_memory_usage, " << t.size() << " lines): Max_MA " << (*peak)["Max_MA_GB"].dump()
      << " GB at line " << (*peak)["line"].dump() << " (" << (*peak).value("label", std::string()) << "); last MA "
      << t.back()["MA_GB"].dump() << " GB, CA " << t.back()["CA_GB"].dump() << " GB (numbers.memory_timeline)\n";
  }
  for (const auto& a : alternatives) o << "  or " << a << "\n";
  for (const auto& t : try_next) o << "  try: " << t << "\n";
  if (!scenario.empty()) o << "  reproduce: zrepro scenario run " << scenario << "  (configs/scenarios/" << scenario << "/README.md)\n";
  for (const auto& e : closest) o << "  closest, line " << e.line << ": " << printable(e.text) << "\n";
  return o.str();
}

}  // namespace zrepro
