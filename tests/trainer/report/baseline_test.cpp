// trainer/report/baseline.h: what a baseline keeps from summary.json and which moves the
// check tolerates: memory within 2% (4 KiB floor), exact collective bytes, loss by
// precision, step time as a calibrated ratio, the planner's ratio, version changes reported.
#include "trainer/report/baseline.h"

#include <gtest/gtest.h>

#include <functional>

#include "device/base/errors.h"
#include "tests/support/doc_fields.h"

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
    "memory": {"device_capacity_bytes": null, "planned": {"verdict": "fits", "oom_phase": null, "peak_bytes": 1010000, "peak_phase": "backward"},
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
  const Baseline b = make_baseline(summary(), 0.01, "run");
  EXPECT_EQ(b.steps, 2);
  EXPECT_EQ(b.peak_bytes, 1000000);
  EXPECT_EQ(b.ranks[1].by_category.at("grads"), 190000);
  EXPECT_EQ(b.comm_bytes_per_step.at("all_reduce"), 800000);
  EXPECT_DOUBLE_EQ(b.time.ratio, 50.0);
  EXPECT_DOUBLE_EQ(b.plan_over_measured.value(), 1.01);
  EXPECT_TRUE(check_against(b, b, {}).passed());
  // [Note: one baseline type]: the file reads back as what was written.
  const json file = b.to_json();
  EXPECT_EQ(Baseline::from_json(file, "b.json").to_json(), file);
  EXPECT_EQ(file["zrepro_baseline"], kBaselineVersion);
}

TEST(Baseline, EachFigureFailsPastItsToleranceOnly) {
  const Baseline base = make_baseline(summary(), 0.01, "run");
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
  // Step time: a slower machine (calibration 2x) with a 2x step time is no regression; 2x
  // the step time on the same machine is reported, and fails only under --time-gate.
  auto step_time = [](Summary& s) { s.time->step_s_median = 1.0; };
  EXPECT_TRUE(moved(step_time, 0.02).passed());
  const CheckResult slow = moved(step_time);
  EXPECT_TRUE(row(slow, "step time / calibration")->ok);
  EXPECT_EQ(row(slow, "step time / calibration")->kind, RowKind::advisory);
  EXPECT_NE(slow.table().find("advisory (--time-gate fails on it)"), std::string::npos) << slow.table();
  CheckTolerances gate;
  gate.time_gate = true;
  Summary s2 = summary();
  step_time(s2);
  EXPECT_FALSE(row(check_against(base, make_baseline(s2, 0.01, "now"), gate), "step time / calibration")->ok);
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
  EXPECT_NE(pin->note.find("source default (DeepSpeed 0.19.4's default) -> default"), std::string::npos) << pin->note;
  EXPECT_TRUE(row(check_against(base, base, {}), "config (effective keys unchanged)")->ok);
  // A baseline saved before host bytes and the config were kept is still read and compared.
  json old = base.to_json();
  old.erase("effective_config");
  for (auto& r : old["memory"]["ranks"]) r.erase("host");
  EXPECT_TRUE(check_against(Baseline::from_json(old, "old.json"), make_baseline(summary(), 0.01, "now"), {}).passed());
  // The planner drifting from the measured peak (stale tapes after a LibTorch upgrade).
  const CheckResult plan = moved([](Summary& s) { s.memory->planned["peak_bytes"] = 1100000; });
  EXPECT_FALSE(row(plan, "planned / measured peak")->ok);
  // Issue 60: no LibTorch changed between these two runs, so none is blamed.
  const std::string same = row(plan, "planned / measured peak")->note;
  EXPECT_EQ(same.find("LibTorch changed"), std::string::npos) << same;
  EXPECT_NE(same.find("no version changed between the runs (LibTorch 1.13.0 on both)"), std::string::npos) << same;
  // A LibTorch that did change is named, with the tapes to re-derive.
  const CheckResult upgraded = moved([](Summary& s) {
    s.memory->planned["peak_bytes"] = 1100000;
    s.env["libtorch"]["version"] = "2.15.0";
  });
  const std::string lt = row(upgraded, "planned / measured peak")->note;
  EXPECT_NE(lt.find("LibTorch changed (1.13.0 -> 2.15.0)"), std::string::npos) << lt;
  EXPECT_NE(lt.find("--memory-log"), std::string::npos) << lt;
  // Another version that changed is named instead.
  const CheckResult commit = moved([](Summary& s) {
    s.memory->planned["peak_bytes"] = 1100000;
    s.env["zrepro"]["commit"] = "def";
  });
  EXPECT_NE(row(commit, "planned / measured peak")->note.find("zrepro.commit abc -> def"), std::string::npos)
      << row(commit, "planned / measured peak")->note;
}

TEST(Baseline, VersionChangesAreReportedNotFailed) {
  const Baseline base = make_baseline(summary(), 0.01, "run");
  Summary s = summary();
  s.env["libtorch"]["version"] = "2.15.0";
  s.deepspeed_version = "0.19.5";
  const CheckResult r = check_against(base, make_baseline(s, 0.01, "now"), {});
  EXPECT_TRUE(r.passed());
  ASSERT_NE(row(r, "env.libtorch.version"), nullptr);
  EXPECT_EQ(row(r, "env.libtorch.version")->now, "2.15.0");
  EXPECT_NE(r.table().find("2 reported (versions, advisories)"), std::string::npos) << r.table();
  EXPECT_EQ(row(r, "env.libtorch.version")->kind, RowKind::version);
}

// [Note: step time against the machine]: a run that timed its calibration between steps is
// compared by its own ratio, and the allowed ratio widens with the spreads both measured.
TEST(Baseline, StepTimeIsTheRunsOwnRatioWithASpreadDerivedTolerance) {
  auto calibrated = [](double ratio, double spread) {
    Summary s = summary();
    s.time->calibration = SummaryCalibration{"k", 5, 9, 0.001, spread / 2, ratio * 0.001, spread / 2, ratio};
    return s;
  };
  const Baseline base = make_baseline(calibrated(100, 0.1), 999.0, "run");  // the check-time figure is not used
  EXPECT_DOUBLE_EQ(base.time.ratio, 100);
  EXPECT_DOUBLE_EQ(base.time.spread, 0.1);
  EXPECT_NE(base.time.source.find("during the run"), std::string::npos);
  EXPECT_NE(make_baseline(summary(), 0.01, "run").time.source.find("at check time"), std::string::npos);
  CheckTolerances gate;
  gate.time_gate = true;
  auto time_ok = [&](double ratio, double spread) {
    return row(check_against(base, make_baseline(calibrated(ratio, spread), 0, "now"), gate), "step time / calibration")->ok;
  };
  EXPECT_TRUE(time_ok(140, 0.1)) << "1.4x < 1.5x";
  EXPECT_FALSE(time_ok(160, 0.1)) << "1.6x > max(1.5, 1 + 2 x 0.2)";
  EXPECT_TRUE(time_ok(160, 0.5)) << "a spread of 0.6 allows 2.2x";
  // Issue 61 item 8: under --time-gate a side without a measured step time fails the row,
  // where it skipped it (a baseline edited to a ratio of 0 or below turned the gate off).
  Baseline unmeasured = base;
  unmeasured.time.ratio = 0;
  const CheckRow* r = row(check_against(unmeasured, make_baseline(calibrated(100, 0.1), 0, "now"), gate),
                          "step time / calibration");
  ASSERT_NE(r, nullptr);
  EXPECT_FALSE(r->ok);
  EXPECT_NE(r->note.find("not measured in the baseline"), std::string::npos) << r->note;
  EXPECT_EQ(row(check_against(unmeasured, make_baseline(calibrated(100, 0.1), 0, "now"), {}), "step time / calibration"),
            nullptr)
      << "advisory without the gate: nothing to say";
}

// Issue 31: the run's inputs come first. A baseline saved with --micro-batch 2
// --grad-accum 2 and a run with the file's 1 x 4 differ as inputs (named flag by flag, the
// verdict INPUTS DIFFER), not as figure regressions; the config file is compared by its
// content wherever it lies, and --deepspeed-version is a version, not an input.
TEST(Baseline, DifferingInputsAreReportedFirstAsInputs) {
  auto with_inputs = [](const std::vector<std::string>& args, const json& config) {
    Summary s = summary();
    s.inputs = {{"args", args}, {"config_file", "ds.json"}, {"config", config}};
    return make_baseline(s, 0.01, "x");
  };
  const json cfg = {{"train_micro_batch_size_per_gpu", "auto"}, {"zero_optimization", {{"stage", 2}}}};
  const Baseline base = with_inputs({"--config", "/a/ds.json", "--micro-batch", "2", "--grad-accum=2", "--steps", "4"}, cfg);
  const CheckResult same =
      check_against(base, with_inputs({"--config", "/elsewhere/ds.json", "--micro-batch", "2", "--grad-accum", "2",
                                       "--steps", "4", "--deepspeed-version", "0.19.4"}, cfg), {});
  EXPECT_TRUE(same.passed()) << same.table();
  EXPECT_EQ(same.rows.front().kind, RowKind::input);
  const CheckResult other = check_against(base, with_inputs({"--config", "/a/ds.json", "--steps", "4"}, cfg), {});
  EXPECT_FALSE(other.passed());
  EXPECT_TRUE(other.inputs_differ());
  EXPECT_EQ(other.verdict(), "INPUTS DIFFER");
  ASSERT_NE(row(other, "input --micro-batch"), nullptr);
  EXPECT_EQ(row(other, "input --micro-batch")->baseline, "2");
  EXPECT_TRUE(row(other, "input --micro-batch")->now.is_null());
  EXPECT_NE(row(other, "input --grad-accum"), nullptr);
  const std::string table = other.table();
  EXPECT_EQ(table.find("  input    FAIL"), 0u) << "inputs first:\n" << table;
  json edited = cfg;
  edited["zero_optimization"]["stage"] = 3;
  const CheckResult file = check_against(base, with_inputs({"--config", "/a/ds.json", "--micro-batch", "2",
                                                             "--grad-accum", "2", "--steps", "4"}, edited), {});
  ASSERT_NE(row(file, "input config zero_optimization.stage"), nullptr);
  EXPECT_FALSE(row(file, "input config zero_optimization.stage")->ok);
  // A baseline from before inputs were kept: said, not failed.
  json old = base.to_json();
  old.erase("inputs");
  EXPECT_TRUE(check_against(Baseline::from_json(old, "old.json"), base, {}).passed());
}

// Issue 31: a leak shows as growth per step after warm-up; the check fails on the
// category that grows, and prints bytes as people read them.
TEST(Baseline, MemoryGrowthPerStepFailsOnALeak) {
  auto growing = [](double activations) {
    Summary s = summary();
    for (auto& r : s.memory->ranks) r.growth_bytes_per_step = {{"activations", activations}, {"total", activations}};
    return make_baseline(s, 0.01, "x");
  };
  const Baseline base = growing(0);
  EXPECT_TRUE(check_against(base, growing(2048), {}).passed()) << "under the 4 KiB/step floor";
  const CheckResult leak = check_against(base, growing(65536), {});
  EXPECT_FALSE(leak.passed());
  ASSERT_NE(row(leak, "memory.rank0.growth.activations"), nullptr);
  EXPECT_FALSE(row(leak, "memory.rank0.growth.activations")->ok);
  EXPECT_NE(leak.table().find("64.00 KiB/step"), std::string::npos) << leak.table();
  const CheckResult bigger = check_against(make_baseline(summary(), 0.01, "x"), [] {
    Summary s = summary();
    s.memory->ranks[0].category_peaks["params"] = 3 << 20;
    return make_baseline(s, 0.01, "y");
  }(), {});
  EXPECT_NE(bigger.table().find("3.00 MiB"), std::string::npos) << bigger.table();
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
  const Baseline b = make_baseline(failed_summary(), 0.01, "run");
  EXPECT_EQ(b.status, "oom");
  EXPECT_EQ(b.steps, 0);
  EXPECT_EQ(b.peak_bytes, 0);
  EXPECT_EQ(b.ranks[0].by_category, SummaryCategories({{"params", 1000}}));
  EXPECT_NO_THROW(Baseline::from_json(b.to_json(), "b.json"));
  const CheckResult r = check_against(make_baseline(summary(), 0.01, "run"), b, CheckTolerances{});
  EXPECT_FALSE(r.passed());
  ASSERT_NE(row(r, "status"), nullptr);
  EXPECT_FALSE(row(r, "status")->ok);
}

// Issue 33: a baseline file is read only when it is one this zrepro wrote: its format
// version, and every compared key with its type; else exit 2 naming the key.
TEST(Baseline, AMalformedOrUnknownBaselineIsRefusedNamingTheKey) {
  const json good = make_baseline(summary(), 0.01, "run").to_json();
  EXPECT_NO_THROW(Baseline::from_json(good, "b.json"));
  auto refused = [](json b, const std::string& key) {
    try {
      Baseline::from_json(b, "b.json");
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
  b = good;
  b["time"]["ratio"] = -1;  // issue 61 item 8: it switched --time-gate off
  EXPECT_TRUE(refused(b, "time.ratio"));
  b = good;
  b["time"]["spread"] = -0.5;
  EXPECT_TRUE(refused(b, "time.spread"));
  // Issue 61 item 5: a field of the wrong type is refused by name (it aborted a whole suite).
  b = good;
  b["world_size"] = "two";
  EXPECT_TRUE(refused(b, "world_size"));
  b = good;
  b["precision"] = 16;
  EXPECT_TRUE(refused(b, "precision"));
  EXPECT_TRUE(refused(json::array(), "the file"));
}

// [Note: one baseline type]: the baseline reads back as written, and
// docs/reference/baseline-json.md is the page generated from the type's field table.
TEST(BaselineDoc, ReadsBackAsWrittenAndEveryFieldHasItsRow) {
  const nlohmann::json written = baseline_example().to_json();
  EXPECT_EQ(Baseline::from_json(written, "example.json").to_json(), written);
  std::set<std::string> paths;
  zrepro_test::leaf_paths(written, "", paths);
  EXPECT_GT(paths.size(), 20u);
  zrepro_test::expect_rows_match(paths, baseline_field_docs(), "Baseline");
}

TEST(BaselineDoc, ThePageIsTheGeneratedText) {
  zrepro_test::expect_generated_page(std::string(ZREPRO_SOURCE_DIR).append("/docs/reference/baseline-json.md"),
                                     baseline_reference_page(), "ZREPRO_WRITE_BASELINE_DOC", "BaselineDoc.*");
}
