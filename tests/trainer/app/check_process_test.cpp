// `zrepro check` as CI would run it after an upgrade: a baseline saved from a run, an
// identical rerun passes (exit 0), and a changed bucket size, a changed precision and an
// injected accumulation bug each fail (exit 11) on the figure they move. Step time is
// left out here (--time-tol 100): machines running tests are noisy (baseline_test.cpp
// checks the time rule).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/support/process.h"

namespace {

const char* kConfig = R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
  "zero_optimization": {"stage": 2, "reduce_bucket_size": 20000, "allgather_bucket_size": 20000,
                        "offload_optimizer": {"device": "cpu", "pin_memory": false}}})";

std::string write(const std::string& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir + "/" + name) << text;
  return dir + "/" + name;
}

}  // namespace

TEST(Check, IdenticalRerunPassesAndEachChangeFailsOnItsFigure) {
  const std::string dir = zrepro_test::fresh_dir("check");
  const std::string cfg = write(dir, "ds.json", kConfig);
  const std::string run = " -- --config " + cfg + " --model tiny --steps 4";
  const auto save = zrepro_test::zrepro_cmd("check --save " + dir + "/B.json --work " + dir + "/w0" + run, 180);
  ASSERT_EQ(save.code, 0) << save.output;
  const std::string base = " --baseline " + dir + "/B.json --time-tol 100";

  const auto same = zrepro_test::zrepro_cmd("check" + base + " --work " + dir + "/w1" + run, 180);
  EXPECT_EQ(same.code, 0) << same.output;
  EXPECT_NE(same.output.find("PASS"), std::string::npos) << same.output;
  const auto folder = zrepro_test::zrepro_cmd("check" + base + " --run " + dir + "/w0/run --json", 60, false);
  EXPECT_EQ(folder.code, 0) << folder.output;
  EXPECT_TRUE(nlohmann::json::parse(folder.output)["passed"].get<bool>());

  std::string smaller = kConfig;
  smaller.replace(smaller.find("\"reduce_bucket_size\": 20000"), 27, "\"reduce_bucket_size\": 10000");
  const auto bucket = zrepro_test::zrepro_cmd(
      "check" + base + " --work " + dir + "/w2 -- --config " + write(dir, "small.json", smaller) + " --model tiny --steps 4", 180);
  EXPECT_EQ(bucket.code, 11) << bucket.output;
  EXPECT_NE(bucket.output.find("FAIL memory.rank0.comm_buffers"), std::string::npos) << bucket.output;

  const auto bf16 = zrepro_test::zrepro_cmd("check" + base + " --work " + dir + "/w3" + run + " --precision bf16", 180);
  EXPECT_EQ(bf16.code, 11) << bf16.output;
  EXPECT_NE(bf16.output.find("FAIL setup.precision"), std::string::npos) << bf16.output;

  const auto bug = zrepro_test::zrepro_cmd(
      "check" + base + " --work " + dir + "/w4" + run + " --inject drop-accumulated-grads:0", 180);
  EXPECT_EQ(bug.code, 11) << bug.output;
  EXPECT_NE(bug.output.find("FAIL loss (worst step)"), std::string::npos) << bug.output;

  EXPECT_EQ(zrepro_test::zrepro_cmd("check --save x.json --baseline y.json --run " + dir).code, 2);
  EXPECT_EQ(zrepro_test::zrepro_cmd("check --baseline " + cfg + " --run " + dir + "/w0/run").code, 2)
      << "not a baseline";
  // Issue 31: a run folder given as the baseline (it ended in std::ios_base::failure, exit
  // 134) is a baseline: its summary's figures. A folder without a summary is exit 2.
  const auto run_as_base = zrepro_test::zrepro_cmd("check --baseline " + dir + "/w0/run --time-tol 100 --run " +
                                                   dir + "/w1/run");
  EXPECT_EQ(run_as_base.code, 0) << run_as_base.output;
  const auto empty_dir = zrepro_test::zrepro_cmd("check --baseline " + dir + " --run " + dir + "/w1/run");
  EXPECT_EQ(empty_dir.code, 2) << empty_dir.output;
  EXPECT_NE(empty_dir.output.find("--baseline: \"" + dir + "/summary.json\" is missing"), std::string::npos)
      << empty_dir.output;
}

// [Note: summary schema]: a run folder's summary names its schema; one of another schema,
// or one without (an older zrepro's), is refused before any comparison (exit 2, naming
// the file and both schemas), and the schema a run writes is the one this zrepro reads.
TEST(Check, ASummaryOfAnotherSchemaIsRefused) {
  const auto run = zrepro_test::zrepro_run("check_schema", kConfig, "--steps 2");
  ASSERT_EQ(run.code, 0) << run.output;
  EXPECT_EQ(run.summary["schema"], "zrepro.summary/1");
  const std::string out = run.dir + "/out";
  auto edited = run.summary;
  edited["schema"] = "zrepro.summary/999";
  std::ofstream(out + "/summary.json") << edited.dump();
  auto r = zrepro_test::zrepro_cmd("check --save " + run.dir + "/b.json --run " + out);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("zrepro.summary/999"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("this zrepro reads zrepro.summary/1"), std::string::npos) << r.output;
  edited.erase("schema");
  std::ofstream(out + "/summary.json") << edited.dump();
  r = zrepro_test::zrepro_cmd("check --save " + run.dir + "/b.json --run " + out);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("schema none"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(run.dir + "/b.json"));
}

// Issue 31: DeepSpeed 0.19.4 -> 0.19.8 on a ZeRO-3 offload config that never set
// pin_memory flips offload pinning on (0 -> 2.26 MiB page-locked); the check fails on host
// memory by kind and names the changed effective keys, the version change reported.
TEST(Check, AnUpgradeThatFlipsPinningFailsOnHostMemoryAndTheConfig) {
  const std::string dir = zrepro_test::fresh_dir("check_upgrade");
  const std::string cfg =
      std::string(ZREPRO_SOURCE_DIR) + "/configs/scenarios/upgrade-pinned-default/ds_config.json";
  const std::string run = " -- --config " + cfg + " --steps 2 --deepspeed-version ";
  const auto save = zrepro_test::zrepro_cmd("check --save " + dir + "/B.json --work " + dir + "/w0" + run + "0.19.4", 180);
  ASSERT_EQ(save.code, 0) << save.output;
  const auto after = zrepro_test::zrepro_cmd(
      "check --baseline " + dir + "/B.json --time-tol 100 --work " + dir + "/w1" + run + "0.19.8", 180);
  EXPECT_EQ(after.code, 11) << after.output;
  EXPECT_NE(after.output.find("FAIL memory.rank0.host_pinned"), std::string::npos) << after.output;
  EXPECT_NE(after.output.find("FAIL config.zero_optimization.offload_optimizer.pin_memory false"), std::string::npos)
      << after.output;
  EXPECT_NE(after.output.find("deepspeed_version"), std::string::npos) << after.output;
}
