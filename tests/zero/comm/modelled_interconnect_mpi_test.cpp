// The modelled interconnect ([Note: modelled interconnect] in zero/comm/communicator.h):
// under --interconnect-gbps every collective of a two-rank run takes at least its array
// bytes x the nccl-tests busbw factor / the bandwidth, so each op's time per step is at
// least that floor (a lower bound: the sleep guarantees it, whatever the machine's load).
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "tests/support/process.h"

namespace {

// The floor of each op's seconds per step on 2 ranks at gbps, from summary.json's
// ZeRO-convention bytes (all-reduce counts its array twice; busbw factors 1, 1/2, 1/2).
void expect_floor(const nlohmann::json& s, double gbps) {
  const auto& ops = s["comm"]["ops"];
  int checked = 0;
  for (const auto& [op, factor_per_byte] : std::map<std::string, double>{
           {"all_reduce", 0.5}, {"reduce_scatter", 0.5}, {"all_gather", 0.5}}) {
    const double bytes = ops[op]["bytes_per_step"].get<double>(), secs = ops[op]["seconds_per_step"].get<double>();
    if (bytes < 100000) continue;
    const double floor = bytes * factor_per_byte / (gbps * 1e9);
    EXPECT_GE(secs, floor * 0.999) << op;
    ++checked;
  }
  EXPECT_GE(checked, 2) << s["comm"].dump();
}

}  // namespace

TEST(ModelledInterconnect, EveryCollectiveTakesAtLeastItsModelledTime) {
  const std::string cfg = R"({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2,
      "optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
      "zero_optimization": {"stage": 3, "reduce_bucket_size": 500000}})";
  const auto slow = zrepro_test::zrepro_run("interconnect_slow", cfg, "--ranks 2 --steps 2 --interconnect-gbps 0.02");
  ASSERT_EQ(slow.code, 0) << slow.output;
  EXPECT_EQ(slow.summary["comm"]["modelled_busbw_GBps"], 0.02);
  expect_floor(slow.summary, 0.02);
  const auto fast = zrepro_test::zrepro_run("interconnect_fast", cfg, "--ranks 2 --steps 2");
  ASSERT_EQ(fast.code, 0) << fast.output;
  EXPECT_TRUE(fast.summary["comm"]["modelled_busbw_GBps"].is_null());
}
