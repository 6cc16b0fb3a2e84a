// Issue 60: every command that waits on runs shows where they are, per side and run, on a
// terminal ([Note: progress of a child], trainer/runtime/subprocess.h). Each command runs
// under a pseudo-terminal (util-linux `script`), as a user at a shell sees it, and its
// output must hold a rewritten progress line past "starting": a step of the child's, which
// the child marks at every step whatever its --log-every (kChildProgressEnv).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "tests/support/process.h"

namespace {

// `zrepro ARGS` under a pty; its output as the terminal received it. The progress line is
// rewritten every 0.2 s (ZREPRO_HEARTBEAT_S; a second by default), so a fast machine ticks
// within the child's steps too.
zrepro_test::Process under_pty(const std::string& args) {
  return zrepro_test::shell("ZREPRO_HEARTBEAT_S=0.2 timeout -k 5 300 script -qefc '" + std::string(ZREPRO_BIN) + " " + args +
                            "' /dev/null 2>&1 < /dev/null");
}

// The progress line of `what` at a step past 0 of `steps`, rewritten in place ("\r").
void expect_step_progress(const zrepro_test::Process& r, const std::string& what, int steps) {
  const std::regex line("\r\\[zrepro\\] " + what + ": step ([1-9][0-9]*)/" + std::to_string(steps) + ", [0-9]+ s");
  EXPECT_TRUE(std::regex_search(r.output, line)) << what << "\n" << r.output;
}

// A run long enough for several ticks: the small model, 12 steps, a log line
// only at the end (--log-every 12), so the steps between come from the markers alone.
const char* kLong = "--model small --steps 12 --log-every 12";

}  // namespace

TEST(Progress, AbShowsEachSidesStepOnATerminal) {
  const std::string out = zrepro_test::fresh_dir("progress_ab");
  const auto r = under_pty("ab --a " + zrepro_test::scenario_path("first-batch-activations") +
                           " --b-args --activation-checkpointing " + kLong + " --out " + out);
  EXPECT_EQ(r.code, 7) << r.output;  // no capacity: nothing fails, nothing to fix
  expect_step_progress(r, "side A on 1 rank\\(s\\)", 12);
  expect_step_progress(r, "side B on 1 rank\\(s\\)", 12);
}

TEST(Progress, CheckShowsItsRunsStepOnATerminal) {
  const std::string out = zrepro_test::fresh_dir("progress_check");
  const auto r = under_pty("check --work " + out + "/work --save " + out + "/base.json -- --config " +
                           zrepro_test::scenario_path("first-batch-activations") + " " + kLong);
  EXPECT_EQ(r.code, 0) << r.output;
  expect_step_progress(r, "the run to check", 12);
}

TEST(Progress, ScenarioRunShowsEachSidesStepOnATerminal) {
  // A scenario of its own, long enough to tick: accumulation-loss-mismatch's two sides on
  // the small model for 12 steps.
  const std::string dir = zrepro_test::fresh_dir("progress_scenario");
  std::filesystem::create_directories(dir + "/s/slow-steps");
  std::filesystem::copy_file(zrepro_test::scenario_path("accumulation-loss-mismatch"), dir + "/s/slow-steps/ds_config.json");
  std::ofstream(dir + "/s/slow-steps/scenario.json") << R"({"name": "slow-steps",
    "symptom": "the grad norm differs between mean and token loss normalization on padded batches",
    "expect": "differs:grad_norm:0.02",
    "a": {"config": "ds_config.json", "args": ["--loss-normalization", "mean"]},
    "b": {"config": "ds_config.json", "args": ["--loss-normalization", "token"]},
    "args": ["--seq-len-dist", "uniform:2", "--model", "small", "--steps", "12", "--log-every", "12"],
    "ranks": [1]})";
  const auto r = under_pty("scenario run slow-steps --dir " + dir + "/s --out " + dir + "/out");
  EXPECT_EQ(r.code, 0) << r.output;
  expect_step_progress(r, "side A on 1 rank\\(s\\)", 12);
  expect_step_progress(r, "side B on 1 rank\\(s\\)", 12);
}
