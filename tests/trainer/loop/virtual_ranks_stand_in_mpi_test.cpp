// Stood-in peers (--world-size N --peers stand-in: the subject rank alone) against every
// rank running (--peers run) and against real processes: the subject's losses and
// gradient norms bit for bit under the same-data rule, its device memory by category and
// its collectives' bytes equal, for stages 0-3, fp32/bf16/fp16 and offload, at 4, 64 and
// 512 ranks; against 4 real processes; rank 1 of an
// 8192-rank ZeRO-3 job with the planner's model states to the byte; the refusals; the
// self-check when the peers' values are not modelled; --as-rank most.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "tests/support/process.h"

using namespace zrepro_test;
using json = nlohmann::json;

namespace {

std::string si_config(int stage, const std::string& precision, const std::string& offload, int gas = 2) {
  std::string zero = R"("stage": )" + std::to_string(stage) +
                     R"(, "reduce_bucket_size": 20000, "stage3_param_persistence_threshold": 1000,
      "stage3_prefetch_bucket_size": 30000)";
  if (offload == "optimizer") zero += R"(, "offload_optimizer": {"device": "cpu", "pin_memory": true})";
  if (offload == "param")
    zero += R"(, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"})";
  std::string prec;
  if (precision == "bf16") prec = R"("bf16": {"enabled": true}, )";
  if (precision == "fp16") prec = R"("fp16": {"enabled": true, "initial_scale_power": 16}, )";
  return R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": )" + std::to_string(gas) + ", " +
         prec + R"("optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.01}},
    "gradient_clipping": 1.0, "zero_optimization": {)" + zero + "}}";
}

const json& rank_view(const json& summary, int rank) {
  for (const json& r : summary["memory"]["ranks"])
    if (r["rank"] == rank) return r;
  ADD_FAILURE() << "no memory view of rank " << rank;
  return summary["memory"]["ranks"][0];
}

// The subject's steps (loss, gradient norm, skipped) equal to the bit.
void expect_same_steps(const json& a, const json& b, const std::string& what) {
  ASSERT_EQ(a["steps"].size(), b["steps"].size()) << what;
  for (size_t i = 0; i < a["steps"].size(); ++i) {
    EXPECT_EQ(double(a["steps"][i]["loss"]), double(b["steps"][i]["loss"])) << what << " step " << i;
    EXPECT_EQ(a["steps"][i]["grad_norm"], b["steps"][i]["grad_norm"]) << what << " step " << i;
    EXPECT_EQ(a["steps"][i]["skipped"], b["steps"][i]["skipped"]) << what << " step " << i;
  }
}

// The subject's device memory by category at its peak and per phase, and its bytes per
// collective per step, up to `slack` bytes where the reference's own peak is a race.
void expect_same_subject(const json& ref, const json& si, int rank, const std::string& what, double slack = 0) {
  const json& a = rank_view(ref, rank);
  const json& b = rank_view(si, rank);
  EXPECT_NEAR(double(a["peak_bytes"]), double(b["peak_bytes"]), slack) << what;
  for (const auto& [cat, bytes] : a["by_category"].items())
    EXPECT_NEAR(double(bytes), double(b["by_category"][cat]), slack) << what << " " << cat;
  for (const auto& [cat, bytes] : a["model_states"].items())
    EXPECT_EQ(bytes, b["model_states"][cat]) << what << " " << cat;
  for (const auto& [op, s] : ref["comm"]["ops"].items()) {
    EXPECT_EQ(s["bytes_per_step"], si["comm"]["ops"][op]["bytes_per_step"]) << what << " " << op;
    EXPECT_EQ(s["calls_per_step"], si["comm"]["ops"][op]["calls_per_step"]) << what << " " << op;
  }
}

void expect_exact_stand_in(const RunResult& r, const std::string& what) {
  ASSERT_EQ(r.code, 0) << what << "\n" << r.output;
  const json& v = r.summary["virtual_ranks"];
  EXPECT_EQ(v["peers"], "stand-in") << what;
  EXPECT_EQ(v["data_rule"], "same") << what;
  EXPECT_TRUE(v["stand_in"]["exact"].get<bool>()) << what << ": " << v["stand_in"].dump();
  EXPECT_EQ(r.summary["memory"]["ranks"].size(), 1u) << what;  // the subject's view alone
}

}  // namespace

TEST(StandInPeers, EqualEveryRankRunningForEveryStagePrecisionAndOffload) {
  struct Case {
    int stage;
    const char* precision;
    const char* offload;
  };
  for (const Case c : {Case{0, "fp32", "none"}, Case{1, "fp32", "none"}, Case{1, "bf16", "optimizer"},
                       Case{2, "bf16", "none"}, Case{2, "fp16", "none"}, Case{2, "bf16", "optimizer"},
                       Case{3, "bf16", "none"}, Case{3, "fp32", "param"}}) {
    const std::string what = "stage " + std::to_string(c.stage) + " " + c.precision + " offload " + c.offload;
    const std::string cfg = si_config(c.stage, c.precision, c.offload);
    const std::string flags = "--steps 3 --model tiny --world-size 4 --as-rank 3 --data-rule same";
    const RunResult run = zrepro_run("si_run", cfg, flags + " --peers run");
    const RunResult si = zrepro_run("si_si", cfg, flags + " --peers stand-in");
    ASSERT_EQ(run.code, 0) << what << "\n" << run.output;
    expect_exact_stand_in(si, what);
    expect_same_steps(run.summary, si.summary, what);
    expect_same_subject(run.summary, si.summary, 3, what, std::string(c.offload) == "none" ? 0 : 40000);
    if (c.stage > 0) {
      EXPECT_GT(int(si.summary["virtual_ranks"]["stand_in"]["gathers_checked"]), 0) << what;
    }
    // It says what its figures rest on.
    EXPECT_NE(si.summary["virtual_ranks"]["note"].get<std::string>().find("Exact under the same-data rule"),
              std::string::npos);
    EXPECT_NE(si.output.find("stand-in check: the peers' model matched"), std::string::npos) << si.output;
  }
}

// 64 ranks, and the issue's bound for running every rank: 512 threads, about 20 s here,
// where the stood-in subject gives its bytes and losses in well under a second.
TEST(StandInPeers, SixtyFourAndFiveHundredTwelveRanksOfZero3EqualEveryRankRunning) {
  const std::string cfg = si_config(3, "bf16", "none", 1);
  struct Case {
    int world, rank, steps;
  };
  for (const Case c : {Case{64, 17, 2}, Case{512, 1, 1}}) {
    const std::string what = std::to_string(c.world) + " ranks";
    const std::string flags = "--steps " + std::to_string(c.steps) + " --model tiny --world-size " +
                              std::to_string(c.world) + " --as-rank " + std::to_string(c.rank) + " --data-rule same";
    const RunResult run = zrepro_run("simany_run", cfg, flags);
    const RunResult si = zrepro_run("simany_si", cfg, flags + " --peers stand-in");
    ASSERT_EQ(run.code, 0) << what << "\n" << run.output;
    expect_exact_stand_in(si, what);
    expect_same_steps(run.summary, si.summary, what);
    expect_same_subject(run.summary, si.summary, c.rank, what);
    EXPECT_NE(si.output.find("stood-in peers: rank " + std::to_string(c.rank) + " of " + what.substr(0, what.find(' ')) +
                             " runs alone"),
              std::string::npos)
        << si.output;
  }
}

TEST(StandInPeers, EqualFourRealProcessesSharingBatches) {
  const std::string cfg = si_config(3, "fp32", "none");
  const std::string flags = "--steps 2 --model tiny --data-rule same";
  const RunResult real = zrepro_run("sir_real", cfg, flags + " --ranks 4");
  const RunResult si = zrepro_run("sir_si", cfg, flags + " --world-size 4 --as-rank 1 --peers stand-in");
  ASSERT_EQ(real.code, 0) << real.output;
  expect_exact_stand_in(si, "4 real ranks");
  expect_same_losses(real, si, 1e-5, "4 real ranks");  // MPI's own reduction order
  expect_same_subject(real.summary, si.summary, 1, "4 real ranks");
}

// [Note: a release's own behaviour] (zero/zero_config.h): as DeepSpeed 0.17.6, ZeRO-2 keeps
// only the boundary micro-step's gradients, on the subject and in the stood-in peers' rows
// alike (once the peers kept every micro-step's and stepped on the whole batch: step 1's
// grad norm was 1.205 where 4 ranks on threads give 0.7793).
TEST(StandInPeers, StandInsFollowTheReleasesOwnGradientBehaviour) {
  const std::string cfg =
      zrepro_test::read_text(std::string(ZREPRO_SOURCE_DIR).append("/tests/data/bisect/zero2-regression/ds_config.json"));
  const std::string flags = "--steps 3 --model tiny --data-rule same --world-size 4 --deepspeed-version 0.17.6";
  const RunResult threads = zrepro_run("si_7718_run", cfg, flags + " --peers run");
  const RunResult si = zrepro_run("si_7718_si", cfg, flags + " --as-rank 1 --peers stand-in");
  ASSERT_EQ(threads.code, 0) << threads.output;
  expect_exact_stand_in(si, "0.17.6 at ZeRO-2");
  expect_same_steps(threads.summary, si.summary, "0.17.6 at ZeRO-2");
}

TEST(StandInPeers, RankOneOfAnEightThousandRankZero3JobAgreesWithThePlanner) {
  const std::string cfg = si_config(3, "bf16", "none", 1);
  const RunResult si =
      zrepro_run("si8k", cfg, "--steps 2 --model tiny --world-size 8192 --as-rank 1 --peers stand-in");
  expect_exact_stand_in(si, "8192 ranks");
  EXPECT_EQ(si.summary["world_size"], 8192);
  const json& measured = rank_view(si.summary, 1);
  const json& planned = si.summary["memory"]["planned"];
  // At 8192 ranks every parameter is padded to a multiple of 8192: the padding is most
  // of the gathered layers, and the planner has it to the byte.
  for (const char* cat : {"params", "grads", "optimizer_states"})
    EXPECT_EQ(measured["category_peaks"][cat], planned["category_peaks"][cat]) << cat;
  const double p = planned["peak_bytes"], m = measured["peak_bytes"];
  // [Note: tapes of this LibTorch]: where this CPU's bf16 matmuls go through oneDNN, the plan
  // leaves out its transient reorder buffers and says so (not_planned); the run holds them.
  // There the gap is bounded as Planner.OneDnnScratchIsTheBf16GapOnThisCpu bounds it (5%).
  // not_planned is null where nothing is left out (a CPU without oneDNN's bf16 path).
  const bool onednn_scratch = planned["not_planned"].is_string() &&
                              planned["not_planned"].get<std::string>().find("oneDNN") != std::string::npos;
  if (onednn_scratch) {
    EXPECT_GE(m, p);
    EXPECT_LE((m - p) / m, 0.05) << "planned " << p << " measured " << m;
  } else {
    EXPECT_LE(std::abs(p - m) / m, 1e-3) << "planned " << p << " measured " << m;
  }
}

TEST(StandInPeers, RefusesWhatItCannotStandInForNamingTheFlag) {
  const std::string cfg = si_config(3, "fp32", "none");
  struct Case {
    std::string args, says;
  };
  for (const Case& c :
       {Case{"--world-size 4 --peers stand-in --data-rule distinct", "--data-rule distinct with --peers stand-in"},
        Case{"--world-size 4 --peers stand-in --inject inf-grad:0", "with --peers stand-in"},
        Case{"--world-size 1024", "--peers stand-in runs rank"},
        Case{"--peers stand-in", "--peers: needs --world-size"},
        Case{"--world-size 4 --peers all", "--peers: got \"all\""}}) {
    const RunResult r = zrepro_run("si_refuse", cfg, "--steps 1 --model tiny " + c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.says), std::string::npos) << c.args << "\n" << r.output;
  }
}

// The check is a real comparison: with --peer-values initial the peers never step, so
// after the first update this rank's row no longer equals the partition it sends, and the
// run says its losses are approximate while its memory stays the job's.
TEST(StandInPeers, TheSelfCheckSaysWhenThePeersValuesAreNotModelled) {
  const std::string cfg = si_config(3, "bf16", "none", 1);
  const std::string flags = "--steps 2 --model tiny --world-size 4 --as-rank 2 --data-rule same";
  const RunResult run = zrepro_run("si_init_run", cfg, flags);
  const RunResult si = zrepro_run("si_init", cfg, flags + " --peers stand-in --peer-values initial");
  ASSERT_EQ(si.code, 0) << si.output;
  ASSERT_EQ(run.code, 0) << run.output;
  const json& s = si.summary["virtual_ranks"]["stand_in"];
  EXPECT_FALSE(s["exact"].get<bool>()) << s.dump();
  EXPECT_FALSE(s["values_modelled"].get<bool>()) << s.dump();
  EXPECT_GT(int(s["gathers_equal"]), 0) << s.dump();                     // before the first step
  EXPECT_LT(int(s["gathers_equal"]), int(s["gathers_checked"])) << s.dump();  // after it
  EXPECT_EQ(si.summary["virtual_ranks"]["peer_values"], "initial");
  EXPECT_NE(si.output.find("losses approximate"), std::string::npos) << si.output;
  expect_same_subject(run.summary, si.summary, 2, "--peer-values initial");
  EXPECT_EQ(double(run.summary["steps"][0]["loss"]), double(si.summary["steps"][0]["loss"]));  // the first step
  EXPECT_NE(double(run.summary["steps"][1]["loss"]), double(si.summary["steps"][1]["loss"]));
}

// --as-rank most: the rank whose memory is the highest of all ranks' (stage 2's
// whole-parameter gradient partition), run as every rank and stood in for at 8192 ranks.
TEST(StandInPeers, AsRankMostRunsTheRankThatHoldsTheMost) {
  const std::string cfg = si_config(2, "fp32", "none", 1);
  const RunResult all = zrepro_run("simost_run", cfg, "--steps 1 --model tiny --world-size 8 --as-rank most");
  ASSERT_EQ(all.code, 0) << all.output;
  // Ties allowed: where the peak comes before stage 2's partition exists every rank peaks
  // alike, and the chosen rank is the one with the largest partition.
  double best_peak = -1, chosen_peak = -1;
  const int chosen = all.summary["virtual_ranks"]["as_rank"];
  for (const json& r : all.summary["memory"]["ranks"]) {
    best_peak = std::max(best_peak, double(r["peak_bytes"]));
    if (r["rank"] == chosen) chosen_peak = r["peak_bytes"];
  }
  EXPECT_EQ(chosen_peak, best_peak);
  EXPECT_NE(all.output.find("--as-rank most: rank " + std::to_string(chosen) + " of 8"), std::string::npos)
      << all.output;
  const RunResult si =
      zrepro_run("simost_si", cfg, "--steps 1 --model tiny --world-size 8192 --as-rank most --peers stand-in");
  expect_exact_stand_in(si, "8192 ranks, most");
  const RunResult bad = zrepro_run("simost_bad", cfg, "--steps 1 --model tiny --world-size 8 --as-rank seven");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.output.find("expected a rank 0..7 or most"), std::string::npos) << bad.output;
}

