// `zrepro check --deepspeed OLD,NEW -- --config ds.json RUN ARGS`: the user's config trained
// on zrepro's toy under two real DeepSpeed releases on this CPU, compared figure by figure
// ([Note: check against the real releases], check.h).
#include <chrono>
#include <iostream>

#include "trainer/app/check.h"
#include "trainer/app/cli.h"
#include "trainer/bisect/bisect_doc.h"
#include "trainer/config/ds_versions.h"
#include "trainer/config/json_file.h"
#include "trainer/report/report.h"
#include "trainer/runtime/subprocess.h"

namespace zrepro {

using json = nlohmann::json;

namespace {

// "0.17.5,0.17.6" -> {"0.17.5", "0.17.6"}, the older first.
std::pair<std::string, std::string> release_pair(const std::string& given) {
  const size_t comma = given.find(',');
  const std::string a = given.substr(0, comma), b = comma == std::string::npos ? "" : given.substr(comma + 1);
  if (a.empty() || b.empty() || b.find(',') != std::string::npos || compare_versions(a, b) >= 0)
    throw ConfigError("--deepspeed: got \"" + given + "\", expected two DeepSpeed releases, the older first, e.g. "
                      "--deepspeed 0.17.5,0.17.6 (zrepro bisect --list names those that run here)");
  return {a, b};
}

// One figure of the two releases as a row of check's table: OLD as the baseline, NEW as now.
CheckRow row_of(const FigureRow& f, const Tolerance& tol, const std::string& newer) {
  const bool bytes = !f.unit.empty();
  const bool numeric = f.a.is_number() && f.figure != "steps";
  char rel[32];
  std::snprintf(rel, sizeof rel, "%g relative", bytes ? tol.bytes : tol.numerics);
  return {f.figure, f.a, f.b, numeric ? rel : "exact", f.ok, f.ok ? "" : "moved in DeepSpeed " + newer,
          RowKind::figure, bytes ? "bytes" : ""};
}

// The release's own figures from bisect.json (a run, a refusal, or why it was not judged).
const BisectRelease& judged(const BisectDocument& d, const std::string& release) {
  for (const BisectRelease& r : d.judged)
    if (r.release == release) return r;
  throw ConfigError("--deepspeed: DeepSpeed " + release + " was not judged (" + d.outcome + ")");
}

}  // namespace

CheckResult releases_compared(const BisectDocument& d, const std::string& older, const std::string& newer) {
  CheckResult res;
  res.rows.push_back({"deepspeed_version", older, newer, "reported", true,
                      "real releases on this CPU (" + d.model + ", " + std::to_string(d.ranks) + " ranks, " +
                          std::to_string(d.steps) + " steps, torch " + d.torch + "); numerics tolerance: " +
                          (d.tolerance.basis.empty() ? "fixed by precision" : d.tolerance.basis),
                      RowKind::version, ""});
  for (const FigureRow& f : compare_figures(judged(d, older).deepspeed, judged(d, newer).deepspeed, d.tolerance))
    res.rows.push_back(row_of(f, d.tolerance, newer));
  for (const BisectTableChange& c : d.version_table_changes)
    res.rows.push_back({"version table: " + c.key, older, c.since, "reported", true,
                        c.kind + ": " + c.effect + (c.pr.empty() ? "" : " (" + c.pr + ")"), RowKind::version, ""});
  return res;
}

ReleasesRun run_releases(const std::string& pair, const std::vector<std::string>& run_args, const std::string& work) {
  const auto [older, newer] = release_pair(pair);
  std::string config;
  std::vector<std::string> args = {"bisect", "--good", older, "--bad", newer, "--out", work + "/deepspeed"};
  for (size_t i = 0; i < run_args.size(); ++i) {
    if (run_args[i] == "--out") throw ConfigError("-- RUN ARGS: leave --out to zrepro check (it uses --work)");
    if (run_args[i] == "--config" && i + 1 < run_args.size()) config = run_args[i + 1];
    args.push_back(run_args[i]);
  }
  if (config.empty())
    throw ConfigError("--deepspeed: give the config to check after --: zrepro check --deepspeed " + pair +
                      " -- --config ds.json [--model M --micro-batch N ...]");
  make_out_dir(work);
  ReleasesRun r;
  r.name = "DeepSpeed " + older + " -> " + newer + ": " + config;
  r.run_dir = work + "/deepspeed", r.log = work + "/deepspeed.log";
  std::cerr << "[zrepro check] " << config << " under DeepSpeed " << older << " and " << newer
            << " (zrepro bisect's drivers and cache; log " << r.log << ")" << std::endl;
  r.code = run_self_or_refuse("the runs of DeepSpeed " + older + " and " + newer, args, r.log);
  if (r.code != kExitOk && r.code != kExitAbNoFailure) return r;  // bisect: 0 moved, 7 the two agree
  r.result = releases_compared(BisectDocument::from_json(read_json_file(r.run_dir + "/bisect.json")), older, newer);
  r.code = kExitOk;
  return r;
}

int check_releases(const std::string& pair, const std::vector<std::string>& run_args, const std::string& work,
                   bool as_json, const std::string& junit) {
  const auto t0 = std::chrono::steady_clock::now();
  const ReleasesRun r = run_releases(pair, run_args, work);
  if (r.code != kExitOk) {
    std::cerr << "[zrepro check] the runs of the two releases did not finish (exit " << r.code << "): " << r.log
              << std::endl;
    return r.code;
  }
  std::cout << (as_json ? json_text(r.result.to_json()) + "\n" : r.result.table());
  if (!junit.empty()) {
    JUnitCase c{r.name, r.result, "", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                r.run_dir, r.log};
    write_file_atomic(junit, junit_xml("zrepro check", {c}));
  }
  return r.result.passed() ? kExitOk : kExitCheckRegressed;
}

}  // namespace zrepro
