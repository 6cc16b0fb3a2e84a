// `zrepro check`: regression tests after an upgrade (trainer/report/baseline.h says what
// is compared and how much it may move).
//   zrepro check --save B.json --run DIR          a baseline from a finished run folder
//   zrepro check --save B.json -- RUN ARGS        run (`zrepro run RUN ARGS`), then save
//   zrepro check --baseline B.json                rerun with the baseline's stored inputs, compare
//   zrepro check --baseline B.json --run DIR      compare a run folder with the baseline
//   zrepro check --baseline B.json -- RUN ARGS    run, then compare
//   zrepro check --suite DIR [--save]             every config in DIR (check_suite.cpp)
//   zrepro check --deepspeed OLD,NEW -- RUN ARGS  the config under two real releases (check_releases.cpp)
// Step time is compared as a ratio to a calibration kernel the run timed between its steps
// ([Note: step time against the machine]), advisory unless --time-gate. Exit 0 when
// nothing moved past its tolerance, 11 when something did (or the inputs differ), 2 on bad
// input.
#include "trainer/app/check.h"

#include "trainer/config/user_file.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>

#include "device/device_memory.h"
#include "trainer/app/cli.h"
#include "trainer/loop/calibration.h"
#include "trainer/report/report.h"
#include "trainer/runtime/subprocess.h"

namespace zrepro {

using json = nlohmann::json;

namespace {

// This machine's speed now, for a summary that timed none during its run (an older
// zrepro's): the median of 5 samples of the run's own kernel.
double check_time_calibration() {
  std::vector<double> t;
  for (int rep = 0; rep < 5; ++rep) t.push_back(calibration_sample());
  return spread_of(t)->median;
}

// `zrepro run RUN ARGS --out WORK/run`, its log WORK/run.log; returns the run folder.
std::string run_into(const std::string& work, const std::vector<std::string>& run_args) {
  for (const auto& a : run_args)
    if (a == "--out" || a.rfind("--out=", 0) == 0) throw ConfigError("-- RUN ARGS: leave --out to zrepro check (it uses --work)");
  make_out_dir(work);
  std::vector<std::string> args = {"run"};
  args.insert(args.end(), run_args.begin(), run_args.end());
  args.insert(args.end(), {"--out", work + "/run"});
  const int code = run_self_or_refuse("the run to check", args, work + "/run.log");
  std::cerr << "[zrepro check] ran zrepro run ... (exit " << code << "), log " << work << "/run.log" << std::endl;
  return work + "/run";
}

// The arguments stored in a baseline, to run again. A --config file that is no longer where
// it was is written from the baseline's copy into WORK (and said).
std::vector<std::string> stored_args(const Baseline& base, const std::string& path, const std::string& work) {
  if (!base.inputs)
    throw ConfigError("--baseline: \"" + path + "\" keeps no run arguments (saved by an older zrepro): give them after "
                      "-- (zrepro check --baseline " + path + " -- --config ds.json ...) or --run DIR, or save it again");
  std::vector<std::string> args = base.inputs->args;
  const json& config = base.inputs->config;
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == "--config" && !std::filesystem::is_regular_file(args[i + 1]) && config.is_object()) {
      make_out_dir(work);
      const std::string copy = work + "/config_from_baseline.json";
      write_file_atomic(copy, config.dump(2) + "\n");
      std::cerr << "[zrepro check] " << args[i + 1] << " is not here: running with the baseline's copy of it, " << copy
                << std::endl;
      args[i + 1] = copy;
    }
  std::cerr << "[zrepro check] rerunning with the baseline's inputs: zrepro run";
  for (const auto& a : args) std::cerr << " " << a;
  std::cerr << std::endl;
  return args;
}

void print_saved(const std::string& path, const Baseline& b) {
  std::cout << "[zrepro check] baseline " << path << ": status " << json(b.status) << ", " << b.steps << " steps, peak "
            << format_bytes(b.peak_bytes) << ", step time " << json(b.time.ratio) << " x calibration (" << b.time.source
            << ")" << std::endl;
}

}  // namespace

Baseline baseline_of_run(const std::string& dir, const std::string& flag) {
  const std::optional<Summary> s = read_summary(dir + "/summary.json");
  if (!s)
    throw ConfigError(flag + ": \"" + dir + "/summary.json\" is missing or cut; give a folder zrepro run wrote (--out)");
  return make_baseline(*s, calibrated_in_run(*s) ? 0.0 : check_time_calibration(), dir);
}

Baseline read_baseline(const std::string& given) {
  // A run folder is a baseline too: the figures of its summary.json.
  if (std::filesystem::is_directory(given)) return baseline_of_run(given, "--baseline");
  const json base = read_json_file(given);
  if (!base.is_object() || !base.contains("zrepro_baseline"))
    throw ConfigError("--baseline: \"" + given + "\" is missing or not a zrepro baseline (write one with zrepro check --save)");
  return Baseline::from_json(base, given);
}

CheckTolerances check_tolerances(const cxxopts::ParseResult& r) {
  CheckTolerances tol;
  tol.memory_rel = r["memory-tol"].as<double>();
  tol.time_ratio = r["time-tol"].as<double>();
  tol.time_gate = r.count("time-gate") > 0;
  if (tol.memory_rel < 0 || tol.time_ratio < 1)
    throw ConfigError("--memory-tol >= 0 and --time-tol >= 1 expected, got " + std::to_string(tol.memory_rel) + " and " +
                      std::to_string(tol.time_ratio));
  return tol;
}

// [Note: an output never replaces an input], before any run starts: --save goes nowhere but
// to a new file or a baseline zrepro wrote (it names its version), never over the run's inputs.
static void check_save_target(const std::string& path, const std::vector<std::string>& run_args) {
  std::vector<std::string> inputs;
  for (size_t k = 0; k + 1 < run_args.size(); ++k)
    if (run_args[k] == "--config" || run_args[k] == "--model" || run_args[k] == "--training-args" ||
        run_args[k] == "--accelerate-config")
      inputs.push_back(run_args[k + 1]);
  check_output_target("--save", path, inputs,
                      [](const std::string& t) { return t.find("\"zrepro_baseline\"") != std::string::npos; });
}

namespace {

// What `zrepro check` was asked, from its flags: a suite (or its baselines to save), or one
// run (a folder, run arguments, or the baseline's stored inputs) saved or compared.
struct CheckRequest {
  CheckTolerances tol;
  std::optional<std::string> suite;  // --suite or --save-suite DIR
  bool save_suite = false;
  std::optional<std::string> save, baseline, run;
  std::vector<std::string> run_args;
  std::optional<std::string> deepspeed;  // --deepspeed OLD,NEW ([Note: check against the real releases])
  std::string work, junit;  // junit: "" for none
  bool json = false;
};

// The suite or the two releases, when asked: true when q is complete.
bool suite_or_releases(const cxxopts::ParseResult& r, CheckRequest& q) {
  if (r.count("deepspeed")) {
    q.deepspeed = r["deepspeed"].as<std::string>();
    if (r.count("save-suite") || q.baseline || q.save || q.run || (r.count("suite") && !q.run_args.empty()))
      throw ConfigError("--deepspeed OLD,NEW: give it with the run's arguments after -- (its --config) or with "
                        "--suite DIR, not with --save-suite, --save, --baseline or --run: the two releases are the "
                        "baseline and the run");
    if (!r.count("suite")) return true;
  }
  if (!r.count("suite") && !r.count("save-suite")) return false;
  if (r.count("suite") + r.count("save-suite") > 1 || q.baseline || q.save || q.run || !q.run_args.empty())
    throw ConfigError("--suite DIR / --save-suite DIR: give one of them alone, not with --baseline, --save, --run "
                      "or run arguments: each config's arguments are DIR/NAME.args");
  q.save_suite = r.count("save-suite") > 0;
  q.suite = r[q.save_suite ? "save-suite" : "suite"].as<std::string>();
  return true;
}

CheckRequest check_request_from(const cxxopts::ParseResult& r, const std::vector<std::string>& run_args) {
  CheckRequest q;
  q.tol = check_tolerances(r);
  q.work = r["work"].as<std::string>();
  q.json = r.count("json") > 0;
  q.junit = r.count("junit") ? r["junit"].as<std::string>() : "";
  q.run_args = run_args;
  for (auto [flag, field] : {std::pair<const char*, std::optional<std::string>*>{"save", &q.save}, {"baseline", &q.baseline},
                             {"run", &q.run}})
    if (r.count(flag)) *field = r[flag].as<std::string>();
  if (suite_or_releases(r, q)) return q;
  if (q.save.has_value() == q.baseline.has_value())
    throw ConfigError("zrepro check: give --save B.json (make a baseline) or --baseline B.json (compare), one of the two");
  if (q.run && !run_args.empty()) throw ConfigError("--run and run arguments after --: give one");
  if (!q.run && run_args.empty() && !q.baseline)
    throw ConfigError("--run DIR or -- RUN ARGS: which run to take the figures from");
  return q;
}

// One run's check: the baseline read and checked before any run starts (a missing file
// costs nothing), the run's figures, then saved or compared.
int run_check(const CheckRequest& q) {
  const auto t0 = std::chrono::steady_clock::now();
  if (q.save) check_save_target(*q.save, q.run_args);
  Baseline base;
  if (q.baseline) base = read_baseline(*q.baseline);
  const std::string dir = q.run                 ? *q.run
                          : !q.run_args.empty() ? run_into(q.work, q.run_args)
                                                : run_into(q.work, stored_args(base, *q.baseline, q.work));
  const Baseline now = baseline_of_run(dir, "--run");
  if (q.save) {
    write_json_file(*q.save, now.to_json());
    print_saved(*q.save, now);
    return kExitOk;
  }
  const CheckResult res = check_against(base, now, q.tol);
  std::cout << (q.json ? json_text(res.to_json()) + "\n" : res.table());
  if (!q.junit.empty()) {
    JUnitCase c{*q.baseline, res, "", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), dir,
                q.run ? "" : q.work + "/run.log"};  // --run: a folder the user ran, no log of check's
    write_file_atomic(q.junit, junit_xml("zrepro check", {c}));
  }
  return res.passed() ? kExitOk : kExitCheckRegressed;
}

}  // namespace

int check_command(int argc, char** argv) {
  cxxopts::Options o("zrepro check", "Regression test after an upgrade: save a run's figures as a baseline, or "
                                     "compare a run with one (exit 11 when something moved past its tolerance).");
  o.add_options("check")
      ("save", "write a baseline to this file", cxxopts::value<std::string>())
      ("baseline", "compare with this baseline (a file zrepro check --save wrote, or a run folder); without --run or run arguments, rerun with the inputs it stores", cxxopts::value<std::string>())
      ("run", "a finished run folder (zrepro run --out DIR); or give run arguments after --", cxxopts::value<std::string>())
      ("suite", "compare every DeepSpeed config in this folder (DIR/NAME.json, its arguments DIR/NAME.args) with its baseline DIR/baselines/NAME.json", cxxopts::value<std::string>())
      ("save-suite", "run every config in this folder and write its baseline into DIR/baselines/", cxxopts::value<std::string>())
      ("deepspeed", "OLD,NEW: train the config given after -- under both real DeepSpeed releases on this CPU (zrepro bisect's drivers and cache) and fail on any figure that moved", cxxopts::value<std::string>())
      ("work", "where the runs zrepro check starts write", cxxopts::value<std::string>()->default_value("check_out"))
      ("memory-tol", "relative tolerance of peak memory per rank and category", cxxopts::value<double>()->default_value("0.02"))
      ("time-tol", "least step-time ratio (per calibration) allowed against the baseline's; the runs' measured spreads may widen it", cxxopts::value<double>()->default_value("1.5"))
      ("time-gate", "fail on step time (default: reported as advisory: step time on a shared machine is not a regression test)")
      ("junit", "also write the result as JUnit XML (what CI systems display) to this file", cxxopts::value<std::string>())
      ("json", "print the comparison as JSON")
      ("h,help", "show this help");
  // Everything after "--" is the run's own arguments.
  std::vector<std::string> run_args;
  int own = argc;
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--") {
      own = i;
      for (int k = i + 1; k < argc; ++k) run_args.push_back(argv[k]);
      break;
    }
  return command_main(o, own, argv, [&](const cxxopts::ParseResult& r) -> int {
    const CheckRequest q = check_request_from(r, run_args);
    if (q.suite) return check_suite(*q.suite, q.save_suite, q.work, q.tol, q.json, q.junit, q.deepspeed);
    if (q.deepspeed) return check_releases(*q.deepspeed, q.run_args, q.work, q.json, q.junit);
    return run_check(q);
  });
}

}  // namespace zrepro
