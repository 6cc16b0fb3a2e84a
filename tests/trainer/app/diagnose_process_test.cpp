// `zrepro diagnose` as a user runs it on what a real job left: a folder of PyTorch Flight
// Recorder dumps (one per rank) gives the hang's kind; a folder without one is exit 2.
#include <gtest/gtest.h>

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
