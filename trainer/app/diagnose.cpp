// `zrepro diagnose LOG`: a failed job's log (DeepSpeed / PyTorch / NCCL, several ranks
// interleaved, plain or gzip) to a diagnosis (trainer/report/diagnose.h). With --config
// and --device-memory it also asks the planner (`zrepro plan --json` as a child) whether
// it predicts what the log shows: the same failure phase, or a fit.
// With --write-scenario DIR it writes a ready reproduction (trainer/app/reproduction.h): the
// job's config as side A, the candidate fixes beside it; --run then runs it as `zrepro
// scenario run` (exit codes: 0 reproduced and a fix verified, 6 no fix verified, 7 not
// reproduced). Otherwise exit 0 when a scenario matched, 7 when the log has no known
// fingerprint, 2 on bad input.
#include <zlib.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>

#include "trainer/app/cli.h"
#include "trainer/app/reproduction.h"
#include "trainer/app/scenario.h"
#include "trainer/app/subprocess.h"
#include "trainer/report/diagnose.h"
#include "trainer/report/report.h"

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

// `zrepro plan --json` for the job (a child: the planner's errors come back as exit 2).
json plan_job(const std::vector<std::string>& plan_args) {
  std::vector<std::string> args = {"plan", "--json"};
  args.insert(args.end(), plan_args.begin(), plan_args.end());
  const std::string out = std::filesystem::temp_directory_path().string() + "/zrepro_diagnose_plan." +
                          std::to_string(::getpid()) + ".json";
  try {
    run_self_or_refuse("the plan for --config", args, out);
  } catch (const ConfigError& e) {  // the planner refuses what DeepSpeed would refuse at init
    std::filesystem::remove(out);
    return {{"refused", e.what()}};
  }
  const json p = read_json_file(out);
  std::filesystem::remove(out);
  return p;
}

// The planner's view of the user's setup against what the log showed.
json planner_check(const Diagnosis& d, const json& p) {
  if (!p.is_object()) return nullptr;
  if (p.contains("refused"))  // agrees when the log shows DeepSpeed refusing the config too
    return {{"planned_verdict", "refused"}, {"agrees", d.checkpoint == "config"}, {"refused", p["refused"]}};
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

json read_user_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError("--config: cannot read \"" + path + "\"");
  json c = json::parse(in, nullptr, false);
  if (c.is_discarded() || !c.is_object())
    throw ConfigError("--config: \"" + path + "\" is not a JSON object (zrepro config --config " + path + " names the error)");
  return c;
}

// --write-scenario DIR [--run]: the reproduction written, then (with --run) run.
int write_and_run(const Diagnosis& d, const std::string& log, const cxxopts::ParseResult& r, const json& user_config,
                  const json& plan) {
  if (!r.count("config")) throw ConfigError("--write-scenario: needs --config (the job's DeepSpeed config is side A)");
  if (d.scenario.empty()) {
    std::cout << "[zrepro diagnose] no known fingerprint: no reproduction written" << std::endl;
    return kExitAbNoFailure;
  }
  JobSetup job{opt<std::string>(r, "model"), opt<int>(r, "world-size"), opt<std::string>(r, "device-memory"),
               r.count("job-args") ? words("--job-args", r["job-args"].as<std::string>()) : std::vector<std::string>{}};
  const std::string templ_dir = scenarios_dir(opt<std::string>(r, "scenarios-dir"));
  const json templ = load_scenario(templ_dir + "/" + d.scenario + "/scenario.json");
  const std::string dir = r["write-scenario"].as<std::string>();
  std::filesystem::path where = std::filesystem::absolute(dir).lexically_normal();
  if (where.filename().empty()) where = where.parent_path();  // "DIR/"
  const std::string name = where.filename().string();
  const Reproduction rep =
      build_reproduction(d, name, log, templ, user_config, job, plan);
  write_reproduction(rep, dir);
  std::cout << "[zrepro diagnose] wrote " << dir << ": ds_config.json (side A) and " << rep.fixes.size()
            << " candidate fix(es):";
  for (size_t i = 0; i < rep.fixes.size(); ++i) std::cout << " fix_" << i + 1 << " " << rep.fixes[i].name << ";";
  std::cout << "\n[zrepro diagnose] run it: zrepro scenario run " << name << " --dir " << where.parent_path().string()
            << std::endl;
  if (!r.count("run")) return kExitOk;
  return run_scenario(where.parent_path().string(), name, std::nullopt,
                      r.count("out") ? r["out"].as<std::string>() : where.string() + "/out");
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
      ("write-scenario", "write a ready reproduction to this new folder: the job's config as side A, the candidate "
                         "fixes as configs beside it (needs --config; an OOM also --model)", cxxopts::value<std::string>())
      ("job-args", "flags zrepro plan and run both take that describe the job: --activation-checkpointing, "
                   "--micro-batch, --seq, ... (planned, and given to both sides)",
       cxxopts::value<std::string>())
      ("run", "with --write-scenario: reproduce it and verify each fix (zrepro scenario run)")
      ("out", "with --run: output folder (default DIR/out)", cxxopts::value<std::string>())
      ("scenarios-dir", "the scenario catalogue (default configs/scenarios)", cxxopts::value<std::string>())
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
    // What --write-scenario needs is checked before the log is read.
    if (r.count("write-scenario")) {
      if (r["write-scenario"].as<std::string>().empty())
        throw ConfigError("--write-scenario: got \"\", expected the new folder to write the reproduction to");
      if (!r.count("config")) throw ConfigError("--write-scenario: needs --config (the job's DeepSpeed config is side A)");
    }
    const json user_config = r.count("config") ? read_user_config(r["config"].as<std::string>()) : json();
    const Diagnosis d = diagnose_log(read_log(path), user_config);
    json j = d.to_json();
    json plan;
    if (r.count("config")) {
      std::vector<std::string> args = {"--config", r["config"].as<std::string>()};
      if (r.count("model")) args.insert(args.end(), {"--model", r["model"].as<std::string>()});
      if (r.count("world-size")) args.insert(args.end(), {"--world-size", std::to_string(r["world-size"].as<int>())});
      if (r.count("device-memory"))
        args.insert(args.end(), {"--device-memory", r["device-memory"].as<std::string>()});
      else if (d.numbers.value("capacity_bytes", int64_t(0)) > 0)  // the capacity the OOM message printed
        args.insert(args.end(), {"--device-memory", std::to_string(d.numbers["capacity_bytes"].get<int64_t>())});
      if (r.count("job-args")) {  // flags plan and run both take: the job's model, batch, checkpointing
        const auto job = words("--job-args", r["job-args"].as<std::string>());
        args.insert(args.end(), job.begin(), job.end());
      }
      plan = plan_job(args);
      j["planner"] = planner_check(d, plan);
    }
    if (r.count("json")) {
      std::cout << json_text(j) << std::endl;
    } else {
      std::cout << d.to_text();
      if (j.contains("planner") && j["planner"].is_object())
        std::cout << "  planner: " << j["planner"]["planned_verdict"].get<std::string>()
                  << (j["planner"]["agrees"].get<bool>() ? " (agrees with the log)" : " (does NOT agree with the log)")
                  << " " << json_text(j["planner"], -1) << "\n";
    }
    if (r.count("write-scenario")) return write_and_run(d, path, r, user_config, plan);
    if (r.count("run")) throw ConfigError("--run: needs --write-scenario DIR (the folder to write and run)");
    return d.scenario.empty() ? kExitAbNoFailure : kExitOk;
  } catch (const ConfigError& e) {
    std::cerr << "[zrepro diagnose] error: " << e.what() << std::endl;
    return kExitBadInput;
  }
}

}  // namespace zrepro
