// trainer/config/user_file.h: [Note: an output never replaces an input] (issue 61): an output
// path that is one of the run's inputs (however spelled) or a file zrepro did not write is
// refused, exit 2, naming the flag; a new path or zrepro's own earlier output passes.
#include "trainer/config/user_file.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "device/base/errors.h"

using namespace zrepro;

namespace {

bool a_baseline(const std::string& t) { return t.find("\"zrepro_baseline\"") != std::string::npos; }

std::string refusal(const std::string& path, const std::vector<std::string>& inputs) {
  try {
    check_output_target("--save", path, inputs, a_baseline);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(UserFile, AnOutputNeverReplacesAnInputOrAFileZreproDidNotWrite) {
  const std::string dir = testing::TempDir() + "/zrepro_output_target";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir + "/sub");
  std::ofstream(dir + "/ds.json") << R"({"zero_optimization": {"stage": 2}})";
  std::ofstream(dir + "/old_baseline.json") << R"({"zrepro_baseline": 1})";
  std::ofstream(dir + "/notes.txt") << "my notes";
  EXPECT_EQ(refusal(dir + "/new.json", {dir + "/ds.json"}), "");
  EXPECT_EQ(refusal(dir + "/old_baseline.json", {dir + "/ds.json"}), "") << "zrepro's own output: replaced";
  EXPECT_NE(refusal(dir + "/sub/../ds.json", {dir + "/ds.json"}).find("one of this run's inputs"), std::string::npos);
  EXPECT_NE(refusal(dir + "/notes.txt", {}).find("not one zrepro wrote"), std::string::npos);
  EXPECT_NE(refusal(dir + "/sub", {}).find("not a file"), std::string::npos);
  std::ofstream(dir + "/empty.json").close();
  EXPECT_EQ(refusal(dir + "/empty.json", {}), "") << "an empty file holds nothing to lose";
}
