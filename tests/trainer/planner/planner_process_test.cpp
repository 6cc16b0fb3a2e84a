// `zrepro plan` as a user runs it: table, JSON and exit codes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "device/device_memory.h"
#include "tests/support/process.h"
#include "tests/trainer/planner/planner_configs.h"
#include "trainer/config/ds_config.h"
#include "trainer/planner/gpt_memory.h"
#include "trainer/planner/planner.h"
#include "trainer/planner/scale_down.h"
#include "trainer/loop/train.h"

using namespace zrepro;
using namespace planner_test;


TEST(Planner, PlanCommandTableJsonAndExitCodes) {
  const std::string cfg = zrepro_test::fresh_dir("plan_cmd") + "/ds.json";
  std::ofstream(cfg) << sized_config(3, false);
  auto r = zrepro_test::zrepro_cmd("plan --config " + cfg + " --model tiny --world-size 2 --micro-batch 2 --json", 60,
                                   false);
  ASSERT_EQ(r.code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  for (const char* key : {"peak_bytes", "by_category", "peak_phase", "verdict", "oom_phase", "phases",
                          "deepspeed_estimates", "model_states"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["verdict"], "fits");
  auto oom = zrepro_test::zrepro_cmd("plan --config " + cfg + " --model small --device-memory 8MB");
  EXPECT_EQ(oom.code, 3) << oom.output;
  EXPECT_NE(oom.output.find("verdict: OOM in phase"), std::string::npos) << oom.output;
  EXPECT_NE(oom.output.find("the first allocation past the capacity"), std::string::npos) << oom.output;
  // [Note: which phase an OOM is in]: under activation checkpointing a forward OOM may be
  // reported from backward by the job, and the plan says so.
  const std::string fba = std::string(ZREPRO_SOURCE_DIR).append("/configs/scenarios/first-batch-activations/ds_config.json");
  auto ckpt = zrepro_test::zrepro_cmd("plan --config " + fba + " --model small --device-memory 60MB --activation-checkpointing");
  EXPECT_EQ(ckpt.code, 3) << ckpt.output;
  EXPECT_NE(ckpt.output.find("OOM in phase forward"), std::string::npos) << ckpt.output;
  EXPECT_NE(ckpt.output.find("were it to fit, the run would peak at"), std::string::npos) << ckpt.output;
  EXPECT_NE(ckpt.output.find("the job's own OOM may be reported from backward"), std::string::npos) << ckpt.output;
  EXPECT_NE(oom.output.find("DeepSpeed's estimator"), std::string::npos);
  auto bad = zrepro_test::zrepro_cmd("plan --config " + cfg + " --world-size 0");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.output.find("--world-size"), std::string::npos) << bad.output;
}

// A missing or foreign recording is refused with what to do, not replayed.
// [Note: tapes of this LibTorch]
TEST(Tapes, AMissingOrForeignRecordingIsRefused) {
  const std::string dir = zrepro_test::fresh_dir("tapes_refused");
  nlohmann::json foreign = tapes_to_json(planner_tapes());
  foreign["libtorch"] = "0.4.1";
  std::ofstream(dir + "/foreign.json") << foreign.dump();
  for (const auto& [file, words] : std::vector<std::pair<std::string, std::string>>{
           {dir + "/none.json", "are missing"}, {dir + "/foreign.json", "recorded with LibTorch 0.4.1"}}) {
    const auto r = zrepro_test::shell("ZREPRO_TAPES_FILE=" + file + " " + ZREPRO_BIN + " plan --config " +
                                      ZREPRO_SOURCE_DIR + "/configs/examples/zero3_offload.json 2>&1");
    EXPECT_NE(r.code, 0) << r.output;
    EXPECT_NE(r.output.find(words), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("zrepro_tapes"), std::string::npos) << r.output;
  }
}
