// `zrepro verify` as a user runs it (it starts a 2-rank run): every equivalence holds
// for a plain config, the injected host-accumulation bug fails the offload line (exit
// 8), token normalisation keeps every split of padded batches exact where per-micro-batch
// means do not (with the size of the difference), and bad input exits 2.
#include <gtest/gtest.h>

#include <fstream>

#include "tests/support/process.h"

namespace {

const std::string kConfig = std::string(ZREPRO_SOURCE_DIR).append("/configs/examples/stage0_fp32.json");

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

// [Note: the loss of an accumulated step] over variable-length samples.
TEST(Verify, TokenNormalisationHoldsOnPaddedBatchesAndPerMicroBatchMeansDiffer) {
  const std::string flags = " --steps 3 --seq-len-dist uniform:2 --loss-normalization ";
  const std::string tok = zrepro_test::fresh_dir("verify_token");
  const auto t = zrepro_test::zrepro_cmd("verify --config " + kConfig + flags + "token --out " + tok);
  EXPECT_EQ(t.code, 0) << t.output;
  const auto tc = checks(tok);
  ASSERT_EQ(tc.size(), 8u);
  for (size_t i = 0; i < 7; ++i) EXPECT_EQ(tc[i]["status"], "PASS") << tc[i].dump();
  // The contrast: the same split under per-micro-batch means, and by how much it differs.
  EXPECT_EQ(tc[7]["check"], "micro 4 x gas 2 vs micro 8 x gas 1, mean-normalised");
  EXPECT_EQ(tc[7]["status"], "DIFF") << tc[7].dump();
  EXPECT_GT(tc[7]["max_grad_norm_rel_diff"].get<double>(), 0.01) << tc[7].dump();

  const std::string mean = zrepro_test::fresh_dir("verify_mean");
  const auto m = zrepro_test::zrepro_cmd("verify --config " + kConfig + flags + "mean --out " + mean);
  EXPECT_EQ(m.code, 8) << m.output;
  const auto mc = checks(mean);
  ASSERT_EQ(mc.size(), 8u);
  for (const auto& line : mc) {
    const std::string what = line["check"];
    // The lines that regroup samples into other micro-batches fail, and say why.
    const bool regroups = what.find("ranks") != std::string::npos || what.rfind("micro 4", 0) == 0 ||
                          what.find("offload") != std::string::npos;
    const bool contrast = what.find("token-normalised") != std::string::npos;
    EXPECT_EQ(line["status"], regroups && !contrast ? "FAIL" : "PASS") << line.dump();
    if (regroups && !contrast) {
      EXPECT_NE(line["note"].get<std::string>().find("--loss-normalization token"), std::string::npos) << line.dump();
    }
  }
  EXPECT_EQ(mc[7]["check"], "micro 4 x gas 2 vs micro 8 x gas 1, token-normalised");
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
