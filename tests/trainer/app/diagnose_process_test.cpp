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
