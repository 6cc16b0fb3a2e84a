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

TEST(Cli, DeviceMemoryTakesPresetsAndSizes) {
  // The capacity PyTorch reports on an A100 40GB: 39.59 GiB, in whole MiB.
  EXPECT_EQ(parse_device_memory("--device-memory", "a100-40gb"), 40540LL * 1048576);
  EXPECT_EQ(parse_device_memory("--device-memory", "A100-80GB"), parse_device_memory("--device-memory", "a100-80gb"));
  EXPECT_LT(parse_device_memory("--device-memory", "h100-80gb"), 80LL << 30) << "less than the marketing size";
  EXPECT_EQ(parse_device_memory("--device-memory", "40GB"), 40LL * 1000 * 1000 * 1000);
  EXPECT_EQ(parse_device_memory("--device-memory", "40GiB"), 40LL << 30);
  for (const auto& d : device_presets()) EXPECT_GT(parse_device_memory("--x", d.name), 10LL << 30) << d.name;
  try {
    parse_device_memory("--target-device-memory", "a100");
    ADD_FAILURE() << "a100 was accepted";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--target-device-memory"), std::string::npos) << m;
    EXPECT_NE(m.find("a100-40gb"), std::string::npos) << m;
    EXPECT_NE(m.find("GiB (2^30)"), std::string::npos) << m;
  }
}

// Issue 14: a size that is not whole bytes in 1 B .. 1 PiB is refused, never "unlimited".
TEST(Cli, SizesOutsideOneByteToOnePebibyteAreRefused) {
  for (const char* v : {"0.5", "0", "inf", "nan", "9.3e18", "2e15", "-1GB", "0.4B"}) {
    try {
      parse_device_memory("--device-memory", v);
      ADD_FAILURE() << v << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("--device-memory: got \"" + std::string(v) + "\""), std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(parse_size("--x", "1"), 1);
  EXPECT_EQ(parse_size("--x", "1e-3GB"), 1000000);
}
