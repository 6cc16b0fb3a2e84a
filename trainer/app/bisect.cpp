// `zrepro bisect --config ds.json --good A --bad B`: the first DeepSpeed release between A
// and B whose figures on zrepro's toy moved from A's, found by running the real releases on
// this CPU (trainer/bisect/release_env.h), with zrepro's own figures under each release's
// profile beside them and the version table's changes between the two releases it names.
//
// Steps: zrepro trains the config once as release A (`--deepspeed-version A
// --export-inputs`), which fixes the weights and batches every release gets; the config
// DeepSpeed gets is [Note: the config each release gets] (trainer/bisect/deepspeed_config.h). A and B run first; when they agree there is nothing to
// bisect (exit 7). Otherwise [Note: bisecting releases] (trainer/bisect/bisection.h) under
// [Note: what counts as a move] (trainer/bisect/release_figures.h). Exit 0 with the release.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include "trainer/app/cli.h"
#include "trainer/bisect/bisect_doc.h"
#include "trainer/bisect/bisection.h"
#include "trainer/bisect/deepspeed_config.h"
#include "trainer/bisect/release_env.h"
#include "trainer/config/ds_versions.h"
#include "trainer/config/user_file.h"
#include "trainer/report/report.h"
#include "trainer/runtime/subprocess.h"
#include "trainer/runtime/torch_python.h"
#include "zero/comm/mpi_communicator.h"

namespace zrepro {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace bisect_cmd {

struct Judged {
  std::string release;
  Verdict verdict = Verdict::kSkip;
  ReleaseFigures ds;
  bool from_cache = false;
  std::string why;  // skip: the reason
  std::optional<ReleaseFigures> zrepro;  // zrepro under this release's profile
  std::string zrepro_diff;               // what zrepro differs in from the release ("": agrees)
};

struct Bisect {
  std::string config, out;
  std::vector<std::string> run_flags;  // --model, --micro-batch, ... for every zrepro run
  int ranks = 2, steps = 3, stage = 0;
  Tolerance tol;
  bool tolerance_given = false;  // --tolerance: no spread decides it
  RunInputs inputs;
  std::unique_ptr<ReleaseRunner> runner;
  std::map<std::string, Judged> judged;  // by release
  std::string precision = "fp32";
  std::string good;
  std::string model;  // what every release trained: "tiny-llama (llama, 102720 parameters)"
  std::optional<Summary> good_summary;  // zrepro as the good release: its run also exported the inputs
};

// The user's --config as JSON (read_user_file names the flag for a folder or an unreadable path).
json read_config(const std::string& path) {
  const json j = parse_user_json("--config " + path, read_user_file("--config", path, "a DeepSpeed JSON config file"));
  if (j.is_discarded() || !j.is_object()) throw ConfigError("--config: \"" + path + "\" is not a JSON object");
  return j;
}

// zrepro as release V on the same inputs: OUT/zrepro-V. The good release's run also exports
// the inputs, and its refusal is the user's (ConfigError); beside another release a refusal
// is zrepro's answer for that release (its error line). None: no summary (killed).
std::optional<ReleaseFigures> run_zrepro(Bisect& b, const std::string& release, bool export_inputs) {
  const std::string dir = b.out + "/zrepro-" + release;
  fs::remove_all(dir);
  std::vector<std::string> args = {"run",     "--config", b.config, "--out", dir, "--deepspeed-version", release,
                                   "--ranks", std::to_string(b.ranks), "--steps", std::to_string(b.steps),
                                   "--log-every", "1000"};
  args.insert(args.end(), b.run_flags.begin(), b.run_flags.end());
  const std::string what = "zrepro as DeepSpeed " + release;
  if (export_inputs) {
    args.push_back("--export-inputs");
    run_self_or_refuse(what, args, dir + ".log");
  } else if (run_self(args, dir + ".log", what) == kExitBadInput) {
    std::ifstream log(dir + ".log");
    std::string line, error;
    while (std::getline(log, line))
      if (line.find("] error: ") != std::string::npos) error = line.substr(line.find("] error: ") + 9);
    return zrepro_refusal(error);
  }
  const std::optional<Summary> summary = read_summary(dir + "/summary.json");
  if (!summary) return std::nullopt;
  if (export_inputs) b.good_summary = summary;
  return figures_from_zrepro(*summary);
}

// What zrepro as this release differs in from the release (empty: it agrees or did not run).
std::string zrepro_differs(const Bisect& b, const Judged& j) {
  if (!j.zrepro || j.verdict == Verdict::kSkip) return "";
  Tolerance beside = b.tol;
  if (b.precision != "fp32") beside.numerics = 5e-2;  // the conformance record's 16-bit tolerance
  const auto diff = moved(j.ds, *j.zrepro, beside, true, 1);
  return diff.empty() ? "" : diff.front();
}

// Judges one release: Skip when it cannot run here, else Good or Moved against `good`.
Judged& judge(Bisect& b, const std::string& release, const ReleaseFigures* good, bool endpoint = false) {
  Judged& j = b.judged[release];
  j.release = release;
  const auto skip = [&](const std::string& why) -> Judged& {
    j.why = why;
    std::cout << "[zrepro bisect] DeepSpeed " << release << ": skip (" << why << ")" << std::endl;
    return j;
  };
  if (const auto refusal = cpu_refusal(release, b.stage)) return skip(*refusal);
  j.ds = b.runner->figures(release, b.inputs, j.from_cache, endpoint);  // [Note: a release's own spread]
  // Not installable here, or it died (killed, timed out, crashed): not judged, as `git
  // bisect skip` (its message is in the table; a refusal of the config is judged).
  if (j.ds.outcome == "unavailable" || j.ds.outcome == "failed") return skip(j.ds.outcome + ": " + j.ds.message);
  // The bad end judged: the tolerance every release is judged by, decided once from both ends.
  if (endpoint && good && !b.tolerance_given) {
    const double bytes = b.tol.bytes;
    b.tol = spread_tolerance(b.precision, good->spread, j.ds.spread);
    b.tol.bytes = bytes;
  }
  j.verdict = good && !moved(*good, j.ds, b.tol).empty() ? Verdict::kMoved : Verdict::kGood;
  if (release == b.good && b.good_summary)
    j.zrepro = figures_from_zrepro(*b.good_summary);
  else if (release != b.good)
    j.zrepro = run_zrepro(b, release, false);
  j.zrepro_diff = zrepro_differs(b, j);
  std::cout << "[zrepro bisect] DeepSpeed " << release << ": " << (good ? verdict_name(j.verdict) : "the good release")
            << (j.ds.outcome == "ran" ? "" : " (" + j.ds.outcome + ")") << (j.from_cache ? " (cached)" : "") << std::endl;
  return j;
}

// A release in a column of 8 ("0.17.6  ").
std::string release_column(const std::string& r) { return r + std::string(8 - std::min<size_t>(8, r.size()), ' '); }

std::string fig(const std::optional<double>& v) {
  if (!v || !std::isfinite(*v)) return "-";
  return fmt(*v, 4);
}

// One row of the table: a release's first and last step, and zrepro as that release.
std::string row(const Bisect& b, const Judged& j) {
  std::string s = "  " + release_column(j.release);
  if (j.verdict == Verdict::kSkip) return s + "skip   " + j.why;
  s += std::string(verdict_name(j.verdict)) + (j.verdict == Verdict::kGood ? "   " : "  ");
  if (j.ds.outcome != "ran" || j.ds.steps.empty()) {
    s += j.ds.outcome + ": " + j.ds.message.substr(0, 160);
  } else {
    const StepFigures &f = j.ds.steps.front(), &l = j.ds.steps.back();
    int skipped = 0;
    for (const auto& st : j.ds.steps) skipped += st.skipped;
    s += "loss " + fmt(f.loss, 5) + " .. " + fmt(l.loss, 5) + ", grad norm " + fig(f.grad_norm) + " .. " +
         fig(l.grad_norm) + ", skipped " + std::to_string(skipped);
  }
  if (j.zrepro) {
    s += "   | zrepro as " + j.release + (j.zrepro_diff.empty() ? ": agrees" : ": DIFFERS (" + j.zrepro_diff + ")");
  } else {
    s += "   | zrepro as " + j.release + ": did not finish (" + b.out + "/zrepro-" + j.release + ".log)";
  }
  return s;
}

// What every bisect.json says besides the search's answer: the inputs and tolerances.
BisectDocument document_of(const Bisect& b, const std::vector<std::string>& releases, const std::string& torch) {
  BisectDocument d;
  d.config = b.config, d.good = releases.front(), d.bad = releases.back();
  d.tolerance = b.tol, d.ranks = b.ranks, d.steps = b.steps, d.torch = torch, d.model = b.model;
  d.inputs_key = b.inputs.key;
  return d;
}

// Every judged release as bisect.json carries it, oldest first.
std::vector<BisectRelease> judged_rows(const Bisect& b, const std::vector<std::string>& releases) {
  std::vector<BisectRelease> rows;
  for (const std::string& r : releases) {
    const auto it = b.judged.find(r);
    if (it == b.judged.end()) continue;
    const Judged& j = it->second;
    rows.push_back({r, verdict_name(j.verdict), j.why, j.from_cache, j.ds, j.zrepro,
                    j.zrepro_diff.empty() ? std::nullopt : std::optional<std::string>(j.zrepro_diff)});
  }
  return rows;
}

void write_document(const Bisect& b, const BisectDocument& d) {
  write_file_atomic(b.out + "/bisect.json", json_text(d.to_json()) + "\n");
  std::cout << "[zrepro bisect] " << b.out << "/bisect.json" << std::endl;
}

// Prints the verdict and writes OUT/bisect.json; returns the exit code.
int report(Bisect& b, const std::vector<std::string>& releases, const Bisection& found, const json& user) {
  const ReleaseFigures& good = b.judged[releases.front()].ds;
  const std::string last_good = releases[found.last_good], first = releases[found.first_moved];
  std::cout << "\n[zrepro bisect] releases judged (oldest first), each against " << releases.front() << ":\n";
  BisectDocument d = document_of(b, releases, good.torch);
  d.judged = judged_rows(b, releases);
  for (const BisectRelease& r : d.judged) {
    std::cout << row(b, b.judged.at(r.release)) << "\n";
    if (r.zrepro_differs) d.zrepro_differs_at.push_back(r.release);
  }
  if (!d.zrepro_differs_at.empty()) {
    std::cout << "  zrepro under the profile of";
    for (const std::string& r : d.zrepro_differs_at) std::cout << " " << r;
    std::cout << " differs from the real release: zrepro does not model what changed there (a conformance "
                 "finding for zrepro, not a regression in your job; its figures for those releases are not "
                 "DeepSpeed's)\n";
  }
  d.outcome = found.exact() ? "first moved" : "in window";
  d.last_good = last_good, d.first_moved = first, d.exact = found.exact();
  d.moved = moved(b.judged[last_good].ds, b.judged[first].ds, b.tol);
  std::cout << "\n[zrepro bisect] " << (found.exact() ? "first release whose figures moved: " + first
                                                      : "the figures moved in one of " + last_good + " .. " + first)
            << " (last good: " << last_good << ")\n";
  if (!found.skipped.empty()) {
    std::cout << "  not judged in that window (could not run here):";
    for (size_t i : found.skipped) std::cout << " " << releases[i];
    std::cout << "\n";
  }
  std::cout << "  what moved from " << last_good << " to " << first << ":\n";
  for (const std::string& m : d.moved) std::cout << "    " << m << "\n";
  const auto between = changes_touching(user, last_good, first);
  std::cout << "  the version table's changes in (" << last_good << ", " << first << "] that touch this config:"
            << (between.empty() ? " none (a change the table does not know: read the release notes)" : "") << "\n";
  for (const VersionChange* c : between) {
    std::cout << "    " << c->since << " " << c->kind << " " << c->key << ": " << c->effect
              << (c->pr.empty() ? "" : " (" + c->pr + ")") << "\n";
    d.version_table_changes.push_back({c->since, c->kind, c->key, c->effect, c->pr});
  }
  std::cout << "  release notes: https://github.com/deepspeedai/DeepSpeed/releases/tag/v" << first
            << " (pip's install of DeepSpeed carries no changelog)\n";
  std::cout << "  basis: real DeepSpeed on this CPU (DS_ACCELERATOR=cpu, gloo, " << b.ranks << " ranks, " << b.steps
            << " steps, torch " << good.torch << ") on zrepro's " << b.model
            << " with one set of weights and batches; tolerance "
            << b.tol.numerics << " relative on loss and grad norm (" << b.tol.basis << "), " << b.tol.bytes
            << " on bytes by category and collective bytes, skipped steps exact; a CPU run shows numerics, "
               "bytes of model states and collectives, not GPU kernels or CUDA memory\n";
  write_document(b, d);
  return kExitOk;
}

// The releases from good to bad (both known, good older); both ends must run here.
std::vector<std::string> window(const std::string& good, const std::string& bad, int stage) {
  for (const auto& [flag, v] : {std::pair<std::string, std::string>{"--good", good}, {"--bad", bad}})
    if (const auto why = cpu_refusal(v, stage)) throw ConfigError(flag + " " + v + ": cannot run here: " + *why);
  std::vector<std::string> out;
  for (const std::string& r : deepspeed_releases())
    if (compare_versions(r, good) >= 0 && compare_versions(r, bad) <= 0) out.push_back(r);
  return out;
}

// zrepro as the good release: the inputs every release trains on, the config DeepSpeed gets.
void prepare(Bisect& b, const std::string& good, const json& user) {
  b.good = good;
  run_zrepro(b, good, true);
  const std::optional<Summary>& summary = b.good_summary;
  if (!summary || summary->status != "ok")
    throw ConfigError("--config " + b.config + ": zrepro could not train it as DeepSpeed " + good + " (see " + b.out +
                      "/zrepro-" + good + ".log); bisect needs a config that trains");
  b.precision = summary->precision.value_or("fp32");
  const SummaryModelSizes model = summary->model_sizes().value_or(SummaryModelSizes{"?", "?"});
  b.model = model.name + " (" + model.family + ", " + std::to_string(model.params) + " parameters)";
  b.stage = static_cast<int>(summary->zero_stage.value_or(0));
  const json resolved = summary->resolved_config();
  // [Note: an output never replaces an input]: the config DeepSpeed gets is bisect's own file,
  // never the user's (a --out that is the config's folder), nor a file bisect did not write.
  const std::string ds_config = b.out + "/deepspeed_config.json";
  check_output_target("--out", ds_config, {b.config}, [](const std::string& t) {
    return t.find("\"train_micro_batch_size_per_gpu\"") != std::string::npos;
  });
  std::vector<double> lr_by_step;  // [Note: the optimizer the Trainer brings]
  for (const SummaryStep& s : summary->steps) lr_by_step.push_back(s.lr);
  write_json_file(ds_config, config_for_deepspeed(user, resolved, lr_by_step));
  if (!user.contains("optimizer"))
    std::cout << "[zrepro bisect] no \"optimizer\" in " << b.config
              << ": every release gets the Trainer's, as zrepro trained it (torch AdamW, or DeepSpeedCPUAdam under an "
                 "optimizer offload; lr, betas, eps and weight decay as summary.json's effective_config says"
              << (user.contains("scheduler") ? "" : "; the lr of each step as zrepro's run had it") << ")\n";
  b.inputs.config = ds_config;
  b.inputs.inputs = b.out + "/zrepro-" + good + "/inputs";
  b.inputs.ranks = b.ranks;
  b.inputs.steps = b.steps;
  b.inputs.key = inputs_key(ds_config, b.inputs.inputs, b.ranks, b.steps);
}

int bisect_releases(Bisect& b, const std::vector<std::string>& releases, const json& user) {
  const Judged& g = judge(b, releases.front(), nullptr, true);
  if (g.verdict == Verdict::kSkip || g.ds.outcome != "ran")
    throw ConfigError("--good " + releases.front() + ": it did not train this config here: " +
                      (g.why.empty() ? g.ds.outcome + ": " + g.ds.message : g.why));
  const ReleaseFigures good = g.ds;
  const Judged& bad = judge(b, releases.back(), &good, true);
  if (bad.verdict == Verdict::kSkip) throw ConfigError("--bad " + releases.back() + ": " + bad.why);
  if (bad.verdict == Verdict::kGood) {
    std::cout << "[zrepro bisect] " << releases.front() << " and " << releases.back()
              << " give the same figures within the tolerance: nothing to bisect (a change that came and went "
                 "between them is not seen: bisect a narrower window)\n";
    BisectDocument d = document_of(b, releases, good.torch);
    d.outcome = "no move";
    d.judged = judged_rows(b, {releases.front(), releases.back()});
    write_document(b, d);
    return kExitAbNoFailure;
  }
  const Bisection found = bisect(releases.size(), [&](size_t i) { return judge(b, releases[i], &good).verdict; });
  return report(b, releases, found, user);
}

// `--list`: every release of the version table, the ZeRO stages it runs here (or why
// none), and the environments the cache holds for it (by torch).
int list_releases(const std::string& cache) {
  std::cout << "[zrepro bisect] DeepSpeed releases on this machine's CPU (cache " << cache << "):\n";
  for (const std::string& r : deepspeed_releases()) {
    std::string stages, why;
    for (int stage = 1; stage <= 3; ++stage) {
      const auto refusal = cpu_refusal(r, stage);
      if (!refusal) stages += (stages.empty() ? "" : ",") + std::to_string(stage);
      else why = *refusal;
    }
    std::string envs;
    const std::string prefix = "deepspeed-" + r + "+torch-";
    if (fs::is_directory(cache + "/envs"))
      for (const auto& e : fs::directory_iterator(cache + "/envs")) {
        const std::string name = e.path().filename().string();
        if (name.rfind(prefix, 0) == 0 && fs::exists(e.path() / ".ready"))
          envs += (envs.empty() ? "" : ", ") + name.substr(prefix.size());
      }
    std::cout << "  " << release_column(r)
              << (stages.empty() ? "does not run here" : "ZeRO " + stages) << (why.empty() ? "" : " (" + why + ")")
              << (envs.empty() ? "" : "; installed over torch " + envs) << "\n";
  }
  return kExitOk;
}

}  // namespace bisect_cmd

int bisect_command(int argc, char** argv) {
  using namespace bisect_cmd;
  cxxopts::Options o("zrepro bisect",
                     "The first DeepSpeed release between --good and --bad whose loss, grad norm, skipped steps, "
                     "bytes by category or collective bytes moved, found by running the real releases on this CPU "
                     "on zrepro's toy. Every other flag goes to zrepro's runs (--model, --micro-batch, ...).");
  o.allow_unrecognised_options();
  o.add_options("bisect")
      ("config", "DeepSpeed JSON config", cxxopts::value<std::string>())
      ("good", "a release whose figures are right, e.g. 0.16.0", cxxopts::value<std::string>())
      ("bad", "a later release whose figures moved", cxxopts::value<std::string>()->default_value(newest_deepspeed_version()))
      ("ranks", "ranks of every run", cxxopts::value<int>()->default_value("2"))
      ("steps", "optimizer steps of every run", cxxopts::value<int>()->default_value("3"))
      ("tolerance", "relative tolerance on losses and grad norms (default: 4x the good and bad releases' run-to-run spread, measured by a second run of each; 1e-5 fp32, 1e-2 16-bit where no spread is measured)",
       cxxopts::value<double>())
      ("bytes-tolerance", "relative tolerance on bytes", cxxopts::value<double>()->default_value("1e-3"))
      ("cache", "environments and recorded runs (default: $ZREPRO_CACHE_DIR/bisect, else ~/.cache/zrepro/bisect)",
       cxxopts::value<std::string>())
      ("python", "a Python with torch to run DeepSpeed with (default: $ZREPRO_PYTHON, else "
                 "~/.cache/zrepro/conformance-venv/bin/python, which scripts/conformance.sh makes)",
       cxxopts::value<std::string>())
      ("out", "folder for the runs and bisect.json", cxxopts::value<std::string>()->default_value("bisect_out"))
      ("list", "list the releases zrepro knows: which run here at which ZeRO stages, which are installed in the cache")
      ("h,help", "show this help");
  return command_main(o, argc, argv, [&](const cxxopts::ParseResult& r) -> int {
    if (launched_by_mpi()) throw ConfigError("zrepro bisect starts its runs itself: run it without mpirun");
    if (r.count("list")) return list_releases(opt<std::string>(r, "cache").value_or(default_bisect_cache()));
    Bisect b;
    b.config = require_config(opt<std::string>(r, "config"));
    const json user = read_config(b.config);
    if (!r.count("good")) throw ConfigError("--good: required (a release whose figures are right, e.g. --good 0.16.0)");
    b.ranks = r["ranks"].as<int>();
    b.steps = r["steps"].as<int>();
    if (b.ranks < 1 || b.ranks > 8) throw ConfigError("--ranks: got " + std::to_string(b.ranks) + ", expected 1..8");
    if (b.steps < 1) throw ConfigError("--steps: got " + std::to_string(b.steps) + ", expected 1 or more");
    b.out = r["out"].as<std::string>();
    b.run_flags = r.unmatched();
    return with_out_dir(b.out, "zrepro bisect", [&]() -> int {
      b.out = fs::absolute(b.out).string();
      const std::string good = check_deepspeed_version("--good", r["good"].as<std::string>()),
                        bad = check_deepspeed_version("--bad", r["bad"].as<std::string>());
      if (compare_versions(good, bad) >= 0)
        throw ConfigError("--good " + good + " --bad " + bad + ": the good release must be older than the bad one");
      for (const char* flag : {"tolerance", "bytes-tolerance"}) {
        if (!r.count(flag)) continue;
        const double v = r[flag].as<double>();
        if (!(v >= 0 && v < 1))  // a relative window: below 0 it is empty, from 1 on it admits any change
          throw ConfigError(std::string("--") + flag + ": got " + fmt(v) + ", expected a relative "
                            "tolerance in [0, 1) (e.g. 1e-5 for fp32 losses, 1e-3 for bytes)");
      }
      prepare(b, good, user);
      const std::vector<std::string> releases = window(good, bad, b.stage);
      b.tol = default_tolerance(b.precision);
      if (r.count("tolerance")) {
        b.tol.numerics = r["tolerance"].as<double>(), b.tolerance_given = true;
        b.tol.basis = "--tolerance " + fmt(b.tol.numerics) + " relative, as given";
      }
      b.tol.bytes = r["bytes-tolerance"].as<double>();

      BisectPaths paths{opt<std::string>(r, "cache").value_or(default_bisect_cache()),
                        opt<std::string>(r, "python").value_or(default_bisect_python()), conformance_scripts_dir()};
      std::cout << "[zrepro bisect] asking " << paths.python << " for its torch (up to " << python_probe_timeout_s()
                << " s)" << std::endl;
      const std::string torch = python_torch_version(paths.python, b.out + "/python.log");
      std::cout << "[zrepro bisect] " << releases.size() << " releases " << releases.front() << " .. "
                << releases.back() << "; DeepSpeed runs on "
                << (torch.empty() ? "nothing (no Python with torch at " + paths.python + "): cached runs only"
                                  : "torch " + torch + " (" + paths.python + ")")
                << "; cache " << paths.cache << std::endl;
      b.runner = std::make_unique<ReleaseRunner>(paths, torch, b.out);
      return bisect_releases(b, releases, user);
    });
  }, nullptr, Words::the_command_reads_them);
}

}  // namespace zrepro
