// trainer/report/baseline.h: what a baseline keeps from summary.json and which moves the
// check tolerates: memory within 2% (4 KiB floor), exact collective bytes, loss by
// precision, step time as a calibrated ratio, the planner's ratio, version changes reported.
#include "trainer/report/baseline.h"

#include <gtest/gtest.h>

#include <functional>

#include "device/base/errors.h"

namespace {

using json = nlohmann::json;
using namespace zrepro;

// A 2-rank ZeRO-2 run's summary, as the typed Summary carries it.
Summary summary() {
  return Summary::from_json(json::parse(R"({
    "schema": "zrepro.summary/1", "status": "ok", "world_size": 2, "zero_stage": 2, "precision": "fp32",
    "deepspeed_version": "0.19.8", "skipped_steps": 0, "model": {"name": "tiny"},
    "env": {"libtorch": {"version": "1.13.0"}, "nccl": {"version": "2.28.9"}, "cuda": {"runtime": "13.0"},
            "zrepro": {"commit": "abc"}},
    "steps": [{"step": 0, "loss": 4.8, "grad_norm": 2.0, "loss_scale": 1, "skipped": false, "lr": 0.001},
              {"step": 1, "loss": 4.6, "grad_norm": 1.9, "loss_scale": 1, "skipped": false, "lr": 0.001}],
    "memory": {"device_capacity_bytes": null, "planned": {"peak_bytes": 1010000},
               "ranks": [{"rank": 0, "peak_bytes": 1000000, "peak_phase": "backward", "peak_reserved_bytes": 1000000,
                          "by_category": {}, "model_states": {}, "phases": [], "host_pinned_bytes": 0,
                          "host_pageable_bytes": 0, "comm_wait_s": 0,
                          "category_peaks": {"params": 400000, "grads": 200000, "comm_buffers": 100000}},
                         {"rank": 1, "peak_bytes": 990000, "peak_phase": "backward", "peak_reserved_bytes": 990000,
                          "by_category": {}, "model_states": {}, "phases": [], "host_pinned_bytes": 0,
                          "host_pageable_bytes": 0, "comm_wait_s": 0,
                          "category_peaks": {"params": 400000, "grads": 190000, "comm_buffers": 100000}}]},
    "comm": {"bytes_per_step": {"all_reduce": 800000, "all_gather": 0}, "ops": {}, "modelled_busbw_GBps": null},
    "time": {"step_s_median": 0.5, "tokens_per_s": 1000, "breakdown_s": {}, "ranks": [], "straggler": null},
    "effective_config": {"entries": [
        {"key": "zero_optimization.stage", "value": 2, "source": "file"},
        {"key": "zero_optimization.offload_optimizer.pin_memory", "value": false, "source": "default",
         "note": "DeepSpeed 0.19.4's default"}]},
    "failure": null})"));
}

const CheckRow* row(const CheckResult& r, const std::string& metric) {
  for (const auto& x : r.rows)
    if (x.metric == metric) return &x;
  return nullptr;
}

TEST(Baseline, KeepsTheFiguresThatMustNotMove) {
  const json b = make_baseline(summary(), 0.01, "run");
  EXPECT_EQ(b["steps"], 2);
  EXPECT_EQ(b["memory"]["peak_bytes"], 1000000);
  EXPECT_EQ(b["memory"]["ranks"][1]["by_category"]["grads"], 190000);
  EXPECT_EQ(b["comm_bytes_per_step"]["all_reduce"], 800000);
  EXPECT_DOUBLE_EQ(b["time"]["ratio"].get<double>(), 50.0);
  EXPECT_DOUBLE_EQ(b["plan_over_measured"].get<double>(), 1.01);
  EXPECT_TRUE(check_against(b, b, {}).passed());
}

TEST(Baseline, EachFigureFailsPastItsToleranceOnly) {
  const json base = make_baseline(summary(), 0.01, "run");
  auto moved = [&](const std::function<void(Summary&)>& change, double calib = 0.01) {
    Summary s = summary();
    change(s);
    return check_against(base, make_baseline(s, calib, "now"), {});
  };
  auto params = [](int64_t v) { return [v](Summary& s) { s.memory->ranks[0].category_peaks["params"] = v; }; };
  EXPECT_TRUE(moved(params(407000)).passed()) << "1.75% < 2%";
  const CheckResult mem = moved(params(409000));
  EXPECT_FALSE(mem.passed());
  EXPECT_FALSE(row(mem, "memory.rank0.params")->ok);
  EXPECT_TRUE(moved([](Summary& s) { s.memory->ranks[0].category_peaks["comm_buffers"] = 103000; }).passed())
      << "4 KiB floor";
  EXPECT_FALSE(moved([](Summary& s) { s.comm->bytes_per_step["all_reduce"] = 800004; }).passed())
      << "collective bytes are exact";
  EXPECT_TRUE(moved([](Summary& s) { s.steps[1].loss = 4.6 * (1 + 5e-5); }).passed());
  EXPECT_FALSE(moved([](Summary& s) { s.steps[1].loss = 4.6 * (1 + 5e-4); }).passed()) << "fp32 loss: 1e-4 relative";
  EXPECT_FALSE(moved([](Summary& s) { s.status = "oom"; }).passed());
  EXPECT_FALSE(moved([](Summary& s) { s.precision = "bf16"; }).passed());
  // Step time: a slower machine (calibration 2x) with a 2x step time is no regression.
  auto step_time = [](Summary& s) { s.time->step_s_median = 1.0; };
  EXPECT_TRUE(moved(step_time, 0.02).passed());
  const CheckResult slow = moved(step_time);
  EXPECT_FALSE(row(slow, "step time / calibration")->ok);
  // Issue 31: an upgrade that flips offload's pin_memory default moves host memory by kind
  // and the effective config; both fail, the config row naming the key and its sources.
  const CheckResult pinned = moved([](Summary& s) {
    for (auto& r : s.memory->ranks) r.host_pinned_bytes = 2370000;
    s.effective_config["entries"][1]["value"] = true;
  });
  EXPECT_FALSE(pinned.passed());
  ASSERT_NE(row(pinned, "memory.rank0.host_pinned"), nullptr);
  EXPECT_FALSE(row(pinned, "memory.rank0.host_pinned")->ok);
  const CheckRow* pin = row(pinned, "config.zero_optimization.offload_optimizer.pin_memory");
  ASSERT_NE(pin, nullptr);
  EXPECT_FALSE(pin->ok);
  EXPECT_EQ(pin->baseline, false);
  EXPECT_EQ(pin->now, true);
  EXPECT_NE(pin->note.find("source default -> default"), std::string::npos) << pin->note;
  EXPECT_TRUE(row(check_against(base, base, {}), "config (effective keys unchanged)")->ok);
  // A baseline saved before host bytes and the config were kept is still read and compared.
  json old = base;
  old.erase("effective_config");
  for (auto& r : old["memory"]["ranks"]) r.erase("host");
  validate_baseline(old, "old.json");
  EXPECT_TRUE(check_against(old, make_baseline(summary(), 0.01, "now"), {}).passed());
  // The planner drifting from the measured peak (stale tapes after a LibTorch upgrade).
  const CheckResult plan = moved([](Summary& s) { s.memory->planned["peak_bytes"] = 1100000; });
  EXPECT_FALSE(row(plan, "planned / measured peak")->ok);
  EXPECT_NE(row(plan, "planned / measured peak")->note.find("--memory-log"), std::string::npos);
}

TEST(Baseline, VersionChangesAreReportedNotFailed) {
  const json base = make_baseline(summary(), 0.01, "run");
  Summary s = summary();
  s.env["libtorch"]["version"] = "2.15.0";
  s.deepspeed_version = "0.19.5";
  const CheckResult r = check_against(base, make_baseline(s, 0.01, "now"), {});
  EXPECT_TRUE(r.passed());
  ASSERT_NE(row(r, "env.libtorch"), nullptr);
  EXPECT_EQ(row(r, "env.libtorch")->now, "2.15.0");
  EXPECT_NE(r.table().find("2 version change(s) reported"), std::string::npos) << r.table();
}

}  // namespace

namespace {

// What a run that ran out of memory at init writes: no steps, no times, a failure.
Summary failed_summary() {
  return Summary::from_json(json::parse(R"({
    "schema": "zrepro.summary/1", "status": "oom", "world_size": 1, "zero_stage": 0, "precision": "fp32",
    "model": {"name": "tiny"}, "steps": [], "time": null, "comm": null,
    "failure": {"kind": "oom", "rank": 0, "phase": "init", "message": "m", "checkpoint": "zero-stage", "hint": "h"},
    "memory": {"device_capacity_bytes": 4096,
               "ranks": [{"rank": 0, "peak_bytes": 0, "peak_phase": "init", "peak_reserved_bytes": 0,
                          "by_category": {}, "model_states": {}, "phases": [], "host_pinned_bytes": 0,
                          "host_pageable_bytes": 0, "comm_wait_s": 0, "category_peaks": {"params": 1000}}]}})"));
}

}  // namespace

// Issue 33: a failed run's summary gives a baseline of that failure (it used to end
// `zrepro check` in an nlohmann assertion, exit 134), and comparing a failed run with a
// good baseline is a regression (status), not a crash.
TEST(Baseline, AFailedRunsSummaryGivesABaselineOfThatFailure) {
  const json b = make_baseline(failed_summary(), 0.01, "run");
  EXPECT_EQ(b["status"], "oom");
  EXPECT_EQ(b["steps"], 0);
  EXPECT_EQ(b["memory"]["peak_bytes"], 0);
  EXPECT_EQ(b["memory"]["ranks"][0]["by_category"], json({{"params", 1000}}));
  EXPECT_NO_THROW(validate_baseline(b, "b.json"));
  const CheckResult r = check_against(make_baseline(summary(), 0.01, "run"), b, CheckTolerances{});
  EXPECT_FALSE(r.passed());
  ASSERT_NE(row(r, "status"), nullptr);
  EXPECT_FALSE(row(r, "status")->ok);
}

// Issue 33: a baseline file is read only when it is one this zrepro wrote: its format
// version, and every compared key with its type; else exit 2 naming the key.
TEST(Baseline, AMalformedOrUnknownBaselineIsRefusedNamingTheKey) {
  const json good = make_baseline(summary(), 0.01, "run");
  EXPECT_NO_THROW(validate_baseline(good, "b.json"));
  auto refused = [](json b, const std::string& key) {
    try {
      validate_baseline(b, "b.json");
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("b.json"), std::string::npos) << e.what();
      return true;
    }
    return false;
  };
  json b = good;
  b["zrepro_baseline"] = 2;
  EXPECT_TRUE(refused(b, "\"zrepro_baseline\""));
  b = good;
  b.erase("memory");
  EXPECT_TRUE(refused(b, "memory"));
  b = good;
  b["memory"]["ranks"][0]["by_category"]["grads"] = "a lot";
  EXPECT_TRUE(refused(b, "memory.ranks[].by_category.grads"));
  b = good;
  b["loss"][1] = "4.6";
  EXPECT_TRUE(refused(b, "loss"));
  b = good;
  b["time"].erase("ratio");
  EXPECT_TRUE(refused(b, "time.ratio"));
  EXPECT_TRUE(refused(json::array(), "the file"));
}
