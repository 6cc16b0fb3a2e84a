// The A/B comparison on hand-made summaries: the verdict and exit code for each
// outcome (fixed, not fixed, nothing to fix), loss differences over common steps,
// per-rank spread, bytes at target scale after a scale-down, and plans.
#include <gtest/gtest.h>

#include "device/base/errors.h"
#include "trainer/report/ab.h"

using namespace zrepro;
using json = nlohmann::json;

namespace {

json side_summary(const std::string& status, std::vector<double> losses, std::vector<double> peaks, double capacity,
             const char* phase = nullptr) {
  json steps = json::array(), ranks = json::array();
  for (size_t i = 0; i < losses.size(); ++i) steps.push_back({{"step", i}, {"loss", losses[i]}, {"grad_norm", 1.0}});
  for (size_t r = 0; r < peaks.size(); ++r)
    ranks.push_back({{"rank", r}, {"peak_bytes", peaks[r]}, {"peak_phase", "step"}, {"peak_reserved_bytes", peaks[r]},
                     {"by_category", json::object()}, {"category_peaks", json::object()}, {"model_states", json::object()},
                     {"phases", json::array()}, {"host_pinned_bytes", 0}, {"host_pageable_bytes", 0}, {"comm_wait_s", 0.0}});
  json s = {{"status", status},
            {"steps", steps},
            {"memory", {{"device_capacity_bytes", capacity}, {"ranks", ranks}}},
            {"time", {{"step_s_median", 0.5}, {"tokens_per_s", 100.0}, {"breakdown_s", {{"forward", 1.0}, {"comm_wait", 1.0}}},
                      {"ranks", json::array()}}},
            {"failure", phase ? json{{"kind", status}, {"rank", 0}, {"phase", phase}, {"message", "m"},
                                     {"checkpoint", "zero-stage"}, {"hint", "h"}}
                              : json(nullptr)}};
  return s;
}

// A scaled-down run's scale_down part as ScaleDown::to_json writes it (the parts ab reads).
json scale_down_json(double factor, const std::string& target = "gpt3-6.7b", int64_t planned_peak = 15000,
                     json fidelity = json::array()) {
  return {{"parameter_factor", factor},
          {"target_model", {{"name", target}, {"params", 6700000000}}},
          {"toy_model", {{"name", "toy"}, {"params", 6700000}}},
          {"target_planned", {{"verdict", "fits"}, {"oom_phase", nullptr}, {"peak_bytes", planned_peak}, {"peak_phase", "step"}}},
          {"fidelity", fidelity},
          {"target_band", nullptr}};
}

// Rank 0's offload figures as report.cpp's offload_json writes them.
json offload_json(double overlap, double busy, double exposed_s) {
  return {{"host_link_gbps", nullptr},
          {"ranks", {{{"rank", 0}, {"d2h_bytes", 0}, {"h2d_bytes", 0}, {"host_pinned_bytes", 0}, {"host_pageable_bytes", 0},
                      {"copy_s", 0.0}, {"exposed_s", exposed_s}, {"overlap_ratio", overlap}, {"device_busy_fraction", busy}}}}};
}

// A run whose failure (if any) ended every rank; its summary read as ab reads it.
AbRun side_run(const std::string& side, int ranks, int code, const json& s) {
  return {side, ranks, code, Summary::from_json(s), nullptr, "", code != 0 ? ranks : 0};
}

// A --plan-only side: the plan's JSON.
AbRun plan_run(const std::string& side, int ranks, int code, const json& plan) {
  return {side, ranks, code, std::nullopt, plan, "", 0};
}

}  // namespace

TEST(Ab, BFixesWhatAShows) {
  const AbResult r = compare_ab({side_run("A", 4, 3, side_summary("oom", {}, {100, 98, 100, 99}, 100, "forward"))},
                                {side_run("B", 4, 0, side_summary("ok", {2.0, 1.5}, {70, 78, 70, 70}, 100))}, false);
  EXPECT_EQ(r.exit_code, kExitOk);
  ASSERT_EQ(r.verdicts.size(), 1u);
  EXPECT_NE(r.verdicts[0].find("A reproduces: oom in forward on every rank (exit 3)"), std::string::npos) << r.verdicts[0];
  EXPECT_NE(r.verdicts[0].find("B fixes it: runs through, peak 78% of capacity"), std::string::npos) << r.verdicts[0];
  EXPECT_EQ(r.doc.outcome, "fixed");
  EXPECT_EQ(r.doc.rows[1].peak_bytes_spread, 8.0);
  EXPECT_EQ(r.doc.rows[1].comm_wait_share, 0.5);
}

TEST(Ab, BFailingTooIsNotFixedAndARunningThroughIsNothingToFix) {
  EXPECT_EQ(compare_ab({side_run("A", 1, 3, side_summary("oom", {}, {100}, 100, "backward"))},
                       {side_run("B", 1, 3, side_summary("oom", {}, {100}, 100, "step"))}, false)
                .exit_code,
            kExitAbNotFixed);
  const AbResult same = compare_ab({side_run("A", 1, 0, side_summary("ok", {2.0, 1.5, 1.2}, {50}, 100))},
                                   {side_run("B", 1, 0, side_summary("ok", {2.0, 1.5, 1.2}, {40}, 100))}, false);
  EXPECT_EQ(same.exit_code, kExitAbNoFailure);
  EXPECT_NE(same.verdicts[0].find("losses equal within 1e-6"), std::string::npos) << same.verdicts[0];
  EXPECT_NE(same.verdicts[0].find("B's step time 1.00x A's"), std::string::npos) << same.verdicts[0];
  const AbResult differ = compare_ab({side_run("A", 1, 0, side_summary("ok", {2.0, 1.5}, {50}, 100))},
                                     {side_run("B", 1, 0, side_summary("ok", {2.0, 1.65}, {40}, 100))}, false);
  EXPECT_NEAR(differ.doc.comparisons[0].max_loss_rel_diff.value(), 0.1, 1e-12);
  EXPECT_NE(differ.verdicts[0].find("losses differ by up to 0.1"), std::string::npos) << differ.verdicts[0];
}

TEST(Ab, OneRankCountNotFixedDecidesAndTargetScaleIsReported) {
  json scaled = side_summary("ok", {2.0}, {10}, 20);
  scaled["scale_down"] = scale_down_json(1000.0);
  const AbResult r = compare_ab({side_run("A", 1, 3, side_summary("oom", {}, {20}, 20, "forward")), side_run("A", 4, 0, side_summary("ok", {2.0}, {10}, 20))},
                                {side_run("B", 1, 0, scaled), side_run("B", 4, 3, side_summary("oom", {}, {20}, 20, "forward"))}, false);
  EXPECT_EQ(r.exit_code, kExitOk) << "at 4 ranks A runs through: B failing there is a new failure, not an unfixed one";
  EXPECT_EQ(r.doc.rows[1].target_peak_bytes_max, 10000.0);
  EXPECT_EQ(r.doc.rows[1].target_capacity_bytes, 20000.0);
  // Issue 60: the table mixes the toy's bytes and tokens/s with the target's plan; it says
  // which column is which.
  EXPECT_NE(r.table.find("peak max and spread are the toy's bytes"), std::string::npos) << r.table;
  EXPECT_NE(r.table.find("target plan is the planner's peak at target scale (gpt3-6.7b)"), std::string::npos) << r.table;
  EXPECT_NE(r.table.find("tok/s are the toy's own compute"), std::string::npos) << r.table;
  // [Note: a limit the user gives is the target's]: the verdict states each limit at target.
  json limited = side_summary("host_oom", {}, {10}, 20, "save");
  limited["scale_down"] = scale_down_json(1000.0);
  limited["scale_down"]["fidelity"] = {{{"category", "params"}, {"toy_share", 0.30}, {"target_share", 0.31}}};
  limited["scale_down"]["limits"] = {{{"flag", "--host-memory"}, {"need", "rank 0's host at a save"},
                                      {"target_limit_bytes", 12000000000}, {"target_need_bytes", 16060522496},
                                      {"toy_limit_bytes", 2935000}, {"toy_need_bytes", 3929216}, {"fits_at_target", false}}};
  const AbResult host = compare_ab({side_run("A", 8, 13, limited)}, {side_run("B", 8, 0, scaled)}, false);
  EXPECT_NE(host.verdicts[0].find("--host-memory: 14.96 GiB needed of 11.18 GiB at target scale (past it)"),
            std::string::npos) << host.verdicts[0];
  EXPECT_EQ(host.doc.rows[0].target_limits, "--host-memory: 14.96 GiB needed of 11.18 GiB at target scale (past it)");
  const AbResult plain = compare_ab({side_run("A", 1, 3, side_summary("oom", {}, {20}, 20, "forward"))},
                                    {side_run("B", 1, 0, side_summary("ok", {2.0}, {10}, 20))}, false);
  EXPECT_EQ(plain.table.find("scale-down:"), std::string::npos) << plain.table;
}

// [Note: a verdict at target scale says what it rests on]: the planner's figure at target
// with the toy's beside it, and the fidelity of the toy's shares, in every verdict.
TEST(Ab, AScaledDownVerdictStatesItsFidelityAndThePlannersTargetFigure) {
  auto scaled = [](double toy_act, double target_act) {
    json s = side_summary("ok", {2.0}, {10}, 20);
    s["scale_down"] = scale_down_json(1000.0, "gpt3-6.7b", 15000,
                                      {{{"category", "params"}, {"toy_share", 0.30}, {"target_share", 0.31}},
                                       {{"category", "activations"}, {"toy_share", toy_act}, {"target_share", target_act}}});
    return s;
  };
  const auto a = side_run("A", 1, 3, side_summary("oom", {}, {20}, 20, "forward"));
  const AbResult off = compare_ab({a}, {side_run("B", 1, 0, scaled(0.32, 0.18))}, false);
  const std::string& v = off.verdicts[0];
  EXPECT_NE(v.find("B at target (gpt3-6.7b): planned peak 75% of capacity (the toy measured 50%)"), std::string::npos) << v;
  EXPECT_NE(v.find("activations off by 14 points (toy 32% vs target 18% of capacity): the toy's verdict may not hold"),
            std::string::npos) << v;
  EXPECT_EQ(off.doc.rows[1].fidelity_ok, false);
  EXPECT_EQ(off.doc.rows[1].target_planned_peak_bytes, 15000.0);
  const AbResult close = compare_ab({a}, {side_run("B", 1, 0, scaled(0.20, 0.18))}, false);
  EXPECT_NE(close.verdicts[0].find("every category within 5 points of the target's share (worst activations, 2.0)"),
            std::string::npos) << close.verdicts[0];
  EXPECT_EQ(close.doc.rows[1].fidelity_ok, true);
  // A run without a scale-down says nothing of a target.
  EXPECT_EQ(compare_ab({a}, {side_run("B", 1, 0, side_summary("ok", {2.0}, {10}, 20))}, false).verdicts[0].find("at target"),
            std::string::npos);
}

TEST(Ab, PlansCompareVerdicts) {
  const json oom = {{"verdict", "oom"}, {"oom_phase", "partition"}, {"peak_bytes", 120}, {"peak_phase", "partition"},
                    {"device_capacity_bytes", 100}};
  const json fits = {{"verdict", "fits"}, {"oom_phase", nullptr}, {"peak_bytes", 60}, {"peak_phase", "step"},
                     {"device_capacity_bytes", 100}};
  const AbResult r = compare_ab({plan_run("A", 8, 3, oom)}, {plan_run("B", 8, 0, fits)}, true);
  EXPECT_EQ(r.exit_code, kExitOk);
  EXPECT_NE(r.verdicts[0].find("A reproduces: oom (planned) in partition"), std::string::npos) << r.verdicts[0];
  EXPECT_NE(r.verdicts[0].find("peak 60% of capacity"), std::string::npos) << r.verdicts[0];
  EXPECT_NE(ab_html(r.doc).find("<svg"), std::string::npos);
}

TEST(Ab, RankCountsAreCheckedAgainstTheEquivalenceRules) {
  auto with_states = [](json s, int stage, double params, double grads, double opt) {
    s["zero_stage"] = stage;
    s["precision"] = "fp32";
    s["batch"] = {{"micro", 8}, {"grad_accum", 1}, {"global", 8}};
    s["memory"]["ranks"][0]["model_states"] = {{"params", params}, {"grads", grads}, {"optimizer_states", opt}};
    return s;
  };
  const json one = with_states(side_summary("ok", {2.0, 1.5}, {100}, 0), 2, 400, 400, 2400);
  const json four = with_states(side_summary("ok", {2.0, 1.5000001}, {60}, 0), 2, 400, 100, 600);
  const AbResult good = compare_ab({side_run("A", 1, 0, one), side_run("A", 4, 0, four)}, {side_run("B", 1, 0, one), side_run("B", 4, 0, four)}, false);
  ASSERT_EQ(good.doc.equivalence.size(), 2u);
  EXPECT_EQ(good.doc.equivalence[0].holds, true) << good.doc.to_json()["equivalence"].dump();
  const std::string line = good.verdicts[2];
  EXPECT_NE(line.find("A 1 -> 4 ranks: losses equal within"), std::string::npos) << line;
  EXPECT_NE(line.find("params x1.00 grads x0.25 optimizer_states x0.25: as the equivalence rules predict for stage 2"),
            std::string::npos) << line;
  // Gradients not divided (a stage-2 run that kept full gradients) or different losses: flagged.
  const json wrong = with_states(side_summary("ok", {2.0, 1.6}, {60}, 0), 2, 400, 400, 600);
  const AbResult bad = compare_ab({side_run("A", 1, 0, one), side_run("A", 4, 0, wrong)}, {side_run("B", 1, 0, one), side_run("B", 4, 0, four)}, false);
  EXPECT_EQ(bad.doc.equivalence[0].holds, false);
  EXPECT_NE(bad.verdicts[2].find("grads x1.00 (expected x0.25)"), std::string::npos) << bad.verdicts[2];
  EXPECT_NE(bad.verdicts[2].find("NOT as"), std::string::npos) << bad.verdicts[2];
}

// ---- --expect: symptoms that are not failures

namespace {

// A summary with one figure set: the time breakdown's shares and rank 0's offload overlap.
json measured(double step_s, double data_wait, double overlap, std::vector<double> grad_norms = {1.0, 1.0},
              double exposed_s = 0) {
  json s = side_summary("ok", {2.0, 1.5}, {50}, 100);
  s["time"]["step_s_median"] = step_s;
  s["time"]["breakdown_s"] = {{"forward", 1.0}, {"data_wait", data_wait}};
  s["offload"] = offload_json(overlap, 0.5, exposed_s);
  for (size_t i = 0; i < grad_norms.size() && i < s["steps"].size(); ++i) s["steps"][i]["grad_norm"] = grad_norms[i];
  return s;
}

}  // namespace

TEST(Ab, ExpectationsParseAndRefuseWithTheForms) {
  EXPECT_EQ(parse_expectation("failure").kind, Expectation::Kind::failure);
  EXPECT_EQ(parse_expectation("refused").kind, Expectation::Kind::refused);
  const Expectation slower = parse_expectation("slower:1.5");
  EXPECT_EQ(slower.kind, Expectation::Kind::more);
  EXPECT_EQ(slower.key, "step_s_median");
  EXPECT_EQ(slower.factor, 1.5);
  EXPECT_EQ(parse_expectation("less:overlap_ratio:0.5").key, "overlap_ratio");
  EXPECT_EQ(parse_expectation("differs:grad_norm:0.1").kind, Expectation::Kind::differs);
  for (const char* bad : {"slow", "slower:x", "slower:-1", "less:no_such_figure:0.5", "differs:peak:0.1", "more:data_wait_share"}) {
    try {
      parse_expectation(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("--expect"), std::string::npos) << e.what();
    }
  }
}

TEST(Ab, MeasuredSymptomsDecideByTheRatio) {
  // data_wait share 0.5 vs 0.1: A shows it at more:...:2, not at more:...:8.
  const auto a = side_run("A", 1, 0, measured(1.0, 1.0, 0.3)), b = side_run("B", 1, 0, measured(1.0, 1.0 / 9, 0.3));
  const AbResult shown = compare_ab({a}, {b}, false, parse_expectation("more:data_wait_share:2"));
  EXPECT_EQ(shown.exit_code, kExitOk);
  EXPECT_NE(shown.verdicts[0].find("A reproduces: data_wait_share 0.5000 vs B's 0.1000 = 5.00x"), std::string::npos)
      << shown.verdicts[0];
  EXPECT_EQ(compare_ab({a}, {b}, false, parse_expectation("more:data_wait_share:8")).exit_code, kExitAbNoFailure);
  // overlap 0 vs 0.3: less:overlap_ratio:0.5 holds; B failing is never a fix.
  const auto pageable = side_run("A", 1, 0, measured(1.0, 0, 0.0)), pinned = side_run("B", 1, 0, measured(1.0, 0, 0.3));
  EXPECT_EQ(compare_ab({pageable}, {pinned}, false, parse_expectation("less:overlap_ratio:0.5")).exit_code, kExitOk);
  EXPECT_EQ(compare_ab({pageable}, {side_run("B", 1, 3, side_summary("oom", {}, {100}, 100, "step"))}, false,
                       parse_expectation("less:overlap_ratio:0.5"))
                .exit_code,
            kExitAbNotFixed);
  // A failing is not the measured symptom.
  EXPECT_EQ(compare_ab({side_run("A", 1, 3, side_summary("oom", {}, {100}, 100, "step"))}, {pinned}, false,
                       parse_expectation("less:overlap_ratio:0.5"))
                .exit_code,
            kExitAbNoFailure);
  // offload_wait_s_per_step: rank 0's exposed copy seconds over the steps run (2 here).
  const auto link_bound = side_run("A", 1, 0, measured(1.0, 0, 0.0, {1.0, 1.0}, 1.6));
  const auto fixed_link = side_run("B", 1, 0, measured(1.0, 0, 0.0, {1.0, 1.0}, 0.2));
  const AbResult waits = compare_ab({link_bound}, {fixed_link}, false, parse_expectation("more:offload_wait_s_per_step:4"));
  EXPECT_EQ(waits.exit_code, kExitOk) << waits.verdicts[0];
  EXPECT_NE(waits.verdicts[0].find("offload_wait_s_per_step 0.8000 vs B's 0.1000 = 8.00x"), std::string::npos)
      << waits.verdicts[0];
  EXPECT_EQ(compare_ab({fixed_link}, {link_bound}, false, parse_expectation("more:offload_wait_s_per_step:4")).exit_code,
            kExitAbNoFailure);
  // slower: median step time ratio.
  EXPECT_EQ(compare_ab({side_run("A", 1, 0, measured(3.0, 0, 0))}, {side_run("B", 1, 0, measured(1.0, 0, 0))}, false,
                       parse_expectation("slower:2"))
                .exit_code,
            kExitOk);
}

TEST(Ab, DiffersComparesPerStepFiguresAndRefusedIsExitTwo) {
  const auto bug = side_run("A", 1, 0, measured(1, 0, 0, {0.4, 0.5})), ref = side_run("B", 1, 0, measured(1, 0, 0, {1.0, 1.0}));
  EXPECT_EQ(compare_ab({bug}, {ref}, false, parse_expectation("differs:grad_norm:0.1")).exit_code, kExitOk);
  EXPECT_EQ(compare_ab({ref}, {ref}, false, parse_expectation("differs:grad_norm:0.1")).exit_code, kExitAbNoFailure);
  const AbResult refused = compare_ab({side_run("A", 2, 2, side_summary("config_error", {}, {}, 0, "init"))},
                                      {side_run("B", 2, 0, side_summary("ok", {2.0}, {50}, 100))}, false,
                                      parse_expectation("refused"));
  EXPECT_EQ(refused.exit_code, kExitOk);
  EXPECT_EQ(refused.doc.expect, "refused");
  // Under `refused` an OOM is not the symptom.
  EXPECT_EQ(compare_ab({side_run("A", 1, 3, side_summary("oom", {}, {100}, 100, "forward"))},
                       {side_run("B", 1, 0, side_summary("ok", {2.0}, {50}, 100))}, false, parse_expectation("refused"))
                .exit_code,
            kExitAbNoFailure);
}

TEST(Ab, ScalingComparesEachSideWithItsFirstRankCount) {
  auto at = [](const char* side, int ranks, double tokens_per_s) {
    json s = side_summary("ok", {2.0, 1.5}, {50}, 100);
    s["time"]["tokens_per_s"] = tokens_per_s;
    s["batch"] = {{"micro", 8}, {"grad_accum", 1}, {"global", 8 * ranks}};  // weak scaling: the global batch grows with the ranks
    s["zero_stage"] = 1;
    s["memory"]["ranks"][0]["model_states"] = {{"params", 100}, {"grads", 100}, {"optimizer_states", 600 / ranks}};
    return side_run(side, ranks, 0, s);
  };
  // A: 1000 -> 700 tok/s on 2 ranks (efficiency 0.35); B: 1000 -> 1400 (0.70).
  const AbResult r = compare_ab({at("A", 1, 1000), at("A", 2, 700)}, {at("B", 1, 1000), at("B", 2, 1400)}, false,
                                parse_expectation("scaling:0.5"));
  EXPECT_EQ(r.exit_code, kExitOk);
  EXPECT_NE(r.verdicts[1].find("A reproduces: 0.70x the tokens/s of 1 rank(s), efficiency 0.35"), std::string::npos)
      << r.verdicts[1];
  EXPECT_NE(r.verdicts[1].find("B fixes it: 1.40x"), std::string::npos) << r.verdicts[1];
  // B scaling no better is not a fix; A scaling well shows nothing.
  EXPECT_EQ(compare_ab({at("A", 1, 1000), at("A", 2, 700)}, {at("B", 1, 1000), at("B", 2, 800)}, false,
                       parse_expectation("scaling:0.5"))
                .exit_code,
            kExitAbNotFixed);
  EXPECT_EQ(compare_ab({at("A", 1, 1000), at("A", 2, 1900)}, {at("B", 1, 1000), at("B", 2, 1900)}, false,
                       parse_expectation("scaling:0.5"))
                .exit_code,
            kExitAbNoFailure);
}

// [Note: a run without its summary]: a side killed before it wrote summary.json (the
// kernel's OOM killer: exit 137) is an incomplete comparison, never "A reproduces".
TEST(Ab, ASideWithoutItsSummaryIsNoComparison) {
  for (bool a_lost : {true, false}) {
    const AbRun ok = side_run(a_lost ? "B" : "A", 1, 0, side_summary("ok", {2.0, 1.5}, {50}, 100));
    const AbRun lost{a_lost ? "A" : "B", 1, 137, std::nullopt, nullptr, "ab/a_1.log", 0};
    const AbResult r = a_lost ? compare_ab({lost}, {ok}, false) : compare_ab({ok}, {lost}, false);
    EXPECT_EQ(r.exit_code, kExitInternal);
    EXPECT_EQ(r.doc.outcome, "incomplete");
    ASSERT_EQ(r.verdicts.size(), 1u);
    EXPECT_EQ(r.verdicts[0].find("reproduces"), std::string::npos) << r.verdicts[0];
    EXPECT_NE(r.verdicts[0].find(std::string(a_lost ? "A" : "B") + " ended without its summary (exit 137: signal 9"),
              std::string::npos)
        << r.verdicts[0];
    EXPECT_NE(r.verdicts[0].find("ab/a_1.log"), std::string::npos) << r.verdicts[0];
  }
}

// [Note: an interrupted side shows nothing] (issue 61): an A stopped by SIGTERM, or whose
// rank was killed under it, is not "A reproduces", even with A and B identical; nor is a B
// stopped that way "B fails".
TEST(Ab, AnInterruptedSideIsNoComparison) {
  for (bool a_stopped : {true, false}) {
    const json stopped_summary = side_summary("interrupted", {2.0}, {50}, 100, "forward");
    const AbRun stopped = side_run(a_stopped ? "A" : "B", 2, 143, stopped_summary);
    const AbRun other = a_stopped ? side_run("B", 2, 0, side_summary("ok", {2.0, 1.5}, {50, 50}, 100))
                                  : side_run("A", 2, 3, side_summary("oom", {}, {100, 100}, 100, "forward"));
    const AbResult r = a_stopped ? compare_ab({stopped}, {other}, false) : compare_ab({other}, {stopped}, false);
    EXPECT_EQ(r.doc.outcome, "incomplete");
    EXPECT_NE(r.exit_code, kExitOk);
    ASSERT_EQ(r.verdicts.size(), 1u);
    EXPECT_EQ(r.verdicts[0].find("reproduces"), std::string::npos) << r.verdicts[0];
    EXPECT_NE(r.verdicts[0].find(std::string(a_stopped ? "A" : "B") + " was interrupted before its outcome (exit 143"),
              std::string::npos)
        << r.verdicts[0];
  }
}

// ab.html: the verdict first, then what it rests on, each failing side's failure and
// the figure its kind needs (a pinned failure: the pinned bytes against the memlock
// limit, no device bars of 0 bytes; a hang: where each rank waits), every rank's bars,
// and links to each run's pages.
TEST(Ab, ThePageLeadsWithTheVerdictAndShowsWhatEachFailureNeeds) {
  json pin = side_summary("pinned_memory", {}, {0, 0}, 100, "init");
  pin["failure"]["kind"] = "pinned-memory";
  pin["failure"]["needed_bytes"] = 2000000;
  pin["failure"]["memlock_limit_bytes"] = 65536;
  json ok = side_summary("ok", {4.84, 4.70}, {60, 70}, 100);
  ok["memory"]["ranks"][0]["by_category"] = {{"params", 40}, {"activations", 20}};
  ok["memory"]["ranks"][1]["by_category"] = {{"params", 40}, {"activations", 30}};
  AbRun a = side_run("A", 2, 9, pin), b = side_run("B", 2, 0, ok);
  a.log = "/tmp/out/A_r2.log", b.log = "/tmp/out/B_r2.log";
  const std::string html = ab_html(compare_ab({a}, {b}, false).doc);
  const size_t verdict = html.find("id='verdict'");
  ASSERT_NE(verdict, std::string::npos);
  EXPECT_LT(verdict, html.find("What the verdict rests on"));
  EXPECT_LT(html.find("What the verdict rests on"), html.find("Device memory per rank"));
  EXPECT_NE(html.find("A reproduces: pinned_memory"), std::string::npos);
  EXPECT_NE(html.find("<b>Hint:</b> h"), std::string::npos);
  EXPECT_NE(html.find("data-row='B-2-0'"), std::string::npos);
  EXPECT_NE(html.find("data-row='B-2-1'"), std::string::npos);
  EXPECT_EQ(html.find("data-row='A-2-0'"), std::string::npos) << "no device bars for a run that ended at init";
  EXPECT_NE(html.find("A x2 (pinned-memory): no device memory figures"), std::string::npos);
  EXPECT_NE(html.find("memlock limit 64.00 KiB"), std::string::npos);
  EXPECT_NE(html.find("href='A_r2/report.html'"), std::string::npos);
  EXPECT_NE(html.find("href='B_r2.log'"), std::string::npos);
  EXPECT_NE(html.find("A x2: no data"), std::string::npos) << "the failed side has no curve and no legend entry";

  json hang = side_summary("hang", {}, {50, 50}, 100, "backward");
  HangDiagnosis d;
  d.seq = 12, d.culprits = {1}, d.kind = "mismatch";
  d.ranks = {{0, true, 11, "reduce_grad bucket 5", 12, "all_reduce(Double, 3)", 30.0},
             {1, true, 11, "reduce_grad bucket 5", 12, "all_reduce(Float, 20000)", 30.0}};
  d.suspects = {{1, "issued a different collective at #12"}};
  hang["failure"]["hang"] = d.to_json();
  const std::string h = ab_html(compare_ab({side_run("A", 2, 4, hang)}, {b}, false).doc);
  EXPECT_NE(h.find("where each rank waits"), std::string::npos);
  EXPECT_NE(h.find("#12 all_reduce(Float, 20000)"), std::string::npos);
  EXPECT_NE(h.find("suspect: rank 1"), std::string::npos);
}
