// The command-line helpers of trainer/app/cli.h: a value of the wrong type is
// refused with the flag it was given to, also inside a comma-separated list.
#include <gtest/gtest.h>

#include "device/base/errors.h"
#include "trainer/app/cli.h"

using namespace zrepro;

namespace {

std::string error_of(std::vector<std::string> args) {
  cxxopts::Options o("zrepro test", "");
  o.add_options()("ranks", "", cxxopts::value<std::vector<int>>())("steps", "", cxxopts::value<int>());
  args.insert(args.begin(), "zrepro");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  try {
    parse(o, static_cast<int>(argv.size()), argv.data());
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Cli, WrongTypeNamesTheFlagEvenInsideAList) {
  EXPECT_NE(error_of({"--steps", "many"}).find("--steps"), std::string::npos);
  EXPECT_NE(error_of({"--steps=many"}).find("--steps"), std::string::npos);
  EXPECT_NE(error_of({"--ranks", "1,x"}).find("--ranks"), std::string::npos) << error_of({"--ranks", "1,x"});
  EXPECT_NE(error_of({"--ranks=1,x"}).find("--ranks"), std::string::npos);
  EXPECT_EQ(error_of({"--ranks", "1,2"}), "");
}
