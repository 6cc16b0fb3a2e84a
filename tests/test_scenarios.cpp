// The SCENARIOS.md reproductions under configs/scenarios/: each symptom (exit code,
// phase, hint) and its fix, through the zrepro binary as a user runs them.
#include <gtest/gtest.h>

#include <unistd.h>

#include "tests/zrepro_process.h"
#include "trainer/ds_config.h"
#include "trainer/planner.h"

using zrepro_test::expect_same_losses;
using zrepro_test::RunResult;

namespace {

std::string scenario(const std::string& name, const std::string& file = "ds_config.json") {
  return zrepro_test::read_text(std::string(ZREPRO_SOURCE_DIR) + "/configs/scenarios/" + name + "/" + file);
}
RunResult run(const std::string& name, const std::string& cfg, const std::string& args) {
  return zrepro_test::zrepro_run(name, cfg, args);
}

}  // namespace

TEST(Scenario, OptimizerPartitionOom) {
  const std::string cfg = scenario("optimizer-partition-oom");
  RunResult one = run("opt_oom1", cfg, "--model small --device-memory 48MB --steps 2");
  EXPECT_EQ(one.code, 3) << one.output;
  EXPECT_EQ(one.summary["failure"]["phase"], "partition");
  EXPECT_NE(one.summary["failure"]["hint"].get<std::string>().find("Optimizer states"), std::string::npos);
  RunResult four = run("opt_oom4", cfg, "--model small --device-memory 48MB --steps 2 --ranks 4");
  ASSERT_EQ(four.code, 0) << four.output;
  const int64_t psi = four.summary["model"]["params"];
  for (const auto& rank : four.summary["memory"]["ranks"]) {
    EXPECT_EQ(rank["by_category"]["optimizer_states"], 12 * psi / 4);
    EXPECT_LE(rank["peak_bytes"].get<int64_t>(), 48000000);
  }
}

TEST(Scenario, FirstBatchActivations) {
  const std::string cfg = scenario("first-batch-activations");
  const std::string base = "--model small --steps 3 ";
  RunResult ref = run("fba_ref", cfg, base);
  RunResult fail = run("fba_fail", cfg, base + "--device-memory 120MB");
  EXPECT_EQ(fail.code, 3) << fail.output;
  const std::string phase = fail.summary["failure"]["phase"];
  EXPECT_TRUE(phase == "forward" || phase == "backward") << phase;
  EXPECT_NE(fail.summary["failure"]["hint"].get<std::string>().find("activation checkpointing"), std::string::npos);
  RunResult ckpt = run("fba_ckpt", cfg, base + "--device-memory 120MB --activation-checkpointing");
  RunResult split = run("fba_split", cfg, base + "--device-memory 120MB --micro-batch 2");
  EXPECT_EQ(split.summary["batch"]["grad_accum"], 4);
  expect_same_losses(ref, ckpt, 1e-6, "activation checkpointing");
  expect_same_losses(ref, split, 1e-5, "micro 2 x gas 4");
}

TEST(Scenario, BucketBuffers) {
  auto read = [](const char* name) { return scenario("bucket-buffers", name); };
  RunResult fail = run("bb_fail", read("ds_config.json"), "--ranks 2 --device-memory 256MB --steps 3");
  EXPECT_EQ(fail.code, 3) << fail.output;
  EXPECT_EQ(fail.summary["failure"]["phase"], "backward");
  EXPECT_NE(fail.summary["failure"]["message"].get<std::string>().find("category comm_buffers"), std::string::npos);
  RunResult fixed = run("bb_fixed", read("fixed.json"), "--ranks 2 --device-memory 256MB --steps 3");
  ASSERT_EQ(fixed.code, 0) << fixed.output;
  // Unconstrained, the peaks differ by the bucket bytes: (5e8 - 5e5) fp32 elements.
  RunResult big = run("bb_big", read("ds_config.json"), "--ranks 2 --steps 2");
  RunResult small = run("bb_small", read("fixed.json"), "--ranks 2 --steps 2");
  const double diff = big.summary["memory"]["ranks"][0]["peak_bytes"].get<double>() -
                      small.summary["memory"]["ranks"][0]["peak_bytes"].get<double>();
  EXPECT_NEAR(diff, 4.0 * (5e8 - 5e5), 0.01 * 4.0 * (5e8 - 5e5));
}

TEST(Scenario, Zero2ParamsDontFit) {
  const std::string target =
      "--ranks 4 --target-model gpt3-6.7b --target-device-memory 40GB --activation-checkpointing --steps 2";
  RunResult fail = run("z2_fail", scenario("zero2-params-dont-fit"), target);
  ASSERT_EQ(fail.code, 3) << fail.output;
  EXPECT_EQ(fail.summary["failure"]["phase"], "forward");
  EXPECT_EQ(fail.summary["scale_down"]["target_planned"]["oom_phase"], "forward");
  EXPECT_NE(fail.summary["failure"]["hint"].get<std::string>().find("ZeRO stage 3"), std::string::npos)
      << fail.summary["failure"].dump();
  RunResult fixed = run("z2_fixed", scenario("zero2-params-dont-fit", "fixed.json"), target);
  ASSERT_EQ(fixed.code, 0) << fixed.output;
  const double stage2_params = fail.summary["failure"]["by_category"]["params"];
  for (const auto& rank : fixed.summary["memory"]["ranks"])
    EXPECT_GT(stage2_params / rank["model_states"]["params"].get<double>(), 3.0) << rank.dump();
}

TEST(Scenario, Zero3LiveParams) {
  using nlohmann::json;
  const json fixed = json::parse(scenario("zero3-live-params", "fixed.json"));
  auto variant = [&](const json& zero) {
    json c = fixed;
    c["zero_optimization"].update(zero);
    return c.dump();
  };
  struct Case {
    const char* name;
    std::string config;
  };
  const std::vector<Case> cases = {
      {"defaults", scenario("zero3-live-params")},
      {"big_prefetch", variant({{"stage3_prefetch_bucket_size", 50000000}, {"stage3_max_live_parameters", 1000000000}})},
      {"fixed", fixed.dump()},
      {"max_live_1", variant({{"stage3_prefetch_bucket_size", 50000000}, {"stage3_max_live_parameters", 1}})},
  };
  std::map<std::string, int64_t> comm_peak;
  for (const auto& c : cases) {
    RunResult r = run(std::string("lp_") + c.name, c.config, "--ranks 2 --model small --steps 3");
    ASSERT_EQ(r.code, 0) << r.output;
    const auto& rank0 = r.summary["memory"]["ranks"][0];
    const auto& planned = r.summary["memory"]["planned"];
    const double measured = rank0["peak_bytes"];
    EXPECT_LE(std::abs(planned["peak_bytes"].get<double>() - measured) / measured, 0.05) << c.name;
    comm_peak[c.name] = rank0["category_peaks"]["comm_buffers"];
    EXPECT_NEAR(planned["category_peaks"]["comm_buffers"].get<double>(), comm_peak[c.name], 0.05 * comm_peak[c.name])
        << c.name;
  }
  const int64_t block_bytes = 2 * zrepro::resolve_model("small").block_params();  // one gathered bf16 block
  EXPECT_EQ(comm_peak["big_prefetch"], comm_peak["defaults"]);  // prefetching everything = keeping everything
  EXPECT_LT(comm_peak["fixed"], comm_peak["defaults"]);
  EXPECT_LT(comm_peak["max_live_1"], comm_peak["fixed"]);
  EXPECT_GE(comm_peak["max_live_1"], block_bytes);  // the current layer is gathered whatever max_live says
}

TEST(Scenario, OffloadLinkBottleneck) {
  const std::string args = "--model small --steps 3 --host-link-gbps 0.5";
  RunResult slow = run("lb_slow", scenario("offload-link-bottleneck"), args);
  RunResult fast = run("lb_fast", scenario("offload-link-bottleneck", "fixed.json"), args);
  ASSERT_EQ(slow.code, 0) << slow.output;
  ASSERT_EQ(fast.code, 0) << fast.output;
  const auto& s = slow.summary["offload"]["ranks"][0];
  const auto& f = fast.summary["offload"]["ranks"][0];
  // Gradients go down every micro-step (8 of them) instead of once.
  EXPECT_EQ(s["d2h_bytes"].get<int64_t>(), 8 * f["d2h_bytes"].get<int64_t>());
  // Parameter shards come up for every gather instead of the updated partition once per step.
  EXPECT_GT(s["h2d_bytes"].get<int64_t>(), 4 * f["h2d_bytes"].get<int64_t>());
  for (const auto* r : {&s, &f}) {
    EXPECT_GT((*r)["copy_s"].get<double>(), 0);
    EXPECT_GE((*r)["device_busy_fraction"].get<double>(), 0);
    EXPECT_LE((*r)["device_busy_fraction"].get<double>(), 1);
  }
}

TEST(Scenario, PageableCopies) {
  const std::string args = "--model tiny --steps 4 --host-link-gbps 0.5";
  RunResult pageable = run("pg_pageable", scenario("pageable-copies"), args);
  RunResult pinned = run("pg_pinned", scenario("pageable-copies", "fixed.json"), args);
  expect_same_losses(pinned, pageable, 1e-6, "pinned vs pageable");
  const auto& pg = pageable.summary["offload"]["ranks"][0];
  EXPECT_EQ(pg["overlap_ratio"].get<double>(), 0.0);  // synchronous: every copy exposed
  EXPECT_EQ(pg["host_pinned_bytes"], 0);
  EXPECT_GT(pg["host_pageable_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(pinned.summary["offload"]["ranks"][0]["host_pageable_bytes"], 0);
}

TEST(Scenario, OffloadWithAccumulation) {
  RunResult ref = run("acc_ref", scenario("offload-with-accumulation", "reference.json"), "--steps 8");
  RunResult off = run("acc_off", scenario("offload-with-accumulation"), "--steps 8");
  expect_same_losses(ref, off, 1e-5, "offload, micro 2 x gas 4 vs micro 8");
  RunResult bug = run("acc_bug", scenario("offload-with-accumulation"), "--steps 8 --inject drop-accumulated-grads:0");
  ASSERT_EQ(bug.code, 0) << bug.output;
  for (size_t i = 0; i < ref.summary["steps"].size(); ++i) {
    const double a = ref.summary["steps"][i]["grad_norm"], b = bug.summary["steps"][i]["grad_norm"];
    EXPECT_GT(std::abs(a - b), 0.1 * a) << "step " << i << ": the dropped micro-steps must show";
  }
}

TEST(Scenario, MemlockLimit) {
  const bool root = ::geteuid() == 0;
  if (root && zrepro_test::shell("setpriv --inh-caps=-ipc_lock --bounding-set=-ipc_lock true").code != 0)
    GTEST_SKIP() << "cannot drop CAP_IPC_LOCK here (setpriv missing)";
  const std::string dir = zrepro_test::fresh_dir("memlock");
  const std::string src = std::string(ZREPRO_SOURCE_DIR) + "/configs/scenarios/memlock-limit/";
  const std::string drop = root ? "setpriv --inh-caps=-ipc_lock --bounding-set=-ipc_lock " : "";
  auto limited = [&](const std::string& args) {
    return zrepro_test::shell("sh -c 'ulimit -l 64 && " + drop + std::string(ZREPRO_BIN) + " " + args + "' 2>&1");
  };
  auto fail = limited("run --config " + src + "ds_config.json --steps 2 --out " + dir + "/o1");
  EXPECT_EQ(fail.code, 1) << fail.output;
  EXPECT_NE(fail.output.find("ulimit -l is 64 KiB"), std::string::npos) << fail.output;
  EXPECT_NE(fail.output.find("CAP_IPC_LOCK not held"), std::string::npos) << fail.output;
  EXPECT_NE(fail.output.find("\"pin_memory\": false"), std::string::npos) << fail.output;
  const auto summary = nlohmann::json::parse(zrepro_test::read_text(dir + "/o1/summary.json"));
  EXPECT_EQ(summary["status"], "error");
  EXPECT_EQ(summary["failure"]["checkpoint"], "pinned-memory");
  EXPECT_EQ(summary["failure"]["phase"], "init");
  EXPECT_EQ(summary["failure"]["memlock_limit_bytes"], 65536);
  EXPECT_EQ(summary["failure"]["cap_ipc_lock"], false);
  EXPECT_GT(summary["failure"]["needed_bytes"].get<int64_t>(), 65536);
  auto plan = limited("plan --config " + src + "ds_config.json");
  EXPECT_NE(plan.output.find("the run would fail at init"), std::string::npos) << plan.output;
  auto ok = limited("run --config " + src + "fixed.json --steps 2 --out " + dir + "/o2");
  EXPECT_EQ(ok.code, 0) << ok.output;
}

TEST(Scenario, Fragmentation) {
  const std::string cfg = scenario("fragmentation");
  const std::string base = "--model small --allocator caching --device-memory 150MB --steps 40";
  RunResult frag = run("frag", cfg, base + " --dynamic-seq 16");
  ASSERT_EQ(frag.code, 3) << frag.output;
  const auto& f = frag.summary["failure"];
  EXPECT_GT(f["step"].get<int64_t>(), 1) << "the OOM must come after the first steps";
  const int64_t stranded = f["reserved_bytes"].get<int64_t>() - f["allocated_bytes"].get<int64_t>();
  EXPECT_GT(stranded, f["request_bytes"].get<int64_t>()) << f.dump();
  EXPECT_NE(frag.output.find("expandable_segments:True"), std::string::npos);
  ASSERT_EQ(frag.metrics.size(), f["step"].get<size_t>());  // the steps before it completed
  RunResult fixed_len = run("frag_fixed", cfg, base);
  EXPECT_EQ(fixed_len.code, 0) << fixed_len.output;
  const std::string dir = zrepro_test::fresh_dir("frag_expandable");
  std::ofstream(dir + "/ds.json") << cfg;
  auto expandable = zrepro_test::shell("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True timeout 300 " +
                                       std::string(ZREPRO_BIN) + " run --config " + dir + "/ds.json --out " + dir +
                                       "/out " + base + " --dynamic-seq 16 2>&1");
  EXPECT_EQ(expandable.code, 0) << expandable.output;
  EXPECT_NE(expandable.output.find("expandable segments"), std::string::npos);
}
