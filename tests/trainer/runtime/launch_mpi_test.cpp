// Launching a run the way clusters do: `mpirun -np N --hostfile FILE zrepro run ...`
// (several nodes; here a hostfile that names this machine twice) starts the same run as
// `zrepro run --ranks N` on one node: same world size, same losses, one summary.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "tests/support/process.h"

TEST(Launch, HostfileRunMatchesRanksFlag) {
  const std::string dir = zrepro_test::fresh_dir("launch_hostfile");
  std::ofstream(dir + "/ds.json") << R"({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2,
      "optimizer": {"type": "AdamW", "params": {"lr": 0.001}}, "zero_optimization": {"stage": 2}})";
  std::ofstream(dir + "/hostfile") << "localhost\nlocalhost\n";  // one line per slot
  const std::string bin = ZREPRO_BIN;
  const auto by_flag = zrepro_test::zrepro_cmd("run --config " + dir + "/ds.json --steps 3 --ranks 2 --out " + dir + "/flag", 180);
  ASSERT_EQ(by_flag.code, 0) << by_flag.output;
  const auto by_hostfile = zrepro_test::shell(
      "timeout -k 5 180 mpirun -np 2 --hostfile " + dir + "/hostfile --oversubscribe --bind-to none " +
      "-x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1 " + bin + " run --config " + dir + "/ds.json --steps 3 --out " +
      dir + "/hostfile_out 2>&1");
  ASSERT_EQ(by_hostfile.code, 0) << by_hostfile.output;
  const auto a = nlohmann::json::parse(zrepro_test::read_text(dir + "/flag/summary.json"));
  const auto b = nlohmann::json::parse(zrepro_test::read_text(dir + "/hostfile_out/summary.json"));
  EXPECT_EQ(b["world_size"], 2);
  ASSERT_EQ(a["steps"].size(), b["steps"].size());
  for (size_t i = 0; i < a["steps"].size(); ++i) EXPECT_EQ(a["steps"][i]["loss"], b["steps"][i]["loss"]) << "step " << i;
  EXPECT_EQ(b["memory"]["ranks"].size(), 2u);
}

// Issue 14: ranks started with different configs (MPMD mpirun, one file per rank) are
// told apart key by key at start-up, in the log and in summary.json (and, when they hang,
// in hang_report.json and the failure message).
TEST(Launch, RanksWithDifferentConfigsAreNamedKeyByKey) {
  const std::string dir = zrepro_test::fresh_dir("mpmd");
  std::ofstream(dir + "/a.json") << R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1})";
  std::ofstream(dir + "/b.json") << R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2})";
  const std::string common = " run --steps 2 --comm-timeout 20 --out " + dir + "/out";
  const zrepro_test::Process p = zrepro_test::shell(
      "timeout -k 5 120 mpirun -np 1 " + std::string(ZREPRO_BIN) + common + " --config " + dir + "/a.json : -np 1 " +
      ZREPRO_BIN + common + " --config " + dir + "/b.json 2>&1");
  EXPECT_NE(p.output.find("rank 1: gradient_accumulation_steps=2, others 1"), std::string::npos) << p.output;
  // Stage 0 reduces at the boundary only, so this job does not even hang: it trains on
  // inconsistent batches, and the summary says why its numbers cannot be trusted.
  const nlohmann::json s = nlohmann::json::parse(zrepro_test::read_text(dir + "/out/summary.json"));
  ASSERT_TRUE(s.contains("config_mismatch")) << p.output;
  EXPECT_EQ(s["config_mismatch"][0], "rank 1: gradient_accumulation_steps=2, others 1");
}

// Issue 14, [Note: a rank that vanished]: kill -9 of one rank. mpirun then ends the other
// with SIGTERM and, a second later, SIGKILL; the survivor, blocked in a collective the
// dead rank never joins, still writes its view: status interrupted, which rank vanished
// (pid and host), the collective it waited in. No process is left behind.
TEST(Launch, AKilledRanksSurvivorSaysWhichRankVanished) {
  const std::string dir = zrepro_test::fresh_dir("kill9");
  std::ofstream(dir + "/ds.json") << R"({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 3}})";
  const std::string run = std::string(ZREPRO_BIN).append(" run --config ") + dir + "/ds.json";
  const std::string ours = "[z]repro run --config " + dir + "/ds.json";  // pgrep pattern that does not match itself
  const auto r = zrepro_test::shell(
      run + " --model tiny --steps 1000000 --ranks 2 --out " + dir + "/out > " + dir + "/log 2>&1 & job=$!; " +
      "for i in $(seq 600); do grep -q 'step=' " + dir + "/log && break; sleep 0.1; done; " +
      "for p in $(pgrep -f '" + ours + "'); do tr '\\0' '\\n' < /proc/$p/environ 2>/dev/null | " +
      "grep -qx OMPI_COMM_WORLD_RANK=1 && kill -9 $p && echo killed $p; done; wait $job; echo exit=$?");
  ASSERT_NE(r.output.find("killed "), std::string::npos) << r.output << zrepro_test::read_text(dir + "/log");
  const std::string killed = r.output.substr(r.output.find("killed ") + 7, r.output.find('\n', r.output.find("killed ")) -
                                                                                r.output.find("killed ") - 7);
  const std::string log = zrepro_test::read_text(dir + "/log");
  const std::string text = zrepro_test::read_text(dir + "/out/summary.json");
  ASSERT_FALSE(text.empty()) << "the survivor wrote no summary.json\n" << r.output << log;
  const auto s = nlohmann::json::parse(text);
  EXPECT_EQ(s["status"], "interrupted") << log;
  const auto& f = s["failure"];
  ASSERT_EQ(f["peers_gone"].size(), 1u) << f.dump(1);
  EXPECT_EQ(f["peers_gone"][0]["rank"], 1);
  EXPECT_EQ(std::to_string(f["peers_gone"][0]["pid"].get<long>()), killed);
  EXPECT_NE(f["message"].get<std::string>().find("rank 1 (pid " + killed), std::string::npos) << f["message"];
  EXPECT_TRUE(f["last_collective"].is_string()) << f.dump(1);
  EXPECT_GT(s["steps"].size(), 0u);
  EXPECT_NE(log.find("[zrepro] rank 0 interrupted: rank 1 (pid " + killed + " on "), std::string::npos) << log;
  EXPECT_NE(zrepro_test::shell("pgrep -f '" + ours + "' > /dev/null").code, 0) << "a rank was left behind";
}

// Issue 14, [Note: the --ranks launcher]: SIGINT / SIGTERM to `zrepro run --ranks 2` reach
// the ranks through mpirun (as SIGTERM); they stop at one step boundary with every rank's
// view in summary.json, and the launcher exits 130 / 143 as a one-process run does (not
// mpirun's 1).
// Issue 33: an impatient second Ctrl-C used to reach mpirun, which killed the ranks before
// they wrote anything (no summary, no message). The launcher keeps it: the ranks still
// write their summaries, and the user is told a third signal would end them without.
TEST(Launch, ASecondSignalDoesNotCostTheSummaries) {
  const std::string dir = zrepro_test::fresh_dir("ranks_sig_twice");
  std::ofstream(dir + "/ds.json") << R"({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 2}})";
  const auto r = zrepro_test::shell(std::string(ZREPRO_BIN).append(" run --config ") + dir + "/ds.json --model tiny " +
                                    "--steps 1000000 --ranks 2 --out " + dir + "/out > " + dir + "/log 2>&1 & job=$!; " +
                                    "for i in $(seq 600); do grep -q 'step=' " + dir + "/log && break; sleep 0.1; done; " +
                                    "kill -INT $job; sleep 0.05; kill -INT $job; wait $job; echo exit=$?");
  const std::string log = zrepro_test::read_text(dir + "/log");
  EXPECT_NE(r.output.find("exit=130"), std::string::npos) << r.output << log;
  EXPECT_NE(log.find("a third signal kills them now, without summaries"), std::string::npos) << log;
  const auto s = nlohmann::json::parse(zrepro_test::read_text(dir + "/out/summary.json"));
  EXPECT_EQ(s["status"], "interrupted");
  EXPECT_EQ(s["failure"]["ranks_reported"].size(), 2u) << s["failure"].dump(1);
}

TEST(Launch, ASignalToTheRanksLauncherEndsLikeOneProcess) {
  for (const auto& [sig, code] : std::vector<std::pair<std::string, int>>{{"TERM", 143}, {"INT", 130}}) {
    const std::string dir = zrepro_test::fresh_dir("ranks_sig" + sig);
    std::ofstream(dir + "/ds.json") << R"({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 2}})";
    const auto r = zrepro_test::shell(std::string(ZREPRO_BIN).append(" run --config ") + dir + "/ds.json --model tiny " +
                                      "--steps 1000000 --ranks 2 --out " + dir + "/out > " + dir + "/log 2>&1 & job=$!; " +
                                      "for i in $(seq 600); do grep -q 'step=' " + dir + "/log && break; sleep 0.1; done; " +
                                      "kill -" + sig + " $job; wait $job; echo exit=$?");
    const std::string log = zrepro_test::read_text(dir + "/log");
    EXPECT_NE(r.output.find("exit=" + std::to_string(code)), std::string::npos) << sig << ": " << r.output << log;
    const auto s = nlohmann::json::parse(zrepro_test::read_text(dir + "/out/summary.json"));
    EXPECT_EQ(s["status"], "interrupted") << sig;
    // mpirun ends its job with SIGTERM whichever of the two it got (Ctrl-C included).
    EXPECT_EQ(s["failure"]["signal"], "SIGTERM");
    EXPECT_EQ(s["failure"]["ranks_reported"].size(), 2u) << s["failure"].dump(1);
    EXPECT_GT(s["steps"].size(), 0u);
  }
}
