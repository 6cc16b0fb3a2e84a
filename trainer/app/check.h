// `zrepro check` and its suite: regression checks a CI runs after an upgrade
// (trainer/report/baseline.h says what is compared and how much it may move).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <cxxopts.hpp>
#include <nlohmann/json.hpp>

#include "trainer/report/baseline.h"

namespace zrepro {

// The baseline figures of a run folder; `flag` is the flag that named it (--run, --baseline).
Baseline baseline_of_run(const std::string& dir, const std::string& flag);
// A baseline file (or a run folder as one), validated; ConfigError naming the path.
Baseline read_baseline(const std::string& path);

// [Note: a check suite] A folder of the configs a CI guards:
//   DIR/NAME.json            a DeepSpeed config (every *.json directly in DIR)
//   DIR/NAME.args            optional: that config's run arguments as one would type them
//                            (words separated by blanks, no quoting; `#` starts a comment;
//                            no --config, no --out), e.g. "--model tiny --steps 6 --micro-batch 2"
//   DIR/baselines/NAME.json  its baseline, written by --save-suite DIR
// --save-suite runs each config (`zrepro run --config DIR/NAME.json ARGS`) and writes its
// baseline; --suite runs each the same way and compares it with its baseline, so an "auto"
// config and an explicit fp16 one each keep their own flags. One table, --json, --junit;
// exit 11 if any case moved or could not run, 2 when the folder itself is wrong.
// With `deepspeed` (OLD,NEW) each config is checked under the two real releases instead of
// against its baseline ([Note: check against the real releases]).
int check_suite(const std::string& dir, bool save, const std::string& work, const CheckTolerances& tol, bool as_json,
                const std::string& junit_path, const std::optional<std::string>& deepspeed = std::nullopt);

// [Note: check against the real releases] `zrepro check --deepspeed OLD,NEW -- --config
// ds.json RUN ARGS` is the upgrade test against DeepSpeed itself, not against zrepro's model
// of it: zrepro trains the config once (its weights and batches fixed, --export-inputs),
// then each real release trains the same inputs on this CPU through zrepro bisect's drivers
// and cache (trainer/bisect/release_env.h), and every figure bisect compares (the outcome,
// each step's loss, grad norm and skipped flag, bytes by category per rank and phase,
// collective bytes per step) is a row, OLD as the baseline and NEW as now, under bisect's
// tolerances ([Note: what counts as a move], release_figures.h). Exit 11 when one moved,
// naming the figure and the release; the version table's entries between the two that
// touch the config are reported beside. Offline once the cache holds both releases' runs
// (a CI warms it with one run, then keeps ~/.cache/zrepro/bisect or --cache DIR).
struct BisectDocument;
CheckResult releases_compared(const BisectDocument& d, const std::string& older, const std::string& newer);
// One config under the two releases: the rows, where bisect wrote (its folder and log), its
// exit (0 compared; another: the runs did not finish).
struct ReleasesRun {
  std::string name;  // "DeepSpeed OLD -> NEW: CONFIG"
  CheckResult result;
  std::string run_dir, log;
  int code = 0;
};
ReleasesRun run_releases(const std::string& pair, const std::vector<std::string>& run_args, const std::string& work);
int check_releases(const std::string& pair, const std::vector<std::string>& run_args, const std::string& work,
                   bool as_json, const std::string& junit);

// One case of a JUnit report: its name, its comparison, and an error (a case that could
// not run or had no baseline) when not empty.
struct JUnitCase {
  std::string name;
  CheckResult result;
  std::string error;
  double seconds = 0;           // how long the case took (its run and the comparison)
  std::string run_dir, log;     // where its run wrote, and its log ("" when it never ran, or ran without check)
};
// JUnit XML (the <testsuites>/<testsuite>/<testcase> form Jenkins, GitLab and GitHub
// test reporters read): every case with its time and a <system-out> naming its run folder
// and log and holding the rows compared (a passing case too); a moved case is a <failure>
// whose message is the cause in one line (CheckResult::headline) and whose text is the
// table; an error an <error>.
std::string junit_xml(const std::string& suite, const std::vector<JUnitCase>& cases);

}  // namespace zrepro
