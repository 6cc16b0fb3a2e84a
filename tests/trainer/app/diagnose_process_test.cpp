// `zrepro diagnose` as a user runs it on what a real job left: a folder of PyTorch Flight
// Recorder dumps (one per rank) gives the hang's kind; a folder without one is exit 2, and so
// is a rank's file that holds no dump.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/support/process.h"

TEST(DiagnoseCommand, AFolderOfFlightRecorderDumpsGivesTheHangsKind) {
  const std::string dir = std::string(ZREPRO_SOURCE_DIR).append("/tests/data/flight_recorder/");
  const auto divergent = zrepro_test::zrepro_cmd("diagnose " + dir + "divergent");
  EXPECT_EQ(divergent.code, 0) << divergent.output;
  EXPECT_NE(divergent.output.find("2 Flight Recorder dump(s)"), std::string::npos) << divergent.output;
  EXPECT_NE(divergent.output.find("moe-divergent-gathers"), std::string::npos) << divergent.output;
  const auto mismatched = zrepro_test::zrepro_cmd("diagnose " + dir + "mismatched --json", 60, false);
  EXPECT_EQ(mismatched.code, 0) << mismatched.output;
  const auto j = nlohmann::json::parse(mismatched.output);
  EXPECT_EQ(j["scenario"], "mismatched-collectives");
  EXPECT_EQ(j["flight_recorder_ranks"], 2);
  const auto none = zrepro_test::zrepro_cmd("diagnose " + std::string(ZREPRO_SOURCE_DIR).append("/configs"));
  EXPECT_EQ(none.code, 2) << none.output;
  EXPECT_NE(none.output.find("is a folder without a Flight Recorder dump"), std::string::npos) << none.output;
}

// Issue 61: one rank's file damaged (a rank that died writing it) is not read as the other
// rank alone in its collective: refused, naming the file.
TEST(DiagnoseCommand, ARankFileThatIsNoDumpIsRefusedNotSkipped) {
  const std::string dir = zrepro_test::fresh_dir("fr_damaged");
  std::filesystem::copy_file(std::string(ZREPRO_SOURCE_DIR).append("/tests/data/flight_recorder/mismatched/rank_0"),
                             dir + "/rank_0");
  std::ofstream(dir + "/rank_1") << "garbage: cut short";
  std::ofstream(dir + "/README.txt") << "dumps of the job";
  const auto r = zrepro_test::zrepro_cmd("diagnose " + dir);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("rank_1\" is named as a rank's Flight Recorder dump but holds none"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("rank-alone-in-collective"), std::string::npos) << r.output;
}

// Issue 59 item 5, [Note: a reproduction the log tells apart]: one rank alone timing out in
// an all-gather under ZeRO-3 is rank 0's lone evaluation, or ranks that fetched different
// parameters (MoE), or one that issued an extra collective; its one line does not say which. --write-scenario writes the named one and says so; --run refuses to pick (exit 2,
// naming --as); --as picks only among the open ones.
TEST(DiagnoseCommand, AnAmbiguousLogIsNotReproducedUntilTheUserPicks) {
  const std::string dir = zrepro_test::fresh_dir("diag_ambiguous");
  std::ofstream(dir + "/job.log")
      << "[rank0]: zero_optimization_stage .... 3\n"
         "[rank0]:[E ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation timeout: "
         "WorkNCCL(SeqNum=41, OpType=_ALLGATHER_BASE, NumelIn=1048576, NumelOut=2097152, Timeout(ms)=600000) "
         "ran for 600023 milliseconds before timing out.\n";
  std::ofstream(dir + "/ds.json") << R"({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 3}})";
  const std::string base = "diagnose " + dir + "/job.log --config " + dir + "/ds.json --world-size 2 ";
  const auto written = zrepro_test::zrepro_cmd(base + "--write-scenario " + dir + "/rep");
  ASSERT_EQ(written.code, 0) << written.output;
  EXPECT_NE(written.output.find("the log does not tell these apart: rank0-eval-hang, moe-divergent-gathers, mismatched-collectives"), std::string::npos)
      << written.output;
  const auto run = zrepro_test::zrepro_cmd(base + "--write-scenario " + dir + "/rep2 --run");
  EXPECT_EQ(run.code, 2) << run.output;
  EXPECT_NE(run.output.find("add --as NAME"), std::string::npos) << run.output;
  EXPECT_FALSE(std::filesystem::exists(dir + "/rep2/out")) << "nothing ran";
  const auto wrong = zrepro_test::zrepro_cmd(base + "--write-scenario " + dir + "/rep3 --as fp16-overflow");
  EXPECT_EQ(wrong.code, 2) << wrong.output;
  EXPECT_NE(wrong.output.find("--as: got \"fp16-overflow\", expected one of the scenarios this log leaves open "
                              "(rank0-eval-hang, moe-divergent-gathers, mismatched-collectives)"),
            std::string::npos)
      << wrong.output;
  const auto picked = zrepro_test::zrepro_cmd(base + "--write-scenario " + dir + "/rep4 --as moe-divergent-gathers");
  EXPECT_EQ(picked.code, 0) << picked.output;
  EXPECT_NE(zrepro_test::read_text(dir + "/rep4/scenario.json").find("moe-divergent-gathers"), std::string::npos);
}
