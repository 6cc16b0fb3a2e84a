// trainer/app/reproduction.h: from a diagnosis, the catalogue's template, the user's
// config and job to a scenario folder. What each checkpoint's fixes are, which run flags
// the reproduction keeps, what it refuses to guess, and that the folder is written whole.
#include "trainer/app/reproduction.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "device/base/errors.h"

namespace {

using json = nlohmann::json;
using zrepro::ConfigError;

zrepro::Diagnosis diagnosis(const std::string& checkpoint, const std::string& scenario, json numbers = json::object()) {
  zrepro::Diagnosis d;
  d.checkpoint = checkpoint, d.scenario = scenario, d.confidence = "strong", d.reason = "a reason";
  d.evidence.push_back({"oom", 7, "CUDA out of memory. Tried to allocate 2.00 GiB"});
  d.numbers = zrepro::LogFigures::from_json(numbers);
  return d;
}

const json kOomTemplate = json::parse(R"({
  "name": "optimizer-partition-oom", "symptom": "OOM while partitioning", "grep": "CUDA out of memory",
  "expect": "failure", "a": {"config": "ds_config.json", "args": []}, "b": {"config": "fixed.json", "args": []},
  "args": ["--model", "small", "--device-memory", "48MB", "--activation-checkpointing", "--steps", "2"],
  "ranks": [1, 2]})");

const json kUserConfig = json::parse(R"({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2,
  "bf16": {"enabled": true}, "zero_optimization": {"stage": 2}})");

// What the planner answers for an OOM: its fixes, as plan.cpp writes them (FixPrediction::to_json)
// and diagnose reads them back (PlanAnswer::from_json).
zrepro::PlanAnswer oom_plan() {
  json fixes = json::array();
  auto fix = [&](const std::string& name, bool fits, double share, json patch, std::vector<std::string> args) {
    zrepro::FixPrediction f;
    f.fix = name, f.fits = fits, f.peak_share = share, f.config_patch = std::move(patch), f.args = std::move(args);
    fixes.push_back(f.to_json());
  };
  fix("optimizer offload to the host", true, 0.51,
      json::parse(R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": true}}})"), {});
  fix("activation checkpointing", true, 0.8, nullptr, {"--activation-checkpointing"});
  fix("ZeRO stage 3", false, 1.2, json::parse(R"({"zero_optimization": {"stage": 3}})"), {});
  return zrepro::PlanAnswer::from_json({{"verdict", "oom"}, {"oom_phase", "backward"}, {"peak_bytes", 5},
                                         {"peak_phase", "backward"}, {"fixes", fixes}});
}
const zrepro::PlanAnswer kPlan = oom_plan();

zrepro::JobSetup job(std::optional<std::string> model = "gpt3-6.7b", std::optional<int> ws = 4) {
  return {model, ws, std::string("a100-40gb"), {}};
}

TEST(Reproduction, OomRunsTheJobsScaleDownWithThePlannersFittingFixesAsPatchedConfigs) {
  const auto r = zrepro::build_reproduction(diagnosis("zero-stage", "optimizer-partition-oom", {{"completed_steps", 5}}),
                                            "rep", "job.log", kOomTemplate, kUserConfig, job(), kPlan);
  // The template's toy (--model small, 48MB, its activation checkpointing) is replaced by
  // the job's scale-down; the run reaches the step the log failed in.
  EXPECT_EQ(r.scenario["args"], json({"--target-model", "gpt3-6.7b", "--target-device-memory", "a100-40gb", "--steps", "7"}));
  EXPECT_EQ(r.scenario["ranks"], json({4}));
  ASSERT_EQ(r.fixes.size(), 2u) << "the two that fit; the one predicted not to fit is left out";
  EXPECT_EQ(r.fixes[0].config["zero_optimization"]["offload_optimizer"]["device"], "cpu");
  EXPECT_EQ(r.fixes[0].config["train_micro_batch_size_per_gpu"], 4) << "the rest of the user's config stays";
  EXPECT_EQ(r.fixes[1].config, kUserConfig);
  EXPECT_EQ(r.fixes[1].args, std::vector<std::string>{"--activation-checkpointing"});
  // A fix that changes no key is the job's own config with its flags: no copy written.
  EXPECT_EQ(r.scenario["fixes"][0]["config"], "fix_1.json");
  EXPECT_EQ(r.scenario["fixes"][1]["config"], "ds_config.json");
  EXPECT_EQ(r.scenario["a"]["config"], "ds_config.json");
  EXPECT_EQ(r.failing_config, kUserConfig);
  EXPECT_EQ(r.scenario["grep"], "CUDA out of memory");
  EXPECT_EQ(r.scenario["from_log"]["evidence"][0]["line"], 7);
  // Issue 33: a catalogue grep line with its toy's size keeps only the message: the job's
  // scale-down prints its own size, which the log never showed.
  json sized = kOomTemplate;
  sized["grep"] = "Tried to allocate 1.86 GiB";
  EXPECT_EQ(zrepro::build_reproduction(diagnosis("zero-stage", "optimizer-partition-oom", {{"completed_steps", 5}}),
                                       "rep", "job.log", sized, kUserConfig, job(), kPlan)
                .scenario["grep"],
            "Tried to allocate");
  EXPECT_EQ(r.name, "rep");
  EXPECT_NE(r.readme.find("zrepro scenario run rep"), std::string::npos) << r.readme;
}

TEST(Reproduction, OomWithoutAFittingFixTriesTheTwoLowestPeaksAndSaysSo) {
  zrepro::PlanAnswer plan = kPlan;
  for (auto& f : plan.fixes) f.fits = false;
  const auto r = zrepro::build_reproduction(diagnosis("zero-stage", "zero2-params-dont-fit"), "rep", "job.log",
                                            kOomTemplate, kUserConfig, job(), plan);
  EXPECT_EQ(r.fixes.size(), 2u);
  bool said = false;
  for (const auto& n : r.notes) said = said || n.find("none of the usual fixes fits") != std::string::npos;
  EXPECT_TRUE(said);
}

TEST(Reproduction, OomNeedsTheModelAndACapacityButTakesTheLogsCapacity) {
  const auto d = diagnosis("zero-stage", "optimizer-partition-oom", {{"capacity_bytes", 42949672960LL}});
  try {
    zrepro::build_reproduction(d, "rep", "job.log", kOomTemplate, kUserConfig, job(std::nullopt), kPlan);
    FAIL() << "no --model";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--model"), std::string::npos) << e.what();
  }
  zrepro::JobSetup j = job();
  j.device_memory.reset();
  const auto r = zrepro::build_reproduction(d, "rep", "job.log", kOomTemplate, kUserConfig, j, kPlan);
  EXPECT_EQ(r.scenario["args"][3], "42949672960");
  EXPECT_THROW(zrepro::build_reproduction(diagnosis("zero-stage", "optimizer-partition-oom"), "rep", "job.log",
                                          kOomTemplate, kUserConfig, j, kPlan),
               ConfigError)
      << "no capacity given and none in the log";
  EXPECT_THROW(zrepro::build_reproduction(d, "rep", "job.log", kOomTemplate, kUserConfig, job(), zrepro::PlanAnswer{}), ConfigError)
      << "no plan: no fixes to verify";
}

const json kBatchTemplate = json::parse(R"({"name": "mismatched-batch-triple", "symptom": "refused", "grep": "g",
  "expect": "refused", "a": {"config": "ds_config.json"}, "b": {"config": "fixed.json"},
  "args": ["--steps", "2"], "ranks": [1]})");

TEST(Reproduction, BatchTripleFixSolvesForAccumulationAtTheLogsWorldSize) {
  const json cfg = {{"train_batch_size", 64}, {"train_micro_batch_size_per_gpu", 4}, {"gradient_accumulation_steps", 4}};
  const auto d = diagnosis("config", "mismatched-batch-triple", {{"world_size", 2}});
  zrepro::JobSetup none{std::nullopt, std::nullopt, std::nullopt, {}};
  const auto r = zrepro::build_reproduction(d, "rep", "job.log", kBatchTemplate, cfg, none, zrepro::PlanAnswer{});
  EXPECT_EQ(r.scenario["ranks"], json({2}));
  ASSERT_EQ(r.fixes.size(), 1u);
  EXPECT_EQ(r.fixes[0].config["gradient_accumulation_steps"], 8);  // 64 = 4 x 8 x 2
  EXPECT_EQ(r.scenario["expect"], "refused");
  EXPECT_EQ(r.scenario["args"], json({"--steps", "2"})) << "not an OOM: the catalogue's toy";
  // Not divisible: drop train_batch_size and let DeepSpeed derive it.
  json odd = cfg;
  odd["train_batch_size"] = 63;
  const auto r2 = zrepro::build_reproduction(d, "rep", "job.log", kBatchTemplate, odd, none, zrepro::PlanAnswer{});
  EXPECT_FALSE(r2.fixes[0].config.contains("train_batch_size"));
}

TEST(Reproduction, NumericsAndPinningFixesEditTheConfig) {
  json tmpl = kBatchTemplate;
  const json fp16 = {{"fp16", {{"enabled", true}}}, {"train_micro_batch_size_per_gpu", 2}};
  const auto r = zrepro::build_reproduction(diagnosis("numerics", "fp16-overflow"), "rep", "l", tmpl, fp16, job(), zrepro::PlanAnswer{});
  EXPECT_FALSE(r.fixes[0].config.contains("fp16"));
  EXPECT_EQ(r.fixes[0].config["bf16"]["enabled"], true);

  const json pinned = {{"zero_optimization", {{"stage", 2}, {"offload_optimizer", {{"device", "cpu"}, {"pin_memory", true}}}}}};
  const auto p = zrepro::build_reproduction(diagnosis("pinned-memory", "memlock-limit"), "rep", "l", tmpl, pinned, job(), zrepro::PlanAnswer{});
  EXPECT_EQ(p.fixes[0].config["zero_optimization"]["offload_optimizer"]["pin_memory"], false);
  EXPECT_FALSE(p.fixes[0].config["zero_optimization"].contains("offload_param")) << "only the sections present";
  // No offload section: nothing in the config to change, and the template's fix is another config.
  EXPECT_THROW(zrepro::build_reproduction(diagnosis("pinned-memory", "memlock-limit"), "rep", "l", tmpl,
                                          json{{"zero_optimization", {{"stage", 2}}}}, job(), zrepro::PlanAnswer{}),
               ConfigError);
}

TEST(Reproduction, ACauseOutsideTheConfigKeepsTheCataloguesInjectionAndFixFlags) {
  const json tmpl = json::parse(R"({"name": "mismatched-collectives", "symptom": "hang", "grep": "Watchdog",
    "a": {"config": "ds_config.json", "args": ["--inject", "gas-mismatch:1"]}, "b": {"config": "ds_config.json", "args": []},
    "args": ["--steps", "3", "--comm-timeout", "3"], "ranks": [2]})");
  const auto r = zrepro::build_reproduction(diagnosis("communication", "mismatched-collectives"), "rep", "l", tmpl,
                                            kUserConfig, job(std::nullopt, 2), zrepro::PlanAnswer{});
  EXPECT_EQ(r.scenario["a"]["args"], json({"--inject", "gas-mismatch:1"}));
  ASSERT_EQ(r.fixes.size(), 1u);
  EXPECT_EQ(r.fixes[0].config, kUserConfig);
  EXPECT_TRUE(r.fixes[0].args.empty());
  EXPECT_NE(r.fixes[0].name.find("gas-mismatch"), std::string::npos);
  // [Note: a mechanism is not a fix]: side A's own config, not a copy of it as a "fix".
  EXPECT_EQ(r.scenario["fixes"][0]["config"], "ds_config.json");
  EXPECT_NE(r.readme.find("reproduces the mechanism; the fix lies in the job's code or data"), std::string::npos)
      << r.readme;
  EXPECT_FALSE(r.scenario.contains("expect")) << "the template's default";
}

TEST(Reproduction, NoScenarioNoReproduction) {
  EXPECT_THROW(zrepro::build_reproduction(diagnosis("", ""), "rep", "l", kOomTemplate, kUserConfig, job(), kPlan),
               ConfigError);
}

TEST(Reproduction, TheFolderIsWrittenWholeAndNeverOverwritten) {
  const auto r = zrepro::build_reproduction(diagnosis("zero-stage", "optimizer-partition-oom"), "rep", "job.log",
                                            kOomTemplate, kUserConfig, job(), kPlan);
  const std::string base = (std::filesystem::temp_directory_path() / "zrepro_reproduction_test").string();
  std::filesystem::remove_all(base);
  std::filesystem::create_directories(base);
  zrepro::write_reproduction(r, base + "/rep/");  // a trailing slash names the same folder
  for (const char* f : {"scenario.json", "ds_config.json", "fix_1.json", "README.md"})
    EXPECT_TRUE(std::filesystem::exists(base + "/rep/" + f)) << f;
  EXPECT_FALSE(std::filesystem::exists(base + "/rep/fix_2.json")) << "fix 2 is a run flag on the job's own config";
  std::ifstream in(base + "/rep/fix_1.json");
  EXPECT_EQ(json::parse(in), r.fixes[0].config);
  EXPECT_THROW(zrepro::write_reproduction(r, base + "/rep"), ConfigError);
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(base)) entries += 1 + 0 * e.path().empty();
  EXPECT_EQ(entries, 1) << "no temporary folder left behind";
  std::filesystem::remove_all(base);
}

}  // namespace

namespace {

// [Note: a reproduction this machine can run]
TEST(Reproduction, RankCountsAboveTheCoresRunVirtualOrCappedByWhatTheSymptomNeeds) {
  json oom = {{"ranks", {1, 64}}, {"from_log", {{"checkpoint", "zero-stage"}}}};
  // Enough cores: nothing changes.
  EXPECT_TRUE(zrepro::run_on_this_machine(oom, 64).ab_flags.empty());
  EXPECT_FALSE(zrepro::run_on_this_machine(oom, 64).ranks.has_value());
  // A memory symptom at 64 ranks on 2 cores: virtual ranks, every rank count kept.
  const zrepro::MachineRun memory = zrepro::run_on_this_machine(oom, 2);
  EXPECT_EQ(memory.ab_flags, std::vector<std::string>{"--virtual"});
  EXPECT_FALSE(memory.ranks.has_value());
  EXPECT_NE(memory.note.find("64 ranks run as virtual ranks"), std::string::npos) << memory.note;
  // A hang needs real processes: capped at the cores, at least 2.
  json hang = {{"ranks", {2, 16}}, {"from_log", {{"checkpoint", "communication"}}}};
  EXPECT_EQ(zrepro::run_on_this_machine(hang, 4).ranks.value_or(""), "2,4");
  EXPECT_EQ(zrepro::run_on_this_machine(hang, 1).ranks.value_or(""), "2,2");
  EXPECT_TRUE(zrepro::run_on_this_machine(hang, 4).ab_flags.empty());
  // A symptom in time (throughput, a wait share) too; one in bytes is memory.
  json slow = {{"ranks", {8}}, {"expect", "less:tokens_per_s:0.6"}, {"from_log", {{"checkpoint", "offload-target"}}}};
  EXPECT_EQ(zrepro::run_on_this_machine(slow, 2).ranks.value_or(""), "2");
  json bytes = {{"ranks", {8}}, {"expect", "more:peak_bytes_max:1.2"}, {"from_log", {{"checkpoint", "zero-stage"}}}};
  EXPECT_EQ(zrepro::run_on_this_machine(bytes, 2).ab_flags, std::vector<std::string>{"--virtual"});
}

// [Note: a reproduction the log tells apart]
TEST(Reproduction, TheScenariosALogLeavesOpenAreItsOwnAndItsCatalogueAlternativesUnlessStrong) {
  const std::vector<std::string> catalogue = {"moe-divergent-gathers", "rank0-eval-hang", "straggler", "zero3-live-params"};
  zrepro::Diagnosis d = diagnosis("communication", "rank0-eval-hang");
  d.alternatives = {"moe-divergent-gathers: one SeqNum, different sizes", "slow-preprocessing: not a scenario"};
  EXPECT_EQ(zrepro::open_scenarios(d, catalogue), std::vector<std::string>{"rank0-eval-hang"}) << "strong";
  d.confidence = "likely";
  EXPECT_EQ(zrepro::open_scenarios(d, catalogue), (std::vector<std::string>{"rank0-eval-hang", "moe-divergent-gathers"}));
  d.scenario.clear();
  EXPECT_EQ(zrepro::open_scenarios(d, catalogue), std::vector<std::string>{"moe-divergent-gathers"});
  // An OOM reproduces the job's own config at scale with the planner's fixes: its
  // alternatives do not change the reproduction, so nothing is left open.
  zrepro::Diagnosis oom = diagnosis("zero-stage", "zero3-live-params");
  oom.confidence = "likely", oom.alternatives = {"first-batch-activations: the OOM on the first forward"};
  EXPECT_EQ(zrepro::open_scenarios(oom, catalogue), std::vector<std::string>{"zero3-live-params"});
}

}  // namespace
