// `zrepro diagnose LOG`: a failed job's log (DeepSpeed / PyTorch / NCCL, several ranks
// interleaved, plain or gzip) to a diagnosis (trainer/report/diagnose.h). With --config
// and --device-memory it also asks the planner (`zrepro plan --json` as a child) whether
// it predicts what the log shows: the same failure phase, or a fit.
// Exit 0 when a scenario matched, 7 when the log has no known fingerprint, 2 on bad input.
#include <zlib.h>

#include <filesystem>
#include <iostream>

#include "trainer/app/cli.h"
#include "trainer/app/subprocess.h"
#include "trainer/report/diagnose.h"

namespace zrepro {

using json = nlohmann::json;

namespace {

// The whole file, gunzipped when it is gzip (zlib reads plain files unchanged).
std::string read_log(const std::string& path) {
  if (!std::filesystem::is_regular_file(path)) throw ConfigError("LOG: \"" + path + "\" is not a readable file");
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw ConfigError("LOG: cannot open \"" + path + "\"");
  std::string text;
  char buf[1 << 16];
  int n = 0;
  while ((n = gzread(f, buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
  int err = 0;
  const char* msg = gzerror(f, &err);
  gzclose(f);
  if (n < 0 || err < 0) throw ConfigError("LOG: \"" + path + "\" is a damaged gzip file (" + msg + ")");
  return text;
}

// The planner's view of the user's setup against what the log showed.
json planner_check(const Diagnosis& d, const std::vector<std::string>& plan_args, const std::string& log_dir) {
  std::vector<std::string> args = {"plan", "--json"};
  args.insert(args.end(), plan_args.begin(), plan_args.end());
  const std::string out = log_dir + "/zrepro_diagnose_plan.json";
  run_self_or_refuse("the plan for --config", args, out);
  const json p = read_json_file(out);
  std::filesystem::remove(out);
  if (!p.is_object()) return nullptr;
  const bool planned_oom = p.value("verdict", "") == "oom";
  const bool log_oom = d.checkpoint == "zero-stage" || d.numbers.contains("request_bytes");
  const std::string log_phase = d.numbers.value("phase", std::string());
  json c = {{"planned_verdict", p.value("verdict", "")},
            {"planned_phase", p.value("oom_phase", json())},
            {"planned_peak_bytes", p.value("peak_bytes", json())},
            {"capacity_bytes", p.value("device_capacity_bytes", json())},
            {"log_phase", log_phase.empty() ? json(nullptr) : json(log_phase)}};
  const bool phase_agrees = log_phase.empty() || !p.value("oom_phase", json()).is_string() ||
                            p["oom_phase"].get<std::string>() == log_phase;
  c["agrees"] = planned_oom == log_oom && (!planned_oom || phase_agrees);
  return c;
}

}  // namespace

int diagnose_command(int argc, char** argv) {
  cxxopts::Options o("zrepro diagnose", "From a failed job's log to the scenario it matches, the evidence lines, "
                                        "the numbers and what to try.");
  o.add_options("diagnose")
      ("log", "the log file (plain or .gz; several ranks interleaved are fine)", cxxopts::value<std::string>())
      ("config", "the job's DeepSpeed config: ask the planner whether it predicts what the log shows",
       cxxopts::value<std::string>())
      ("model", "the job's model (preset or HF config.json), with --config", cxxopts::value<std::string>())
      ("world-size", "the job's ranks, with --config", cxxopts::value<int>())
      ("device-memory", "the job's device capacity (a100-40gb, 80GB, ...), with --config", cxxopts::value<std::string>())
      ("json", "print the diagnosis as JSON")
      ("h,help", "show this help");
  o.parse_positional({"log"});
  try {
    auto r = parse(o, argc, argv);
    if (r.count("help") || !r.count("log")) {
      std::cout << o.help() << std::endl;
      return r.count("help") ? kExitOk : kExitBadInput;
    }
    const std::string path = r["log"].as<std::string>();
    const Diagnosis d = diagnose_log(read_log(path));
    json j = d.to_json();
    if (r.count("config")) {
      std::vector<std::string> plan = {"--config", r["config"].as<std::string>()};
      if (r.count("model")) plan.insert(plan.end(), {"--model", r["model"].as<std::string>()});
      if (r.count("world-size")) plan.insert(plan.end(), {"--world-size", std::to_string(r["world-size"].as<int>())});
      if (r.count("device-memory")) plan.insert(plan.end(), {"--device-memory", r["device-memory"].as<std::string>()});
      const std::string dir = std::filesystem::temp_directory_path().string();
      j["planner"] = planner_check(d, plan, dir);
    }
    if (r.count("json")) {
      std::cout << j.dump(2) << std::endl;
    } else {
      std::cout << d.to_text();
      if (j.contains("planner") && j["planner"].is_object())
        std::cout << "  planner: " << j["planner"]["planned_verdict"].get<std::string>()
                  << (j["planner"]["agrees"].get<bool>() ? " (agrees with the log)" : " (does NOT agree with the log)")
                  << " " << j["planner"].dump() << "\n";
    }
    return d.scenario.empty() ? kExitAbNoFailure : kExitOk;
  } catch (const ConfigError& e) {
    std::cerr << "[zrepro diagnose] error: " << e.what() << std::endl;
    return kExitBadInput;
  }
}

}  // namespace zrepro
