// `zrepro check`: regression tests after an upgrade (trainer/report/baseline.h says what
// is compared and how much it may move).
//   zrepro check --save B.json --run DIR          a baseline from a finished run folder
//   zrepro check --save B.json -- RUN ARGS        run (`zrepro run RUN ARGS`), then save
//   zrepro check --baseline B.json --run DIR      compare a run folder with the baseline
//   zrepro check --baseline B.json -- RUN ARGS    run, then compare
// Each invocation times a calibration kernel (a fixed matmul loop) so step time is
// compared as a ratio, not in seconds. Exit 0 when nothing moved past its tolerance, 11
// when something did, 2 on bad input.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>

#include "trainer/app/cli.h"
#include "trainer/runtime/subprocess.h"
#include "trainer/report/baseline.h"
#include "trainer/report/report.h"

namespace zrepro {

using json = nlohmann::json;

namespace {

// The median of 5 timings of 20 fp32 256x256 matmuls on one thread: this machine's speed now.
double calibration_seconds() {
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  torch::NoGradGuard no_grad;
  const torch::Tensor a = torch::ones({256, 256}), b = torch::ones({256, 256});
  std::vector<double> t;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    torch::Tensor c = a;
    for (int i = 0; i < 20; ++i) c = torch::mm(a, b);
    (void)c.sum().item<float>();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  at::set_num_threads(threads);
  std::sort(t.begin(), t.end());
  return t[2];
}

// The run folder: given, or a fresh one `zrepro run RUN ARGS --out` writes.
std::string run_folder(const cxxopts::ParseResult& r, const std::vector<std::string>& run_args) {
  if (r.count("run")) {
    if (!run_args.empty()) throw ConfigError("--run and run arguments after --: give one");
    return r["run"].as<std::string>();
  }
  if (run_args.empty()) throw ConfigError("--run DIR or -- RUN ARGS: which run to take the figures from");
  for (const auto& a : run_args)
    if (a == "--out") throw ConfigError("-- RUN ARGS: leave --out to zrepro check (it uses --work)");
  const std::string dir = r["work"].as<std::string>();
  make_out_dir(dir);
  std::vector<std::string> args = {"run"};
  args.insert(args.end(), run_args.begin(), run_args.end());
  args.insert(args.end(), {"--out", dir + "/run"});
  const int code = run_self_or_refuse("the run to check", args, dir + "/run.log");
  std::cout << "[zrepro check] ran zrepro run ... (exit " << code << "), log " << dir << "/run.log" << std::endl;
  return dir + "/run";
}

// The baseline figures of a run folder; `flag` is the flag that named it (--run, --baseline).
json baseline_of(const std::string& dir, const std::string& flag = "--run") {
  const std::optional<Summary> s = read_summary(dir + "/summary.json");
  if (!s)
    throw ConfigError(flag + ": \"" + dir + "/summary.json\" is missing or cut; give a folder zrepro run wrote (--out)");
  return make_baseline(*s, calibration_seconds(), dir);
}

}  // namespace

int check_command(int argc, char** argv) {
  cxxopts::Options o("zrepro check", "Regression test after an upgrade: save a run's figures as a baseline, or "
                                     "compare a run with one (exit 11 when something moved past its tolerance).");
  o.add_options("check")
      ("save", "write a baseline to this file", cxxopts::value<std::string>())
      ("baseline", "compare with this baseline", cxxopts::value<std::string>())
      ("run", "a finished run folder (zrepro run --out DIR); or give run arguments after --", cxxopts::value<std::string>())
      ("work", "where a run started after -- writes", cxxopts::value<std::string>()->default_value("check_out"))
      ("memory-tol", "relative tolerance of peak memory per rank and category", cxxopts::value<double>()->default_value("0.02"))
      ("time-tol", "largest step-time ratio (per calibration) against the baseline's", cxxopts::value<double>()->default_value("1.5"))
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
    if (r.count("save") == r.count("baseline"))
      throw ConfigError("zrepro check: give --save B.json (make a baseline) or --baseline B.json (compare), one of the two");
    // The baseline is read and checked before any run starts (a missing file costs nothing).
    json base;
    if (r.count("baseline")) {
      const std::string given = r["baseline"].as<std::string>();
      // A run folder is a baseline too: the figures of its summary.json.
      base = std::filesystem::is_directory(given) ? baseline_of(given, "--baseline") : read_json_file(given);
      if (!base.is_object() || !base.contains("zrepro_baseline"))
        throw ConfigError("--baseline: \"" + r["baseline"].as<std::string>() +
                          "\" is missing or not a zrepro baseline (write one with zrepro check --save)");
      validate_baseline(base, r["baseline"].as<std::string>());
    }
    const json now = baseline_of(run_folder(r, run_args));
    if (r.count("save")) {
      write_file_atomic(r["save"].as<std::string>(), json_text(now) + "\n");
      std::cout << "[zrepro check] baseline " << r["save"].as<std::string>() << ": status " << now["status"] << ", "
                << now["steps"] << " steps, peak " << now["memory"]["peak_bytes"] << " bytes, step time "
                << now["time"]["ratio"] << " x calibration" << std::endl;
      return kExitOk;
    }
    CheckTolerances tol;
    tol.memory_rel = r["memory-tol"].as<double>();
    tol.time_ratio = r["time-tol"].as<double>();
    if (tol.memory_rel < 0 || tol.time_ratio < 1)
      throw ConfigError("--memory-tol >= 0 and --time-tol >= 1 expected, got " + std::to_string(tol.memory_rel) + " and " +
                        std::to_string(tol.time_ratio));
    const CheckResult res = check_against(base, now, tol);
    std::cout << (r.count("json") ? json_text(res.to_json()) + "\n" : res.table());
    return res.passed() ? kExitOk : kExitCheckRegressed;
  });
}

}  // namespace zrepro
