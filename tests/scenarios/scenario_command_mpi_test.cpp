// `zrepro scenario list | run` as a user runs them: every scenario.json is listed and
// valid (its configs exist), and the runnable scenarios reproduce their symptom and
// verify their fix through ab (first-batch-activations on 1 rank, bucket-buffers and
// mismatched-collectives on 2).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/support/process.h"

namespace {

const std::string kDir = std::string(ZREPRO_SOURCE_DIR) + "/configs/scenarios";

}  // namespace

TEST(ScenarioCommand, ListNamesEveryScenarioJsonAndTheirConfigsExist) {
  const auto list = zrepro_test::zrepro_cmd("scenario list --dir " + kDir);
  EXPECT_EQ(list.code, 0) << list.output;
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(kDir)) {
    const auto path = e.path() / "scenario.json";
    if (!std::filesystem::exists(path)) continue;
    ++n;
    std::ifstream in(path);
    const auto s = nlohmann::json::parse(in);
    EXPECT_EQ(s["name"], e.path().filename().string());
    EXPECT_NE(list.output.find(s["name"].get<std::string>() + ": "), std::string::npos) << list.output;
    for (const char* side : {"a", "b"})
      EXPECT_TRUE(std::filesystem::exists(e.path() / s[side]["config"].get<std::string>())) << path;
  }
  EXPECT_GE(n, 3);
}

TEST(ScenarioCommand, RunReproducesAndVerifies) {
  for (const char* name : {"first-batch-activations", "bucket-buffers", "mismatched-collectives"}) {
    const std::string out = zrepro_test::fresh_dir(std::string("scenario_") + name);
    const auto r = zrepro_test::zrepro_cmd(std::string("scenario run ") + name + " --dir " + kDir + " --out " + out, 180);
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("symptom reproduced, fix verified"), std::string::npos) << r.output;
    EXPECT_TRUE(std::filesystem::exists(out + "/ab.json")) << name;
  }
  const auto unknown = zrepro_test::zrepro_cmd("scenario run no-such-thing --dir " + kDir);
  EXPECT_EQ(unknown.code, 2);
  EXPECT_NE(unknown.output.find("no-such-thing"), std::string::npos) << unknown.output;
}
