// `zrepro ab` as a user runs it: a failing config and its fix given as flags, the
// table, the verdict, ab.json / ab.html and the exit code; --plan-only; bad input.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "trainer/report/ab_doc.h"
#include "tests/support/process.h"

namespace {

nlohmann::json read(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

}  // namespace

TEST(Ab, ActivationCheckpointingFixesFirstBatchActivations) {
  const std::string out = zrepro_test::fresh_dir("ab_fba");
  const auto r = zrepro_test::zrepro_cmd("ab --a " + zrepro_test::scenario_path("first-batch-activations") +
                                         " --b-args --activation-checkpointing --model small --device-memory 120MB "
                                         "--steps 2 --out " + out);
  EXPECT_EQ(r.code, 0) << r.output;
  // [Note: progress of a child]: each side says it started (then a heartbeat every 10 s).
  EXPECT_NE(r.output.find("[zrepro] side A on 1 rank(s): starting"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("A reproduces: oom in"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("B fixes it: runs through"), std::string::npos) << r.output;
  const zrepro::AbDocument ab = zrepro::AbDocument::from_json(read(out + "/ab.json"));
  EXPECT_EQ(ab.outcome, "fixed");
  EXPECT_EQ(ab.rows[0].status, "oom");
  EXPECT_EQ(ab.rows[1].status, "ok");
  EXPECT_LT(ab.rows[1].peak_bytes_max.value(), ab.rows[1].capacity_bytes.value());
  EXPECT_TRUE(std::filesystem::exists(out + "/ab.html"));
  EXPECT_TRUE(std::filesystem::exists(out + "/A_r1/summary.json"));

  // The same A/B without the fix: B fails too.
  const auto same = zrepro_test::zrepro_cmd("ab --a " + zrepro_test::scenario_path("first-batch-activations") + " --b " +
                                            zrepro_test::scenario_path("first-batch-activations") +
                                            " --model small --device-memory 120MB --steps 2 --out " + out + "/same");
  EXPECT_EQ(same.code, 6) << same.output;
  EXPECT_NE(same.output.find("B does not fix it"), std::string::npos) << same.output;
}

TEST(Ab, PlanOnlyAndBadInput) {
  const std::string out = zrepro_test::fresh_dir("ab_plan");
  const auto p = zrepro_test::zrepro_cmd("ab --plan-only --a " + zrepro_test::scenario_path("first-batch-activations") +
                                         " --b-args --activation-checkpointing --model small --device-memory 120MB "
                                         "--out " + out);
  EXPECT_EQ(p.code, 0) << p.output;
  EXPECT_TRUE(zrepro::AbDocument::from_json(read(out + "/ab.json")).plan_only);
  EXPECT_NE(p.output.find("B fixes it"), std::string::npos) << p.output;
  // train_batch_size 8 with micro-batch 8 has no gradient accumulation for 2 ranks:
  // the side is refused with DeepSpeed's message and ab exits 2.
  const auto two = zrepro_test::zrepro_cmd("ab --plan-only --a " + zrepro_test::scenario_path("first-batch-activations") +
                                           " --b-args --activation-checkpointing --model small --ranks 1,2 --out " + out);
  EXPECT_EQ(two.code, 2) << two.output;
  EXPECT_NE(two.output.find("Gradient accumulation steps"), std::string::npos) << two.output;
  // A scale-down's target under --plan-only: the planner plans the target itself (the
  // zero2-params-dont-fit job: gpt3-6.7b at stage 2 on 40 GB OOMs, ZeRO-3 fits).
  const std::string z2 = zrepro_test::scenario_path("zero2-params-dont-fit");
  const std::string z3 = std::string(ZREPRO_SOURCE_DIR).append("/configs/scenarios/zero2-params-dont-fit/fixed.json");
  const auto target = zrepro_test::zrepro_cmd("ab --plan-only --a " + z2 + " --b " + z3 + " --ranks 4 "
                                              "--activation-checkpointing --target-model gpt3-6.7b "
                                              "--target-device-memory 40GB --out " + out + "/t");
  EXPECT_EQ(target.code, 0) << target.output;
  EXPECT_NE(target.output.find("A reproduces: oom (planned)"), std::string::npos) << target.output;
  const auto toy_only = zrepro_test::zrepro_cmd("ab --plan-only --a " + z2 + " --b-args --zero-stage=3 "
                                                "--target-model gpt3-6.7b --scale 1000 --out " + out + "/s");
  EXPECT_EQ(toy_only.code, 2) << toy_only.output;
  EXPECT_NE(toy_only.output.find("--scale with --plan-only"), std::string::npos) << toy_only.output;
  // --help spells the sides as users type them.
  const auto help = zrepro_test::zrepro_cmd("ab --help");
  EXPECT_NE(help.output.find("--a FILE"), std::string::npos) << help.output;
  EXPECT_EQ(help.output.find("--a-config"), std::string::npos) << help.output;
  const auto missing = zrepro_test::zrepro_cmd("ab --b x.json");
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.output.find("--a"), std::string::npos) << missing.output;
  const auto refused = zrepro_test::zrepro_cmd("ab --a " + zrepro_test::scenario_path("first-batch-activations") +
                                               " --b-args --activation-checkpointing --steps 0 --out " + out + "/bad");
  EXPECT_EQ(refused.code, 2) << refused.output;
  EXPECT_NE(refused.output.find("--steps"), std::string::npos) << refused.output;
}

// Issue 33 [Note: a partial folder goes]: ab whose outputs cannot be written (a 2 KiB file
// size limit, as a full disk) ends with exit 12, and the folder it made is gone; a folder
// that existed before, with the user's file in it, stays.
TEST(Ab, APartialFolderItMadeGoesOnAnIoFailure) {
  const std::string base = zrepro_test::fresh_dir("ab_partial");
  const std::string args = " --a " + zrepro_test::scenario_path("first-batch-activations") +
                           " --b-args --activation-checkpointing --model small --device-memory 120MB --steps 2";
  const std::string fresh = base + "/fresh";
  auto r = zrepro_test::shell("ulimit -f 2; " + std::string(ZREPRO_BIN).append(" ab") + args + " --out " + fresh +
                              " 2>&1; echo \"exit=$?\"");
  EXPECT_NE(r.output.find("exit=12"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("removed the partial " + fresh), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(fresh)) << r.output;
  const std::string mine = base + "/mine";
  std::filesystem::create_directories(mine);
  std::ofstream(mine + "/notes.txt") << "mine";
  r = zrepro_test::shell("ulimit -f 2; " + std::string(ZREPRO_BIN).append(" ab") + args + " --out " + mine +
                         " 2>&1; echo \"exit=$?\"");
  EXPECT_NE(r.output.find("exit=12"), std::string::npos) << r.output;
  EXPECT_TRUE(std::filesystem::exists(mine + "/notes.txt"));
}
