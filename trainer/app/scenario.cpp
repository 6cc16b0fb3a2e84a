// `zrepro scenario list | run NAME`: the failure scenarios under configs/scenarios/ that
// carry a scenario.json (the failing side A, the fix B or several "fixes", the shared run
// arguments and rank counts; format in scenario.h) run as `zrepro ab`, and answer
// "symptom reproduced / fix verified". Several fixes: one ab per fix, each against A.
// "expect" is ab's --expect (default failure); "serial": true marks a throughput ratio
// that needs the machine's cores to itself (ctest runs it alone). "grep" is the line users find in their
// logs: side A's log must contain it wherever A shows the symptom, or the reproduction
// does not count. "setup" steps (zrepro command lines, "{out}" the scenario's folder) run
// first ("{scenario}": its folder). Exit codes are ab's: 0 reproduced and fixed, 6 reproduced and not fixed, 7 not
// reproduced (or without the grep line), 2 bad input; a failed setup step's own.
#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <set>

#include "trainer/app/scenario.h"

#include "trainer/app/cli.h"
#include "trainer/config/user_file.h"
#include "trainer/report/ab_doc.h"
#include "trainer/report/report.h"
#include "trainer/runtime/subprocess.h"

#ifndef ZREPRO_SCENARIOS_DIR
#define ZREPRO_SCENARIOS_DIR "configs/scenarios"
#endif

namespace zrepro {

using json = nlohmann::json;

std::vector<std::string> scenario_names(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (std::filesystem::exists(e.path() / "scenario.json")) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

std::string joined(const json& args) {
  std::string s;
  for (const auto& a : args) s += (s.empty() ? "" : " ") + a.get<std::string>();
  return s;
}

// The log line users grep for must be in side A's log wherever A showed the symptom.
int check_grep_line(const json& s, const std::string& out, int code) {
  const std::string grep = s.value("grep", "");
  if (grep.empty()) return code;
  const json j = read_json_file(out + "/ab.json");
  if (!j.is_object()) return code;
  for (const AbComparison& c : AbDocument::from_json(j).comparisons) {
    if (!c.a_shows_symptom) continue;
    const std::string log = out + "/A_r" + std::to_string(c.ranks) + ".log";
    std::ifstream in(log);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (text.find(grep) == std::string::npos) {
      std::cout << "[zrepro scenario] side A's log " << log << " lacks the line users grep for: \"" << grep << "\"" << std::endl;
      return kExitAbNoFailure;
    }
    std::cout << "[zrepro scenario] " << log << " has the line users grep for: \"" << grep << "\"" << std::endl;
  }
  return code;
}

// One `zrepro ab`: side A against one fix, into out; the grep line checked.
int run_ab(const std::string& folder, const json& s, const json& fix, const std::string& ranks, const std::string& out,
           const std::vector<std::string>& ab_flags) {
  std::vector<std::string> args = {"ab",      "--a",     folder + "/" + s["a"]["config"].get<std::string>(),
                                   "--b",     folder + "/" + fix["config"].get<std::string>(),
                                   "--ranks", ranks,     "--out", out};
  if (!s["a"].value("args", json::array()).empty()) args.insert(args.end(), {"--a-args", joined(s["a"]["args"])});
  if (!fix.value("args", json::array()).empty()) args.insert(args.end(), {"--b-args", joined(fix["args"])});
  if (s.contains("expect")) args.insert(args.end(), {"--expect", s["expect"].get<std::string>()});
  args.insert(args.end(), ab_flags.begin(), ab_flags.end());
  for (const auto& a : s["args"]) args.push_back(a.get<std::string>());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  int code = ab_command(static_cast<int>(argv.size()), argv.data());
  if (code == kExitOk || code == kExitAbNotFixed) code = check_grep_line(s, out, code);
  return code;
}

// In any argument (setup's, the sides', the shared): "{out}" is the scenario's --out folder
// (what a setup step writes there, a checkpoint, the sides read) and "{scenario}" the
// scenario's own folder (its configs).
json with_paths(json j, const std::string& out, const std::string& folder) {
  if (j.is_string()) {
    std::string v = j.get<std::string>();
    for (const auto& [key, value] : {std::pair<std::string, std::string>{"{out}", out}, {"{scenario}", folder}})
      for (size_t i = v.find(key); i != std::string::npos; i = v.find(key, i + value.size())) v.replace(i, key.size(), value);
    return v;
  }
  if (j.is_array() || j.is_object())
    for (auto& e : j) e = with_paths(e, out, folder);
  return j;
}

// "setup": zrepro command lines run before side A and B, in order (a save on 2 ranks and
// its conversion, for a resume at another world size). Each must succeed: a step that
// fails ends the scenario with its exit code, its log named.
int run_setup(const json& s, const std::string& out) {
  const json steps = s.value("setup", json::array());
  for (size_t i = 0; i < steps.size(); ++i) {
    std::vector<std::string> args;
    for (const auto& a : steps[i]["args"]) args.push_back(a.get<std::string>());
    const std::string log = out + "/setup_" + std::to_string(i + 1) + ".log";
    const std::string why = steps[i].value("why", args.front());
    std::cout << "[zrepro scenario] setup " << i + 1 << "/" << steps.size() << " (" << why << "): zrepro";
    for (const auto& a : args) std::cout << " " << a;
    std::cout << std::endl;
    const int code = run_self(args, log, "setup " + std::to_string(i + 1));
    if (code != kExitOk) {
      std::cout << "[zrepro scenario] setup " << i + 1 << " failed (exit " << code << "), " << log << ":\n"
                << tail_of(log, 6);
      return code;
    }
  }
  return kExitOk;
}

// [Note: a mechanism is not a fix] A side B that differs from A only by leaving out
// zrepro's own --inject (the stand-in for what happened in the job: a rank that ran one
// micro-step more, a slow rank) shows that the mechanism reproduces the symptom, not a
// fix the user can apply: its verdict says so, and where the real fix lies.
bool mechanism_only(const json& s, const json& fix) {
  if (fix["config"] != s["a"]["config"]) return false;
  std::vector<std::string> kept;
  bool injects = false;
  const json a_args = s["a"].value("args", json::array());
  for (size_t i = 0; i < a_args.size(); ++i) {
    if (a_args[i] == "--inject") {
      injects = true;
      ++i;  // its value
      continue;
    }
    kept.push_back(a_args[i].get<std::string>());
  }
  return injects && json(kept) == fix.value("args", json::array());
}

const char* outcome(int code, bool mechanism = false) {
  if (code == kExitOk && mechanism)
    return "symptom reproduced, mechanism reproduced: without side A's --inject (zrepro's stand-in for the job's "
           "cause) it goes, so the fix lies in the job's code or data, not in its config";
  return code == kExitOk             ? "symptom reproduced, fix verified"
         : code == kExitAbNotFixed   ? "symptom reproduced, fix NOT verified"
         : code == kExitAbNoFailure  ? "symptom NOT reproduced"
         : code == 128 + SIGINT || code == 128 + SIGTERM ? "interrupted"
                                     : "could not run";
}

}  // namespace
// configs/scenarios under the working directory, else the source tree's.
std::string scenarios_dir(const std::optional<std::string>& given) {
  if (given) return *given;
  return std::filesystem::is_directory("configs/scenarios") ? "configs/scenarios" : ZREPRO_SCENARIOS_DIR;
}

json load_scenario(const std::string& path) {
  json s = parse_user_json(path, read_user_file("the scenario", path, "a scenario.json (configs/scenarios/NAME/)"));
  if (s.is_discarded() || !s.is_object()) throw ConfigError(path + ": not a JSON object");
  for (const char* key : {"name", "symptom", "a", "args", "ranks"})
    if (!s.contains(key)) throw ConfigError(path + ": key \"" + key + "\" missing");
  auto check_side = [&](const json& side, const std::string& where) {
    if (!side.is_object() || !side.value("config", json()).is_string())
      throw ConfigError(path + ": \"" + where + ".config\" must name the side's DeepSpeed config");
  };
  check_side(s["a"], "a");
  if (s.contains("b")) {
    check_side(s["b"], "b");
  } else if (s.value("fixes", json()).is_array() && !s["fixes"].empty()) {
    for (size_t i = 0; i < s["fixes"].size(); ++i) check_side(s["fixes"][i], "fixes[" + std::to_string(i) + "]");
  } else {
    throw ConfigError(path + ": key \"b\" (the fix) or a non-empty \"fixes\" list missing");
  }
  for (const auto& step : s.value("setup", json::array())) {
    if (!step.is_object() || !step.value("args", json()).is_array() || step["args"].empty() ||
        !step["args"][0].is_string())
      throw ConfigError(path + ": each \"setup\" step must be {\"why\": ..., \"args\": [zrepro command line]}");
    // [Note: a setup step makes inputs] A step makes what the sides read (a checkpoint, its
    // conversion, a plan): a step that ran a scenario (or diagnose --run, or ab) could run
    // this one again, without bound.
    const std::string command = step["args"][0].get<std::string>();
    static const std::set<std::string> makes_inputs = {"run", "checkpoint", "plan", "config", "record-model"};
    if (!makes_inputs.count(command))
      throw ConfigError(path + ": a \"setup\" step runs zrepro " + command + ", expected one that makes the sides' "
                        "inputs (run, checkpoint, plan, config, record-model): a step that runs scenarios or sides "
                        "could run this scenario again, without end");
  }
  return s;
}

int run_fixes(const std::string& folder, const std::string& name, const json& s, const std::string& ranks,
              const std::string& out, const std::vector<std::string>& ab_flags);

int run_scenario(const std::string& dir, const std::string& name, const std::optional<std::string>& ranks,
                 const std::string& out, const std::vector<std::string>& ab_flags) {
  const std::string folder = dir + "/" + name;
  if (!std::filesystem::exists(folder + "/scenario.json"))
    throw ConfigError("scenario \"" + name + "\": no " + folder + "/scenario.json (zrepro scenario list names them)");
  const json s = with_paths(load_scenario(folder + "/scenario.json"), out, folder);
  std::string rank_list;
  for (const auto& n : s["ranks"]) rank_list += (rank_list.empty() ? "" : ",") + std::to_string(n.get<int>());
  std::cout << "[zrepro scenario] " << name << ": " << s["symptom"].get<std::string>() << std::endl;
  if (s.contains("setup")) {
    make_out_dir(out);
    if (const int code = run_setup(s, out); code != kExitOk) {
      std::cout << "[zrepro scenario] " << name << ": could not run (exit " << code << ")" << std::endl;
      return code;
    }
  }
  if (s.contains("b")) {
    const int code = run_ab(folder, s, s["b"], ranks.value_or(rank_list), out, ab_flags);
    std::cout << "[zrepro scenario] " << name << ": " << outcome(code, mechanism_only(s, s["b"])) << " (exit " << code
              << ")" << std::endl;
    return code;
  }
  return run_fixes(folder, name, s, ranks.value_or(rank_list), out, ab_flags);
}

// Several candidate fixes: each against A, in its own folder; A's outcome is the same in each.
int run_fixes(const std::string& folder, const std::string& name, const json& s, const std::string& ranks,
              const std::string& out, const std::vector<std::string>& ab_flags) {
  int best = kExitAbNoFailure;
  std::string verified, not_verified, mechanisms;
  for (size_t i = 0; i < s["fixes"].size(); ++i) {
    const json& fix = s["fixes"][i];
    const std::string fix_name = fix.value("name", fix["config"].get<std::string>());
    std::cout << "[zrepro scenario] fix " << i + 1 << "/" << s["fixes"].size() << ": " << fix_name << std::endl;
    int code = run_ab(folder, s, fix, ranks, out + "/fix_" + std::to_string(i + 1), ab_flags);
    // A relative expectation (slower:, less:, ...) compares A with this fix: no difference
    // means this fix is not verified. A failure expectation: A itself did not fail.
    const std::string expect = s.value("expect", "failure");
    if (code == kExitAbNoFailure && expect != "failure" && expect != "refused") code = kExitAbNotFixed;
    const bool mechanism = mechanism_only(s, fix);
    std::cout << "[zrepro scenario] fix " << i + 1 << " (" << fix_name << "): " << outcome(code, mechanism) << std::endl;
    if (code != kExitOk && code != kExitAbNotFixed) return code;  // not reproduced, or could not run
    std::string& list = code == kExitOk ? (mechanism ? mechanisms : verified) : not_verified;
    list += (list.empty() ? "" : "; ") + fix_name;
    if (code == kExitOk || best != kExitOk) best = code;
  }
  std::cout << "[zrepro scenario] " << name << ": symptom reproduced; fixes verified: "
            << (verified.empty() ? "none" : verified) << "; not verified: " << (not_verified.empty() ? "none" : not_verified)
            << (mechanisms.empty() ? "" : "; mechanism reproduced (the fix lies in the job's code or data): " + mechanisms)
            << " (exit " << best << ")" << std::endl;
  return best;
}

int scenario_command(int argc, char** argv) {
  cxxopts::Options o("zrepro scenario", "The failure scenarios: list them, or run one (failing vs fixed, as zrepro ab).");
  o.add_options("scenario")
      ("action", "list | run", cxxopts::value<std::string>())
      ("name", "the scenario to run", cxxopts::value<std::string>())
      ("ranks", "rank counts instead of the scenario's, e.g. 1,4", cxxopts::value<std::string>())
      ("virtual", "run rank counts above 1 as virtual ranks in one process (zrepro ab --virtual): memory and "
                  "numerics scenarios only")
      ("oversubscribe", "more ranks than this machine's cores: run them anyway, sharing cores (zrepro run "
                        "--oversubscribe; timing scenarios then measure the sharing)")
      ("out", "output folder (default scenario_out/NAME)", cxxopts::value<std::string>())
      ("dir", "scenarios folder (default configs/scenarios)", cxxopts::value<std::string>())
      ("h,help", "show this help");
  o.parse_positional({"action", "name"});
  o.positional_help("list | run NAME");
  return command_main(o, argc, argv, [&](const cxxopts::ParseResult& r) -> int {
    if (!r.count("action")) {
      std::cout << o.help() << std::endl;
      return kExitBadInput;
    }
    const std::string dir = scenarios_dir(opt<std::string>(r, "dir"));
    const std::string action = r["action"].as<std::string>();
    if (action == "list") {
      if (r.count("name") || !r.unmatched().empty())
        throw ConfigError("zrepro scenario list: takes no name, got \"" +
                          (r.count("name") ? r["name"].as<std::string>() : r.unmatched().front()) +
                          "\" (zrepro scenario run NAME runs one)");
      for (const auto& n : scenario_names(dir))
        std::cout << n << ": " << load_scenario(dir + "/" + n + "/scenario.json")["symptom"].get<std::string>() << "\n";
      return kExitOk;
    }
    if (action != "run") throw ConfigError("zrepro scenario: got \"" + action + "\", expected list or run");
    if (!r.count("name")) throw ConfigError("zrepro scenario run: a scenario name is missing (zrepro scenario list)");
    const std::string name = r["name"].as<std::string>();
    // A name is one folder of the catalogue: no path (`../../..` ran and wrote outside it).
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
      throw ConfigError("zrepro scenario run: got \"" + name + "\", expected a scenario's name (one folder of the "
                        "catalogue, no path: zrepro scenario list names them; --dir DIR for another catalogue)");
    if (!r.unmatched().empty())
      throw ConfigError("zrepro scenario run: one scenario at a time, got also \"" + r.unmatched().front() + "\"");
    std::vector<std::string> ab_flags;
    for (const char* f : {"virtual", "oversubscribe"})
      if (r.count(f)) ab_flags.push_back(std::string("--") + f);
    return run_scenario(dir, name, opt<std::string>(r, "ranks"),
                        r.count("out") ? r["out"].as<std::string>() : "scenario_out/" + name, ab_flags);
  }, nullptr, Words::the_command_reads_them);
}

}  // namespace zrepro
