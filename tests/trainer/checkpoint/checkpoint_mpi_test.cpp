// Checkpoints through the binary on two ranks (trainer/checkpoint/ds_checkpoint.h):
// a run that saves and a run that resumes from the save continue the same loss curve,
// bit for bit, at every ZeRO stage that checkpoints (fp32, bf16, fp16's dynamic scaler);
// the files are DeepSpeed's (names, the latest tag); what DeepSpeed refuses is refused
// with its message; a write that fails leaves nothing half-written.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "tests/support/process.h"
#include "trainer/checkpoint/pt_file.h"
#include "trainer/runtime/torch_python.h"

using namespace zrepro_test;

namespace {

std::string ckpt_config(int stage, const std::string& precision) {
  std::string p = precision == "fp32" ? "" : ", \"" + precision + "\": {\"enabled\": true}";
  return R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2, "zero_optimization": {"stage": )" +
         std::to_string(stage) + R"(, "stage3_param_persistence_threshold": 100})" + p + "}";
}

// A checkpoint folder holding only `tag` (copied from a run's save_dir).
std::string only_tag(const std::string& from, const std::string& tag, const std::string& to) {
  namespace fs = std::filesystem;
  fs::create_directories(to);
  fs::copy(from + "/" + tag, to + "/" + tag, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  std::ofstream(to + "/latest") << tag;
  return to;
}

// A run that saves DeepSpeed's checkpoint into TempDir()/NAME (emptied first): `flags`
// and --save-dir there. The folder, and the run to assert on.
struct Saved {
  std::string dir;
  RunResult run;
};
Saved saved_checkpoint(const std::string& name, const std::string& config, const std::string& flags) {
  const std::string dir = testing::TempDir() + "/" + name;
  std::filesystem::remove_all(dir);
  return {dir, zrepro_run(name, config, flags + " --save-dir " + dir)};
}

}  // namespace

TEST(Checkpoint, AResumedRunContinuesTheLossCurveBitForBit) {
  for (const auto& [stage, precision] : std::vector<std::pair<int, std::string>>{{1, "fp16"}, {2, "fp32"}, {3, "bf16"}}) {
    const std::string name = "ck_s" + std::to_string(stage) + precision;
    const std::string cfg = ckpt_config(stage, precision);
    const std::string base = "--ranks 2 --model tiny-llama --seq 16 --steps 4";
    const std::string save = testing::TempDir() + "/" + name + "_save";
    std::filesystem::remove_all(save);
    const RunResult full = zrepro_run(name + "_full", cfg, base + " --save-every 2 --save-dir " + save);
    ASSERT_EQ(full.code, 0) << full.output;
    const std::string step2 = save + "/global_step2";
    EXPECT_TRUE(std::filesystem::exists(step2 + "/" + (stage == 3 ? "zero_pp_rank_1_mp_rank_00_model_states.pt"
                                                                   : "mp_rank_00_model_states.pt")));
    EXPECT_TRUE(std::filesystem::exists(step2 + "/" + (precision == "bf16" ? "bf16_" : "") +
                                        "zero_pp_rank_1_mp_rank_00_optim_states.pt"));
    ASSERT_EQ(full.summary["checkpoint"]["saved"].size(), 2u) << full.summary.dump();
    EXPECT_EQ(full.summary["checkpoint"]["saved"][1]["step"], 4);
    const std::string from2 = only_tag(save, "global_step2", testing::TempDir() + "/" + name + "_from2");
    const RunResult res = zrepro_run(name + "_res", cfg, base + " --resume " + from2);
    ASSERT_EQ(res.code, 0) << res.output;
    EXPECT_EQ(res.summary["checkpoint"]["resumed"]["step"], 2);
    const auto& a = full.summary["steps"];
    const auto& b = res.summary["steps"];
    ASSERT_EQ(b.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(a[i + 2]["step"], b[i]["step"]);
      EXPECT_EQ(a[i + 2]["loss"].get<double>(), b[i]["loss"].get<double>()) << name << " step " << i + 3;
      EXPECT_EQ(a[i + 2]["grad_norm"].get<double>(), b[i]["grad_norm"].get<double>()) << name;
      EXPECT_EQ(a[i + 2]["loss_scale"].get<double>(), b[i]["loss_scale"].get<double>()) << name;
    }
  }
}

// Python torch's own LambdaLR, given the saved "lr_scheduler" state (as DeepSpeed's
// load_checkpoint gives it) and the same cosine lambda (warmup 2 of 5 steps), runs the next
// two steps at zrepro's lrs. The file is read with from_deepspeed.py's stand-ins for
// DeepSpeed's classes, so DeepSpeed need not be installed.
void expect_lambda_lr_continues(const std::string& pt, double step4_lr, double step5_lr) {
  std::string python;
  try {
    python = zrepro::find_torch_python("--python", "", testing::TempDir() + "/ck_sched_python.log").python;
  } catch (const std::exception& e) {
    GTEST_SKIP() << "no Python torch to check the LambdaLR state with: " << e.what();
  }
  const std::string script = testing::TempDir() + "/ck_sched_lambda.py";
  std::ofstream(script) << "import math, sys, torch\nsys.path.insert(0, '" << ZREPRO_SOURCE_DIR
                        << "/trainer/checkpoint')\nimport from_deepspeed as f\n"
                           "sd = torch.load(sys.argv[1], map_location='cpu', weights_only=False, "
                           "pickle_module=f.pickle_module)['lr_scheduler']\n"
                           "def lam(s):\n"
                           "    if s < 2: return s / 2\n"
                           "    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * 0.5 * 2.0 * (s - 2) / 3)))\n"
                           "o = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=0.002)\n"
                           "s = torch.optim.lr_scheduler.LambdaLR(o, lam)\n"
                           "s.load_state_dict(sd)\n"
                           "print(repr(s.get_last_lr()[0]))\n"
                           "s.step()\n"
                           "print(repr(s.get_last_lr()[0]))\n";
  const Process r = shell(python + " -W ignore " + script + " " + pt + " 2>&1");
  ASSERT_EQ(r.code, 0) << r.output;
  std::istringstream lines(r.output);
  double four = -1, five = -1;
  lines >> four >> five;
  EXPECT_DOUBLE_EQ(four, step4_lr) << r.output;
  EXPECT_DOUBLE_EQ(five, step5_lr) << r.output;
}

// [Note: the Trainer's schedule] (zero/zero_config.h): under the Trainer's own schedule a
// resume continues the lr and the losses bit for bit, whether DeepSpeed holds the
// schedule's state (the file has "optimizer": a LambdaLR state_dict in the checkpoint) or
// the Trainer does (no "optimizer": DeepSpeed saves None and the steps taken are the state).
TEST(Checkpoint, UnderTheTrainersScheduleAResumeContinuesTheLr) {
  const std::string args = testing::TempDir() + "/ck_sched_args.json";
  std::ofstream(args) << R"({"learning_rate": 0.002, "lr_scheduler_type": "cosine", "warmup_steps": 2})";
  for (const bool ds_optimizer : {true, false}) {
    const std::string name = std::string("ck_sched_") + (ds_optimizer ? "ds" : "trainer");
    const std::string cfg = std::string(R"({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 2})") +
                            (ds_optimizer ? R"(, "optimizer": {"type": "AdamW", "params": {"lr": "auto"}}})" : "}");
    const std::string base = "--ranks 2 --model tiny --seq 8 --steps 5 --training-args " + args;
    const std::string save = testing::TempDir() + "/" + name + "_save";
    std::filesystem::remove_all(save);
    const RunResult full = zrepro_run(name + "_full", cfg, base + " --save-every 3 --save-dir " + save);
    ASSERT_EQ(full.code, 0) << full.output;
    EXPECT_NE(full.output.find("the Trainer's own cosine schedule"), std::string::npos) << full.output;
    const auto& a = full.summary["steps"];
    EXPECT_EQ(a[0]["lr"].get<double>(), 0.0) << "the first step of a warmup runs at lambda(0)";
    EXPECT_EQ(a[2]["lr"].get<double>(), 0.002);
    EXPECT_LT(a[4]["lr"].get<double>(), a[3]["lr"].get<double>()) << "cosine decay after the warmup";
    const c10::IValue ms = zrepro::read_pt(save + "/global_step3/mp_rank_00_model_states.pt");
    const c10::IValue lr = ms.toGenericDict().at("lr_scheduler");
    if (ds_optimizer) {
      ASSERT_TRUE(lr.isGenericDict());
      EXPECT_EQ(lr.toGenericDict().at("last_epoch").toInt(), 3);
      EXPECT_EQ(lr.toGenericDict().at("_step_count").toInt(), 4);
      expect_lambda_lr_continues(save + "/global_step3/mp_rank_00_model_states.pt", a[3]["lr"], a[4]["lr"]);
    } else {
      EXPECT_TRUE(lr.isNone()) << "the Trainer saves its scheduler beside DeepSpeed's checkpoint";
    }
    const std::string from3 = only_tag(save, "global_step3", testing::TempDir() + "/" + name + "_from3");
    // DeepSpeed's next step runs at the optimizer group's saved lr (load_checkpoint restores
    // it; the scheduler's state says only where the schedule is): the schedule's lr of step 4.
    const c10::IValue opt = zrepro::read_pt(save + "/global_step3/zero_pp_rank_0_mp_rank_00_optim_states.pt");
    const auto groups = opt.toGenericDict().at("optimizer_state_dict").toGenericDict().at("base_optimizer_state")
                            .toGenericDict().at("param_groups").toList();
    EXPECT_EQ(groups.get(0).toGenericDict().at("lr").toDouble(), a[3]["lr"].get<double>()) << name;
    const RunResult res = zrepro_run(name + "_res", cfg, base + " --resume " + from3);
    ASSERT_EQ(res.code, 0) << res.output;
    const auto& b = res.summary["steps"];
    ASSERT_EQ(b.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(a[i + 3]["lr"].get<double>(), b[i]["lr"].get<double>()) << name << " step " << i + 4;
      EXPECT_EQ(a[i + 3]["loss"].get<double>(), b[i]["loss"].get<double>()) << name << " step " << i + 4;
    }
  }
}

TEST(Checkpoint, WhatDeepSpeedRefusesIsRefusedWithItsMessage) {
  const auto [save, two] = saved_checkpoint("ck_refuse", ckpt_config(2, "fp32"), "--ranks 2 --model tiny --seq 8 --steps 1 --save-every 1");
  ASSERT_EQ(two.code, 0) << two.output;
  // Another world size: DeepSpeed's ZeRORuntimeException, and the universal checkpoint named.
  const RunResult one = zrepro_run("ck_one", ckpt_config(2, "fp32"), "--model tiny --seq 8 --steps 3 --resume " + save);
  EXPECT_EQ(one.code, 2) << one.output;
  EXPECT_NE(one.output.find("used a DP world size of 2 but the current world size is 1"), std::string::npos) << one.output;
  EXPECT_EQ(one.summary["status"], "config_error");
  // Another stage, another precision, no checkpoint at all, stage 0.
  const RunResult stage3 = zrepro_run("ck_s3", ckpt_config(3, "fp32"), "--ranks 2 --model tiny --seq 8 --steps 3 --resume " + save);
  EXPECT_EQ(stage3.code, 2) << stage3.output;
  EXPECT_NE(stage3.output.find("stage"), std::string::npos) << stage3.output;
  const RunResult bf16 = zrepro_run("ck_bf16", ckpt_config(2, "bf16"), "--ranks 2 --model tiny --seq 8 --steps 3 --resume " + save);
  EXPECT_EQ(bf16.code, 2) << bf16.output;
  EXPECT_NE(bf16.output.find("bf16_"), std::string::npos) << bf16.output;
  const RunResult none = zrepro_run("ck_none", ckpt_config(2, "fp32"), "--model tiny --steps 3 --resume " + testing::TempDir());
  EXPECT_EQ(none.code, 2) << none.output;
  EXPECT_NE(none.output.find("/latest"), std::string::npos) << none.output;
  const RunResult s0 = zrepro_run("ck_s0", ckpt_config(0, "fp32"), "--model tiny --steps 1 --save-every 1 --save-dir " + save);
  EXPECT_EQ(s0.code, 2) << s0.output;
  EXPECT_NE(s0.output.find("--save-every: zero_optimization.stage is 0"), std::string::npos) << s0.output;
  const RunResult half = zrepro_run("ck_half", ckpt_config(2, "fp32"), "--model tiny --steps 1 --save-every 1");
  EXPECT_EQ(half.code, 2) << half.output;
  // A model-states file LibTorch cannot read (as DeepSpeed's own): bad input naming it, exit 2.
  const std::string bad = testing::TempDir() + "/ck_bad";
  std::filesystem::create_directories(bad + "/global_step1");
  std::ofstream(bad + "/latest") << "global_step1";
  std::ofstream(bad + "/global_step1/mp_rank_00_model_states.pt") << "not a zip";
  const RunResult unreadable = zrepro_run("ck_bad", ckpt_config(2, "fp32"), "--model tiny --steps 2 --resume " + bad);
  EXPECT_EQ(unreadable.code, 2) << unreadable.output;
  EXPECT_NE(unreadable.output.find("mp_rank_00_model_states.pt: not a PyTorch .pt file LibTorch can read"),
            std::string::npos) << unreadable.output;
  // Issue 61 item 6: one rank's damaged file on a two-rank ZeRO-3 resume. That rank alone
  // reads it and refuses it; its message reaches the terminal and is the summary's headline,
  // where the user saw only rank 0's "rank 1 vanished" ([Note: the cause is the headline]).
  const auto [save3, three] =
      saved_checkpoint("ck_refuse3", ckpt_config(3, "fp32"), "--ranks 2 --model tiny --seq 8 --steps 1 --save-every 1");
  ASSERT_EQ(three.code, 0) << three.output;
  const std::string damaged = save3 + "/global_step1/zero_pp_rank_1_mp_rank_00_optim_states.pt";
  std::ofstream(damaged, std::ios::trunc) << "cut";
  const RunResult one_rank =
      zrepro_run("ck_cut", ckpt_config(3, "fp32"), "--ranks 2 --model tiny --seq 8 --steps 3 --resume " + save3);
  EXPECT_EQ(one_rank.code, 2) << one_rank.output;
  EXPECT_NE(one_rank.output.find("[zrepro] rank 1: error: " + damaged + ": not a PyTorch .pt file"), std::string::npos)
      << one_rank.output;
  EXPECT_EQ(one_rank.summary["status"], "config_error") << one_rank.summary.dump(1);
  EXPECT_EQ(one_rank.summary["failure"]["rank"], 1);
}

// A checkpoint that cannot be written (a 300 KiB file size limit, as a full disk; tiny's
// optimizer file is 700 KiB): exit 12,
// no checkpoint file under its final name holds part of one, and no `latest` names it.
TEST(Checkpoint, AFailedWriteLeavesNothingHalfWritten) {
  const std::string dir = testing::TempDir() + "/ck_fsize";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/ds.json") << ckpt_config(2, "fp32");
  const Process p = shell("ulimit -f 300; " + std::string(ZREPRO_BIN).append(" run --config ") + dir +
                          "/ds.json --model tiny --steps 2 --save-every 1 --save-dir " + dir + "/ck --out " + dir +
                          "/out 2>&1; echo \"exit=$?\"");
  EXPECT_NE(p.output.find("exit=12"), std::string::npos) << p.output;
  EXPECT_FALSE(std::filesystem::exists(dir + "/ck/latest"));
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir + "/ck")) {
    const std::string name = e.path().filename().string();
    EXPECT_EQ(name.find(".tmp."), std::string::npos) << name;
    // tiny's files are all over the limit: none may be there, whole or in part.
    EXPECT_FALSE(e.is_regular_file()) << name << " was written past the limit";
  }
}

// [Note: the 16-bit consolidation at save]: ZeRO-3 with stage3_gather_16bit_weights_on_model_save
// also writes the whole 16-bit model (pytorch_model.bin, as save_16bit_model), which rank 0
// held on the host: 2 bytes per parameter in bf16, under the module names.
TEST(Checkpoint, Zero3GathersThe16BitModelOnRank0AtASaveWhenAsked) {
  const std::string save = testing::TempDir() + "/ck_16bit";
  std::filesystem::remove_all(save);
  std::string cfg = ckpt_config(3, "bf16");
  cfg.replace(cfg.find("\"stage3_param_persistence_threshold\""), 0, "\"stage3_gather_16bit_weights_on_model_save\": true, ");
  const RunResult r = zrepro_run("ck_16bit", cfg, "--ranks 2 --model tiny-llama --seq 16 --steps 1 --save-every 1 --save-dir " + save);
  ASSERT_EQ(r.code, 0) << r.output;
  const int64_t params = r.summary["model"]["params"].get<int64_t>();
  EXPECT_EQ(r.summary["checkpoint"]["saved"][0]["consolidated_16bit_host_bytes"].get<int64_t>(), 2 * params);
  const c10::impl::GenericDict sd = zrepro::read_pt(save + "/pytorch_model.bin").toGenericDict();
  int64_t n = 0;
  for (const auto& kv : sd) {
    EXPECT_EQ(kv.value().toTensor().scalar_type(), torch::kBFloat16) << kv.key().toStringRef();
    n += kv.value().toTensor().numel();
  }
  EXPECT_EQ(n, params);
  EXPECT_TRUE(sd.contains("model.layers.1.mlp.down_proj.weight"));
  // Without the key: no 16-bit model (the Trainer then saves only the ZeRO checkpoint).
  std::filesystem::remove_all(save);
  const RunResult off = zrepro_run("ck_16bit_off", ckpt_config(3, "bf16"),
                                   "--ranks 2 --model tiny-llama --seq 16 --steps 1 --save-every 1 --save-dir " + save);
  ASSERT_EQ(off.code, 0) << off.output;
  EXPECT_FALSE(std::filesystem::exists(save + "/pytorch_model.bin"));
  EXPECT_EQ(off.summary["checkpoint"]["saved"][0]["consolidated_16bit_host_bytes"], 0);
}

// The plan's save phase (planner.cpp save) against two ranks that save with the 16-bit
// consolidation: the same peak, the groups gathered one at a time.
TEST(Checkpoint, ThePlansSavePhaseIsTheRunsOnTwoRanks) {
  const std::string save = testing::TempDir() + "/ck_plan";
  std::filesystem::remove_all(save);
  const std::string cfg = R"({"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": true}, "zero_optimization":
    {"stage": 3, "reduce_bucket_size": 20000, "stage3_param_persistence_threshold": 100,
     "stage3_gather_16bit_weights_on_model_save": true}})";
  const RunResult r = zrepro_run("ck_plan", cfg, "--ranks 2 --model tiny --steps 1 --save-every 1 --save-dir " + save);
  ASSERT_EQ(r.code, 0) << r.output;
  const Process p = zrepro_cmd("plan --config " + r.dir + "/ds.json --model tiny --world-size 2 --save-every 1 --json");
  ASSERT_EQ(p.code, 0) << p.output;
  const nlohmann::json plan = nlohmann::json::parse(p.output.substr(p.output.find('{')));
  auto save_peak = [](const nlohmann::json& phases) -> int64_t {
    for (const auto& x : phases)
      if (x["phase"] == "save") return x["peak_bytes"].get<int64_t>();
    return -1;
  };
  const int64_t measured = save_peak(r.summary["memory"]["ranks"][0]["phases"]), planned = save_peak(plan["phases"]);
  ASSERT_GT(measured, 0);
  EXPECT_NEAR(planned, measured, 0.005 * measured);
  // Rank 0's host copy of the 16-bit model, planned as the run held it.
  EXPECT_EQ(plan["checkpoint_host"]["save_16bit_rank0_bytes"], r.summary["checkpoint"]["saved"][0]["consolidated_16bit_host_bytes"]);
  EXPECT_EQ(plan["checkpoint_host"]["zero_to_fp32_api_anon_bytes"].get<int64_t>(),
            4 * r.summary["model"]["params"].get<int64_t>());
  EXPECT_EQ(plan["checkpoint_host"]["zero_to_fp32_mapped_bytes"].get<int64_t>(),
            4 * r.summary["model"]["params"].get<int64_t>());
}

// [Note: the universal layout] (trainer/checkpoint/universal.h): a checkpoint saved on 2
// ranks, converted by `zrepro checkpoint to-universal`, resumes under
// checkpoint.load_universal on 2 ranks bit for bit and on 1 and 3 ranks (the same global
// batch: the accumulation makes up the ranks) with the uninterrupted run's losses, within
// the reduction-order tolerance of the rank-count equivalence (1e-5 relative).
TEST(Checkpoint, AUniversalCheckpointResumesAtAnotherWorldSizeWithTheSameLosses) {
  for (int stage : {1, 2, 3}) {
    const std::string name = "ck_univ_s" + std::to_string(stage);
    const std::string zero = R"("zero_optimization": {"stage": )" + std::to_string(stage) +
                             R"(, "stage3_param_persistence_threshold": 100})";
    const std::string cfg = R"({"train_batch_size": 12, "train_micro_batch_size_per_gpu": 2, )" + zero + "}";
    const std::string universal_cfg = R"({"train_batch_size": 12, "train_micro_batch_size_per_gpu": 2, )" + zero +
                                      R"(, "checkpoint": {"load_universal": true}})";
    const std::string args = " --model tiny-llama --seq 16 --steps 4";
    const std::string save = testing::TempDir() + "/" + name;
    std::filesystem::remove_all(save);
    const RunResult full = zrepro_run(name + "_full", cfg, "--ranks 2" + args + " --save-every 2 --save-dir " + save);
    ASSERT_EQ(full.code, 0) << full.output;
    // Without the universal conversion another world size is refused (DeepSpeed's message).
    const RunResult refused = zrepro_run(name + "_refused", universal_cfg, args + " --resume " + save);
    EXPECT_EQ(refused.code, 2) << refused.output;
    EXPECT_NE(refused.output.find("latest_universal does not exist"), std::string::npos) << refused.output;
    // Stages 1-2 without --inject-missing-state: the script's assertion.
    const std::string in = save + "/global_step2", out = save + "/global_step2_universal";
    if (stage < 3) {
      const Process bare = zrepro_cmd("checkpoint to-universal --input-folder " + in + " --output-folder " + out);
      EXPECT_EQ(bare.code, 2) << bare.output;
      EXPECT_NE(bare.output.find("Required universal_checkpoint_info state is missing"), std::string::npos) << bare.output;
    }
    const Process conv = zrepro_cmd("checkpoint to-universal --input-folder " + in + " --output-folder " + out +
                                    " --inject-missing-state");
    ASSERT_EQ(conv.code, 0) << conv.output;
    EXPECT_TRUE(std::filesystem::exists(out + "/zero/model.embed_tokens.weight/fp32.pt"));
    EXPECT_TRUE(std::filesystem::exists(out + "/zero/optimizer_state.pt"));
    EXPECT_EQ(std::filesystem::exists(out + "/zero/model.embed_tokens.weight/step.pt"), stage < 3);
    std::ifstream latest(save + "/latest_universal");
    std::string tag;
    latest >> tag;
    EXPECT_EQ(tag, "global_step2_universal");
    const auto& a = full.summary["steps"];
    for (int ranks : {2, 1, 3}) {
      const RunResult res = zrepro_run(name + "_r" + std::to_string(ranks), universal_cfg,
                                       (ranks > 1 ? "--ranks " + std::to_string(ranks) : std::string()) + args +
                                           " --resume " + save);
      ASSERT_EQ(res.code, 0) << res.output;
      EXPECT_EQ(res.summary["checkpoint"]["resumed"]["step"], 2);
      EXPECT_EQ(res.summary["checkpoint"]["resumed"]["universal"], true);
      const auto& b = res.summary["steps"];
      ASSERT_EQ(b.size(), 2u);
      for (size_t i = 0; i < 2; ++i) {
        const double la = a[i + 2]["loss"].get<double>(), lb = b[i]["loss"].get<double>();
        const double ga = a[i + 2]["grad_norm"].get<double>(), gb = b[i]["grad_norm"].get<double>();
        if (ranks == 2) {
          EXPECT_EQ(la, lb) << name << " on 2 ranks, step " << i + 3;
          EXPECT_EQ(ga, gb) << name << " on 2 ranks, step " << i + 3;
        } else {
          EXPECT_NEAR(la, lb, 1e-5 * la) << name << " on " << ranks << " ranks, step " << i + 3;
          EXPECT_NEAR(ga, gb, 1e-4 * ga) << name << " on " << ranks << " ranks, step " << i + 3;
        }
      }
    }
  }
}

// [Note: zero_to_fp32's host memory] (trainer/checkpoint/zero_to_fp32.h): --zero-to-fp32
// consolidates the run's checkpoint into the fp32 model the run holds (at ZeRO-3 in fp32 the
// 16-bit gather at save is that model too: two independent paths, equal tensor for tensor);
// the script's anonymous peak is its largest shard at ZeRO-3 and the whole flat at ZeRO-2;
// the API's past an emulated host ends the run as the OOM killer would, writing nothing.
TEST(Checkpoint, ZeroToFp32ConsolidatesTheModelAndModelsItsHostMemory) {
  const std::string dir = testing::TempDir() + "/ck_z2f";
  std::filesystem::remove_all(dir);
  std::string cfg = ckpt_config(3, "fp32");
  cfg.replace(cfg.find("\"stage3_param_persistence_threshold\""), 0, "\"stage3_gather_16bit_weights_on_model_save\": true, ");
  const std::string base = "--ranks 2 --model tiny-llama --seq 16 --steps 1 --save-every 1 --save-dir " + dir + "/ck";
  const RunResult r = zrepro_run("ck_z2f", cfg, base + " --zero-to-fp32 " + dir + "/fp32 --zero-to-fp32-shard 40KB");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto& z = r.summary["checkpoint"]["zero_to_fp32"];
  ASSERT_TRUE(z.is_object()) << r.summary["checkpoint"].dump();
  const c10::impl::GenericDict gathered = zrepro::read_pt(dir + "/ck/pytorch_model.bin").toGenericDict();
  const auto index = nlohmann::json::parse(zrepro_test::read_text(dir + "/fp32/pytorch_model.bin.index.json"));
  int64_t largest = 0, names = 0;
  for (const auto& f : z["files"]) {
    if (f == "pytorch_model.bin.index.json") continue;
    int64_t bytes = 0;
    std::set<const void*> storages;  // a tied head is an alias of the embedding, not more bytes
    for (const auto& kv : zrepro::read_pt(dir + "/fp32/" + f.get<std::string>()).toGenericDict()) {
      const std::string name = kv.key().toStringRef();
      ASSERT_TRUE(gathered.contains(name)) << name;
      EXPECT_TRUE(torch::equal(kv.value().toTensor(), gathered.at(name).toTensor())) << name;
      EXPECT_EQ(index["weight_map"][name], f) << name;
      if (storages.insert(kv.value().toTensor().data_ptr()).second) bytes += kv.value().toTensor().numel() * 4;
      ++names;
    }
    largest = std::max(largest, bytes);
  }
  EXPECT_EQ(names, static_cast<int64_t>(gathered.size()));
  EXPECT_GT(z["files"].size(), 2u);
  EXPECT_EQ(z["peak_anon_host_bytes"].get<int64_t>(), largest);
  EXPECT_LT(largest, 4 * r.summary["model"]["params"].get<int64_t>());
  EXPECT_NE(r.output.find("Detected checkpoint of type zero stage 3, world_size: 2"), std::string::npos) << r.output;
  // ZeRO-2: the whole flat is concatenated first, whatever the shard size.
  const RunResult s2 = zrepro_run("ck_z2f_s2", ckpt_config(2, "fp32"),
                                  "--ranks 2 --model tiny-llama --seq 16 --steps 1 --save-every 1 --save-dir " + dir +
                                      "/ck2 --zero-to-fp32 " + dir + "/fp32_2 --zero-to-fp32-shard 40KB");
  ASSERT_EQ(s2.code, 0) << s2.output;
  EXPECT_GE(s2.summary["checkpoint"]["zero_to_fp32"]["peak_anon_host_bytes"].get<int64_t>(),
            4 * s2.summary["model"]["params"].get<int64_t>());
  // The API on a host smaller than the fp32 model: killed, nothing written.
  const int64_t host = 2 * r.summary["model"]["params"].get<int64_t>();
  const RunResult api = zrepro_run("ck_z2f_api", ckpt_config(3, "fp32"), base + " --zero-to-fp32 " + dir + "/fp32_api --zero-to-fp32-mode "
                                                          "api --host-memory " + std::to_string(host));
  EXPECT_EQ(api.code, 13) << api.output;  // the host's OOM, not the device's 3
  EXPECT_EQ(api.summary["status"], "host_oom");
  EXPECT_EQ(api.summary["failure"]["checkpoint"], "host-memory");
  EXPECT_EQ(api.summary["failure"]["phase"], "consolidate");
  EXPECT_NE(api.output.find("Out of memory: Killed process"), std::string::npos) << api.output;
  EXPECT_FALSE(std::filesystem::exists(dir + "/fp32_api/pytorch_model.bin"));
  EXPECT_NE(api.summary["failure"]["hint"].get<std::string>().find("--max_shard_size"), std::string::npos);
  // Refused: nothing to consolidate, a host capacity with nothing to apply it to.
  EXPECT_EQ(zrepro_run("ck_z2f_no_save", cfg, "--model tiny --steps 1 --zero-to-fp32 " + dir + "/x").code, 2);
  EXPECT_EQ(zrepro_run("ck_z2f_no_z2f", cfg, "--model tiny --steps 1 --host-memory 1GB").code, 2);
  // The same host at a save that gathers the 16-bit model (fp32 here: 4 bytes per parameter):
  // rank 0 is killed in the gather, before the ZeRO checkpoint, so no `latest`.
  const RunResult at_save = zrepro_run("ck_z2f_save", cfg, "--ranks 2 --model tiny-llama --seq 16 --steps 1 "
                                       "--save-every 1 --save-dir " + dir + "/ck_save --host-memory " + std::to_string(host));
  EXPECT_EQ(at_save.code, 13) << at_save.output;
  EXPECT_EQ(at_save.summary["failure"]["phase"], "save");
  EXPECT_FALSE(std::filesystem::exists(dir + "/ck_save/latest"));
  // Issue 60: its own hint, not the consolidation's ("the checkpoint itself is intact" when
  // none was written).
  const std::string hint = at_save.summary["failure"]["hint"];
  EXPECT_NE(hint.find("stage3_gather_16bit_weights_on_model_save false"), std::string::npos) << hint;
  EXPECT_EQ(hint.find("intact"), std::string::npos) << hint;
}

// [Note: a checkpoint DeepSpeed wrote] (trainer/app/checkpoint.cpp): a checkpoint real
// DeepSpeed 0.19.8 saved (kept by conformance/checkpoints.py) is refused by --resume with
// the command that rewrites it; `zrepro checkpoint from-deepspeed` rewrites it with the
// user's Python torch and refuses bad input (exit 2, nothing under the final name);
// zrepro's own checkpoint, rewritten the same way, still resumes bit for bit (the
// rewrite changes no value zrepro reads). That DeepSpeed's rewritten checkpoint resumes
// with DeepSpeed's losses is tests/conformance/ (DeepSpeedRecord).
TEST(Checkpoint, FromDeepSpeedRewritesACheckpointDeepSpeedWroteForResume) {
  namespace fs = std::filesystem;
  const std::string fixture = std::string(ZREPRO_SOURCE_DIR).append("/conformance/results/deepspeed-checkpoints/tiny-fp32-stage2");
  ASSERT_TRUE(fs::exists(fixture + "/global_step2/mp_rank_00_model_states.pt")) << fixture;
  const std::string cfg = ckpt_config(2, "fp32"), base = "--ranks 2 --model tiny --steps 4";
  const RunResult raw = zrepro_run("ck_ds_raw", cfg, base + " --resume " + fixture);
  EXPECT_EQ(raw.code, 2) << raw.output;
  EXPECT_NE(raw.output.find("zrepro checkpoint from-deepspeed --input-folder " + fixture + "/global_step2"),
            std::string::npos) << raw.output;
  const std::string dir = fresh_dir("ck_from_ds");
  // Bad input: a folder that is no checkpoint, a Python without torch; an output that holds the tag.
  const Process none = zrepro_cmd("checkpoint from-deepspeed --input-folder " + dir + " --output-folder " + dir + "/x");
  EXPECT_EQ(none.code, 2) << none.output;
  EXPECT_NE(none.output.find("neither a checkpoint folder"), std::string::npos) << none.output;
  const Process no_torch = zrepro_cmd("checkpoint from-deepspeed --input-folder " + fixture + " --output-folder " +
                                      dir + "/x --python /bin/false");
  EXPECT_EQ(no_torch.code, 2) << no_torch.output;
  EXPECT_NE(no_torch.output.find("--python /bin/false: not a Python that imports torch"), std::string::npos)
      << no_torch.output;
  fs::create_directories(dir + "/bad/global_step1");
  std::ofstream(dir + "/bad/global_step1/mp_rank_00_model_states.pt") << "not a zip";
  const Process bad = zrepro_cmd("checkpoint from-deepspeed --input-folder " + dir + "/bad/global_step1 --output-folder " +
                                 dir + "/bad_out");
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("torch.load cannot read it"), std::string::npos) << bad.output;
  EXPECT_FALSE(fs::exists(dir + "/bad_out/global_step1"));
  EXPECT_FALSE(fs::exists(dir + "/bad_out/latest"));
  // DeepSpeed's checkpoint: rewritten, then --resume reads it (its losses: tests/conformance/).
  const Process conv = zrepro_cmd("checkpoint from-deepspeed --input-folder " + fixture + " --output-folder " + dir + "/ds");
  ASSERT_EQ(conv.code, 0) << conv.output;
  EXPECT_TRUE(fs::exists(dir + "/ds/global_step2/zero_pp_rank_1_mp_rank_00_optim_states.pt"));
  const Process again = zrepro_cmd("checkpoint from-deepspeed --input-folder " + fixture + " --output-folder " + dir + "/ds");
  EXPECT_EQ(again.code, 2) << again.output;
  EXPECT_NE(again.output.find("already holds global_step2"), std::string::npos) << again.output;
  // zrepro's own checkpoint through the same rewrite: the same losses, bit for bit.
  const std::string save = dir + "/own";
  const RunResult full = zrepro_run("ck_own_full", cfg, base + " --save-every 2 --save-dir " + save);
  ASSERT_EQ(full.code, 0) << full.output;
  const Process own = zrepro_cmd("checkpoint from-deepspeed --input-folder " + only_tag(save, "global_step2", dir + "/own2") +
                                 " --output-folder " + dir + "/own_rewritten");
  ASSERT_EQ(own.code, 0) << own.output;
  const RunResult res = zrepro_run("ck_own_res", cfg, base + " --resume " + dir + "/own_rewritten");
  ASSERT_EQ(res.code, 0) << res.output;
  ASSERT_EQ(res.summary["steps"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(full.summary["steps"][i + 2]["loss"].get<double>(), res.summary["steps"][i]["loss"].get<double>());
    EXPECT_EQ(full.summary["steps"][i + 2]["grad_norm"].get<double>(), res.summary["steps"][i]["grad_norm"].get<double>());
  }
}

// Issue 61 item 4, [Note: names from files are data] (trainer/checkpoint/universal.cpp): a
// checkpoint whose parameter name is a path ("../../escaped") is refused by to-universal
// (exit 2, the file and the name named), and nothing is written outside --output-folder.
TEST(Checkpoint, AParameterNameIsNeverAPathOutOfTheOutputFolder) {
  const auto [save, run] = saved_checkpoint("ck_names", R"({"train_batch_size": 2, "zero_optimization": {"stage": 2}})",
                                            "--model tiny-llama --seq 16 --steps 2 --save-every 2");
  ASSERT_EQ(run.code, 0) << run.output;
  const std::string in = save + "/global_step2", file = in + "/mp_rank_00_model_states.pt";
  c10::impl::GenericDict states = zrepro::read_pt(file).toGenericDict();
  c10::List<c10::IValue> shapes = states.at("param_shapes").toList();
  const c10::impl::GenericDict group = shapes.get(0).toGenericDict();
  c10::impl::GenericDict renamed(group.keyType(), group.valueType());
  for (const auto& kv : group)
    renamed.insert(renamed.empty() ? c10::IValue(std::string("../../escaped")) : kv.key(), kv.value());
  shapes.set(0, renamed);
  states.insert_or_assign("param_shapes", shapes);
  zrepro::write_pt(file, states, true);
  const std::string out = save + "/out/universal";
  const Process conv =
      zrepro_cmd("checkpoint to-universal --input-folder " + in + " --output-folder " + out + " --inject-missing-state");
  EXPECT_EQ(conv.code, 2) << conv.output;
  EXPECT_NE(conv.output.find("the parameter name \"../../escaped\" is not a plain name"), std::string::npos) << conv.output;
  EXPECT_NE(conv.output.find("mp_rank_00_model_states.pt"), std::string::npos) << conv.output;
  EXPECT_FALSE(std::filesystem::exists(save + "/out/escaped"));
  EXPECT_FALSE(std::filesystem::exists(save + "/escaped"));
}

// Issue 61 item 5, [Note: every rank's file]: a ZeRO-3 checkpoint of 2 ranks with one
// rank's optimizer file gone ended to-universal in an abort (exit 134), and with one rank's
// model states gone was converted without a word; each is refused naming the file's rank.
TEST(Checkpoint, ToUniversalRefusesACheckpointMissingARanksFile) {
  const auto [save, run] = saved_checkpoint("ck_missing", R"({"train_batch_size": 4, "zero_optimization": {"stage": 3}})",
                                            "--ranks 2 --model tiny --steps 2 --save-every 2");
  ASSERT_EQ(run.code, 0) << run.output;
  for (const std::string gone : {"zero_pp_rank_1_mp_rank_00_optim_states.pt", "zero_pp_rank_1_mp_rank_00_model_states.pt"}) {
    const std::string in = save + "/" + gone + "/global_step2";
    std::filesystem::create_directories(save + "/" + gone);
    std::filesystem::copy(save + "/global_step2", in, std::filesystem::copy_options::recursive);
    std::filesystem::remove(in + "/" + gone);
    const std::string out = save + "/" + gone + "/universal";
    const Process conv = zrepro_cmd("checkpoint to-universal --input-folder " + in + " --output-folder " + out);
    EXPECT_EQ(conv.code, 2) << gone << "\n" << conv.output;
    EXPECT_NE(conv.output.find(std::string(gone.find("optim") != std::string::npos ? "the optimizer-states file"
                                                                                   : "the model-states file") +
                               " of rank 1 is missing: the checkpoint was saved on 2 ranks"),
              std::string::npos)
        << conv.output;
    EXPECT_FALSE(std::filesystem::exists(out + "/zero")) << "nothing written";
  }
}

// Issue 61 item 3, [Note: a conversion writes a new folder]: to-universal into a folder
// holding the user's files mixed its output with them; now refused, nothing touched. Into
// an earlier conversion it replaces it whole (a stale parameter of the earlier one gone).
TEST(Checkpoint, ToUniversalNeverMixesItsOutputWithAFolderItDidNotWrite) {
  const auto [save, run] = saved_checkpoint("ck_outdir", R"({"train_batch_size": 2, "zero_optimization": {"stage": 3}})",
                                            "--model tiny --steps 2 --save-every 2");
  ASSERT_EQ(run.code, 0) << run.output;
  const std::string in = save + "/global_step2", mine = save + "/mine", out = save + "/universal";
  std::filesystem::create_directories(mine + "/zero");
  std::ofstream(mine + "/notes.txt") << "mine";
  const Process refused = zrepro_cmd("checkpoint to-universal --input-folder " + in + " --output-folder " + mine);
  EXPECT_EQ(refused.code, 2) << refused.output;
  EXPECT_NE(refused.output.find("holds \"notes.txt\", which no conversion writes"), std::string::npos) << refused.output;
  EXPECT_TRUE(std::filesystem::is_empty(mine + "/zero"));
  ASSERT_EQ(zrepro_cmd("checkpoint to-universal --input-folder " + in + " --output-folder " + out).code, 0);
  std::filesystem::create_directories(out + "/zero/stale.weight");
  const Process again = zrepro_cmd("checkpoint to-universal --input-folder " + in + " --output-folder " + out);
  EXPECT_EQ(again.code, 0) << again.output;
  EXPECT_FALSE(std::filesystem::exists(out + "/zero/stale.weight"));
  EXPECT_TRUE(std::filesystem::exists(out + "/zero/optimizer_state.pt"));
  EXPECT_EQ(zrepro_test::read_text(save + "/latest_universal"), "universal");
  for (const auto& e : std::filesystem::directory_iterator(save))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << "no staging folder left: " << e.path();
}

// Issue 61 item 3, [Note: the consolidation's folder]: --zero-to-fp32 wrote over a user's
// pytorch_model.bin, and a consolidation into sharded files left the earlier whole one
// beside them. A folder with a file zrepro did not write is refused at set-up, before the
// run trains; an earlier consolidation's files are replaced, none left stale.
TEST(Checkpoint, ZeroToFp32NeverReplacesAUsersFileNorLeavesAStaleOne) {
  const std::string dir = zrepro_test::fresh_dir("ck_z2f_folder");
  const std::string cfg = R"({"train_batch_size": 2, "zero_optimization": {"stage": 3}})";
  const std::string base = "--model tiny --steps 2 --save-every 2 --save-dir " + dir + "/ck";
  std::filesystem::create_directories(dir + "/users");
  std::ofstream(dir + "/users/pytorch_model.bin") << "the user's weights";
  const RunResult refused = zrepro_run("ck_z2f_users", cfg, base + " --zero-to-fp32 " + dir + "/users");
  EXPECT_EQ(refused.code, 2) << refused.output;
  EXPECT_NE(refused.output.find("holds \"pytorch_model.bin\", which no consolidation by zrepro wrote"), std::string::npos)
      << refused.output;
  EXPECT_TRUE(refused.summary["steps"].empty()) << "refused before training";
  EXPECT_EQ(zrepro_test::read_text(dir + "/users/pytorch_model.bin"), "the user's weights");
  ASSERT_EQ(zrepro_run("ck_z2f_whole", cfg, base + " --zero-to-fp32 " + dir + "/fp32").code, 0);
  ASSERT_TRUE(std::filesystem::exists(dir + "/fp32/pytorch_model.bin"));
  const RunResult sharded = zrepro_run("ck_z2f_sharded", cfg, base + " --zero-to-fp32 " + dir + "/fp32 --zero-to-fp32-shard 40KB");
  ASSERT_EQ(sharded.code, 0) << sharded.output;
  EXPECT_FALSE(std::filesystem::exists(dir + "/fp32/pytorch_model.bin")) << "the earlier whole file is not left stale";
  EXPECT_TRUE(std::filesystem::exists(dir + "/fp32/pytorch_model.bin.index.json"));
}
