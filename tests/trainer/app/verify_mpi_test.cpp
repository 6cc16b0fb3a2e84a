// `zrepro verify` as a user runs it (it starts a 2-rank run): every equivalence holds
// for a plain config, the injected host-accumulation bug fails the offload line (exit
// 8), and bad input exits 2.
#include <gtest/gtest.h>

#include <fstream>

#include "tests/support/process.h"

namespace {

const std::string kConfig = std::string(ZREPRO_SOURCE_DIR) + "/configs/examples/stage0_fp32.json";

nlohmann::json checks(const std::string& out) {
  std::ifstream in(out + "/verify.json");
  return nlohmann::json::parse(in)["checks"];
}

}  // namespace

TEST(Verify, EveryEquivalenceHoldsAndTheInjectedAccumulationBugIsCaught) {
  const std::string out = zrepro_test::fresh_dir("verify_ok");
  const auto ok = zrepro_test::zrepro_cmd("verify --config " + kConfig + " --steps 3 --out " + out);
  EXPECT_EQ(ok.code, 0) << ok.output;
  const auto c = checks(out);
  ASSERT_EQ(c.size(), 7u);
  for (const auto& line : c) EXPECT_EQ(line["status"], "PASS") << line.dump();

  const std::string bug = zrepro_test::fresh_dir("verify_bug");
  const auto caught = zrepro_test::zrepro_cmd("verify --config " + kConfig + " --steps 3 --inject drop-accumulated-grads:0 --out " + bug);
  EXPECT_EQ(caught.code, 8) << caught.output;
  for (const auto& line : checks(bug)) {
    const bool offload = line["check"].get<std::string>().find("offload") != std::string::npos;
    EXPECT_EQ(line["status"], offload ? "FAIL" : "PASS") << line.dump();
  }
}

TEST(Verify, BadInputExitsTwo) {
  const auto missing = zrepro_test::zrepro_cmd("verify");
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.output.find("--config"), std::string::npos) << missing.output;
  const auto refused = zrepro_test::zrepro_cmd("verify --config " + kConfig + " --precision fp8 --out " +
                                               zrepro_test::fresh_dir("verify_bad"));
  EXPECT_EQ(refused.code, 2) << refused.output;
  EXPECT_NE(refused.output.find("--precision"), std::string::npos) << refused.output;
}
