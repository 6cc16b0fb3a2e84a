// Stage 3 with full offload on two ranks: same losses as without offload, copies reported.
#include <gtest/gtest.h>

#include <atomic>

#include "device/device_memory.h"
#include "offload/copy_engine.h"
#include "offload/host_memory.h"
#include "offload/optimizer_offload.h"
#include "tests/support/train_helpers.h"
#include "tests/support/process.h"
#include "trainer/config/ds_config.h"
#include "trainer/config/model_spec.h"
#include "trainer/loop/train.h"

using namespace zrepro;
using zrepro_test::expect_same_losses;
using zrepro_test::train_tiny;

TEST(Offload, Stage3FullOffloadOnTwoRanksMatchesAndReportsCopies) {
  const std::string base = R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
      "optimizer": {"type": "AdamW", "params": {"lr": 0.003}},
      "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 1000)";
  const std::string offload = R"(, "offload_optimizer": {"device": "cpu", "pin_memory": true},
      "offload_param": {"device": "cpu", "pin_memory": true})";
  auto ref = zrepro_test::zrepro_run("off_ref", base + "}}", "--ranks 2 --steps 6");
  auto on = zrepro_test::zrepro_run("off_on", base + offload + "}}", "--ranks 2 --steps 6 --host-link-gbps 4");
  expect_same_losses(ref, on, 1e-5, "stage 3 full offload, gas 4, 2 ranks");
  ASSERT_TRUE(on.summary["offload"].is_object()) << on.output;
  for (const auto& r : on.summary["offload"]["ranks"]) {
    EXPECT_GT(r["d2h_bytes"].get<int64_t>(), 0);
    EXPECT_GT(r["h2d_bytes"].get<int64_t>(), 0);
    EXPECT_GT(r["copy_s"].get<double>(), 0);
    EXPECT_GE(r["overlap_ratio"].get<double>(), 0);
    EXPECT_LE(r["overlap_ratio"].get<double>(), 1);
    EXPECT_GT(r["host_pinned_bytes"].get<int64_t>(), 0);
  }
  EXPECT_EQ(on.summary["offload"]["host_link_gbps"], 4.0);
  EXPECT_GT(on.summary["time"]["breakdown_s"]["offload_copy"].get<double>(), 0);
  const std::string html = zrepro_test::read_text(on.dir + "/out/report.html");
  EXPECT_NE(html.find("<h2>Offload (host link 4 GB/s modelled)</h2>"), std::string::npos);
  const auto& dev = on.summary["memory"]["ranks"][0]["model_states"];
  EXPECT_EQ(dev["optimizer_states"], 0);
  EXPECT_EQ(dev["grads"], 0);
}
