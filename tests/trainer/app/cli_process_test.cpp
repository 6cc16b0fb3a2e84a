// The zrepro binary as a user runs it: exit codes, error messages naming the
// flag/key/file, summary.json and metrics.jsonl contents.
#include <gtest/gtest.h>

#include "trainer/report/ab_doc.h"
#include "tests/support/process.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

using json = nlohmann::json;

namespace {

using Result = zrepro_test::Process;
Result cli(const std::string& args) { return zrepro_test::zrepro_cmd(args); }

std::string src(const std::string& rel) { return std::string(ZREPRO_SOURCE_DIR).append("/") + rel; }

std::string tmpdir(const std::string& name) { return zrepro_test::fresh_dir("cli_" + name); }

std::string write(const std::string& dir, const std::string& text) {
  std::string p = dir + "/ds_config.json";
  std::ofstream(p) << text;
  return p;
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

}  // namespace

TEST(Cli, RunWritesSummaryAndMetrics) {
  std::string out = tmpdir("run");
  Result r = cli("run --config " + src("configs/examples/stage0_fp32.json") + " --model tiny --steps 12 --out " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("[deepspeed] step=10, skipped=0, lr=["), std::string::npos) << r.output;
  // The closing lines: the device peak, when it came and what filled it; the pages.
  EXPECT_NE(r.output.find("[zrepro] rank 0 device peak "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[zrepro] pages: " + out + "/report.html"), std::string::npos) << r.output;
  json s = read_json(out + "/summary.json");
  EXPECT_EQ(s["status"], "ok");
  EXPECT_EQ(s["world_size"], 1);
  EXPECT_EQ(s["zero_stage"], 0);
  EXPECT_EQ(s["model"]["params"], 118528);
  EXPECT_EQ(s["batch"]["global"], 8);
  EXPECT_EQ(s["steps"].size(), 12u);
  for (const char* k : {"step", "loss", "grad_norm", "loss_scale", "skipped", "lr"}) EXPECT_TRUE(s["steps"][0].contains(k)) << k;
  for (const char* k : {"step_s_median", "tokens_per_s", "breakdown_s"}) EXPECT_TRUE(s["time"].contains(k)) << k;
  for (const char* k : {"memory", "comm", "failure", "effective_config"}) EXPECT_TRUE(s.contains(k)) << k;
  EXPECT_TRUE(s["failure"].is_null());
  EXPECT_EQ(s["memory"]["ranks"][0]["by_category"]["params"], 118528 * 4);
  EXPECT_GT(s["time"]["tokens_per_s"].get<double>(), 0);
  std::ifstream metrics(out + "/metrics.jsonl");
  int lines = 0;
  for (std::string line; std::getline(metrics, line); ++lines) EXPECT_EQ(json::parse(line)["step"], lines);
  EXPECT_EQ(lines, 12);
  EXPECT_FALSE(std::filesystem::exists(out + "/metrics.jsonl.partial"));
  // report.html: the same run drawn (status, loss polyline, memory bars, config table).
  std::ifstream html(out + "/report.html");
  const std::string page((std::istreambuf_iterator<char>(html)), std::istreambuf_iterator<char>());
  EXPECT_NE(page.find("<span class='status'>ok</span>"), std::string::npos);
  EXPECT_NE(page.find("<polyline"), std::string::npos);
  EXPECT_NE(page.find("aria-label='memory per rank'"), std::string::npos);
  EXPECT_NE(page.find("train_micro_batch_size_per_gpu"), std::string::npos);
}

TEST(Cli, BadConfigExitsTwoWithAConfigErrorSummary) {
  std::string out = tmpdir("bad");
  std::string cfg = write(out, "{\"train_micro_batch_size_per_gpu\": 2, \"zero_optimization\": {\"stage\": 5}}");
  Result r = cli("run --config " + cfg + " --steps 2 --out " + out);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("zero_optimization.stage: got 5, expected 0, 1, 2 or 3"), std::string::npos) << r.output;
  json s = read_json(out + "/summary.json");
  EXPECT_EQ(s["status"], "config_error");
  EXPECT_EQ(s["failure"]["kind"], "config_error");
}

// Issue 61 item 5, [Note: a user's file is bounded]: a config nested 100,000 deep ended
// `zrepro run` in SIGSEGV (its summary's copy of the config was dumped recursively).
TEST(Cli, AConfigNestedPastAnyConfigIsRefusedNotACrash) {
  const std::string out = tmpdir("deep61");
  const std::string cfg = write(out, "{\"train_micro_batch_size_per_gpu\": 2, \"x\": " + std::string(100000, '[') +
                                         std::string(100000, ']') + "}");
  const Result r = cli("run --config " + cfg + " --steps 1 --out " + out + "/o");
  EXPECT_EQ(r.code, 2) << r.output.substr(0, 2000);
  EXPECT_NE(r.output.find("nested deeper than 64 levels"), std::string::npos) << r.output.substr(0, 2000);
  EXPECT_EQ(read_json(out + "/o/summary.json")["status"], "config_error");
}

TEST(Cli, MalformedJsonAndMissingFileAndBadFlagsExitTwo) {
  std::string dir = tmpdir("malformed");
  Result r = cli("run --config " + write(dir, "{\n \"train_batch_size\": 8\n \"x\": 1}") + " --steps 1");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("line 3, column"), std::string::npos) << r.output;
  r = cli("run --config /nonexistent/ds.json");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("/nonexistent/ds.json"), std::string::npos);
  r = cli("run --config " + src("configs/examples/stage0_fp32.json") + " --steps zero");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("steps"), std::string::npos) << r.output;
  r = cli("run --config " + src("configs/examples/stage0_fp32.json") + " --precision fp8");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--precision"), std::string::npos) << r.output;
  r = cli("run --config " + src("configs/examples/stage0_fp32.json") + " --device tpu");
  EXPECT_EQ(r.code, 2);
  r = cli("frobnicate");
  EXPECT_EQ(r.code, 2);
  // Issue 61: --memory-log never truncates an input (the run's own config) or a file zrepro
  // did not write.
  const std::string cfg = write(dir, R"({"train_batch_size": 4, "train_micro_batch_size_per_gpu": 4})");
  const std::string before = zrepro_test::read_text(cfg);
  r = cli("run --config " + cfg + " --steps 1 --memory-log " + cfg);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--memory-log " + cfg + ": that is one of this run's inputs"), std::string::npos) << r.output;
  EXPECT_EQ(zrepro_test::read_text(cfg), before);
  std::ofstream(dir + "/notes.txt") << "my notes";
  r = cli("run --config " + cfg + " --steps 1 --memory-log " + dir + "/notes.txt");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(zrepro_test::read_text(dir + "/notes.txt"), "my notes");
}

TEST(Cli, LossScaleAtMinimumExitsFiveWithDeepSpeedLines) {
  std::string out = tmpdir("fp16");
  std::string cfg = write(out, R"({"train_micro_batch_size_per_gpu": 2,
      "fp16": {"enabled": true, "initial_scale_power": 3, "hysteresis": 1}})");
  Result r = cli("run --config " + cfg + " --steps 20 --inject inf-grad:0:2- --out " + out);
  EXPECT_EQ(r.code, 5) << r.output;
  EXPECT_NE(r.output.find("[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 8, reducing to 4"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("Current loss scale already at minimum"), std::string::npos) << r.output;
  json s = read_json(out + "/summary.json");
  EXPECT_EQ(s["status"], "diverged");
  std::ifstream html(out + "/report.html");
  const std::string page((std::istreambuf_iterator<char>(html)), std::istreambuf_iterator<char>());
  EXPECT_NE(page.find("class='fail'"), std::string::npos);  // the failure box
  EXPECT_NE(page.find("<circle"), std::string::npos);       // skipped steps marked
  // Issue 14: a failed run leaves its trace up to the failure.
  const json trace = read_json(out + "/trace.json");
  EXPECT_FALSE(trace.empty());
  EXPECT_EQ(s["failure"]["kind"], "numerical");
  EXPECT_EQ(s["skipped_steps"], 3);
  EXPECT_TRUE(s["steps"][2]["skipped"].get<bool>());
  EXPECT_TRUE(s["steps"][2]["grad_norm"].is_null());
}

TEST(Cli, ConfigCommandPrintsEveryValueWithItsSource) {
  Result r = cli("config --config " + src("configs/examples/hf_auto_zero2.json") +
                    " --world-size 4 --micro-batch 2 --lr 3e-4 --precision bf16");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("train_batch_size ...."), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" 8   [auto: world_size * micro * gas]"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("optimizer.params.lr"), std::string::npos);
  EXPECT_NE(r.output.find("0.0003   [auto: from --lr]"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("4096   [auto: h*h with model hidden size h = 64]"), std::string::npos) << r.output;
  r = cli("config --config " + src("configs/examples/hf_auto_zero2.json") + " --json");
  ASSERT_EQ(r.code, 0) << r.output;
  json j = json::parse(r.output);
  EXPECT_EQ(j["resolved"]["train_micro_batch_size_per_gpu"], 8);
  EXPECT_EQ(j["resolved"]["zero_optimization"]["stage"], 2);
  bool found = false;
  for (const auto& e : j["entries"])
    if (e["key"] == "gradient_clipping") { found = true; EXPECT_EQ(e["source"], "auto"); }
  EXPECT_TRUE(found);
}

// [Note: "auto" as Accelerate fills it]: the same TRL accelerate config trains under
// `zrepro run` with each "auto" said, and Accelerate's refusals exit 2 with their words.
TEST(Cli, RunUnderAnAccelerateConfigSaysWhoFilledEachAuto) {
  const std::string yaml = src("configs/examples/accelerate/trl_deepspeed_zero3.yaml");
  const std::string out = zrepro_test::fresh_dir("accelerate_run");
  Result r = cli("run --accelerate-config " + yaml + " --micro-batch 2 --steps 2 --print-config --out " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("[zrepro] launcher accelerate (" + yaml + "):"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("world_size=1 zero_stage=3 precision=bf16"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[auto: the batch_size of the DataLoader given to accelerator.prepare() (--micro-batch)]"),
            std::string::npos)
      << r.output;
  const json s = json::parse(zrepro_test::read_text(out + "/summary.json"));
  EXPECT_EQ(s["status"], "ok");
  r = cli("run --accelerate-config " + yaml + " --steps 1");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("give that batch size as --micro-batch"), std::string::npos) << r.output;
  r = cli("config --launcher accelerate --config " + src("configs/examples/hf_auto_zero2.json") + " --micro-batch 2");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("`optimizer.params.betas` not found in kwargs"), std::string::npos) << r.output;
  r = cli("config --launcher deepspeed --config " + src("configs/examples/hf_auto_zero2.json"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--launcher: got \"deepspeed\", expected trainer"), std::string::npos) << r.output;
}

// Issue 14: input that used to be accepted silently or to crash the error path.
TEST(Cli, NonsenseIsRefusedWithExitTwoAndASummary) {
  const std::string out = tmpdir("nonsense");
  const std::string cfg = write(out, R"({"train_micro_batch_size_per_gpu": 2})");
  // An injection past the run's steps would have no effect.
  Result r = cli("run --config " + cfg + " --steps 3 --inject inf-grad:0:7 --out " + out + "/o1");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("past the run's --steps 3"), std::string::npos) << r.output;
  // A micro-batch past 32-bit indexing: exit 2 naming the key, not a LibTorch trace.
  r = cli("run --config " + cfg + " --steps 1 --micro-batch 4294967297 --out " + out + "/o2");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("train_micro_batch_size_per_gpu: got 4294967297"), std::string::npos) << r.output;
  // A byte that is not UTF-8 in the config: quoted in the error, the summary still written.
  const std::string bad = out + "/latin1.json";
  std::ofstream(bad) << "{\"train_micro_batch_size_per_gpu\": 2, \"optimizer\": {\"type\": \"Ad\xe9m\"}}";
  r = cli("run --config " + bad + " --steps 1 --out " + out + "/o3");
  EXPECT_EQ(r.code, 2) << r.output;
  const json s = read_json(out + "/o3/summary.json");
  EXPECT_EQ(s["status"], "config_error");
  // --ranks with a broken config: refused before mpirun starts anything.
  const std::string dup = write(out, R"({"train_micro_batch_size_per_gpu": 2, "train_micro_batch_size_per_gpu": 4})");
  r = cli("run --ranks 2 --config " + dup + " --steps 1 --out " + out + "/o4");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("Duplicate keys"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("mpirun"), std::string::npos) << r.output;
  EXPECT_EQ(read_json(out + "/o4/summary.json")["status"], "config_error");
  // A vocabulary past 32-bit token ids: exit 2 naming it (it once reached std::bad_alloc
  // in the summary writer itself, which then wrote nothing).
  const std::string good = write(tmpdir("nonsense_sizes"), R"({"train_micro_batch_size_per_gpu": 2})");
  r = cli("run --config " + good + " --steps 1 --vocab 1099511627776 --out " + out + "/o5");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("vocab 1099511627776 is above 2147483647"), std::string::npos) << r.output;
  EXPECT_EQ(read_json(out + "/o5/summary.json")["status"], "config_error");
  // A model larger than any host's address space (175 TiB of parameters: past x86-64's
  // 128 TiB, so no overcommit setting lets it through), within the model bounds: a host
  // OOM, exit 13 (not the device's 3: issue 60), with its summary, not LibTorch's allocator
  // trace as an internal error.
  r = cli("run --config " + good + " --steps 1 --layers 4 --hidden 1000000 --out " + out + "/o6");
  EXPECT_EQ(r.code, 13) << r.output;
  EXPECT_EQ(r.output.find("internal error"), std::string::npos) << r.output;
  const json host = read_json(out + "/o6/summary.json");
  EXPECT_EQ(host["status"], "host_oom");
  EXPECT_EQ(host["failure"]["kind"], "host-oom");
  EXPECT_EQ(host["failure"]["phase"], "host");
}

TEST(Cli, Fp32DivergenceSaysNothingOfFp16) {
  const std::string out = tmpdir("fp32nan");
  const std::string cfg = write(out, R"({"train_micro_batch_size_per_gpu": 2,
      "optimizer": {"type": "AdamW", "params": {"lr": 0.001}}})");
  Result r = cli("run --config " + cfg + " --steps 4 --inject inf-grad:0:1 --out " + out);
  EXPECT_EQ(r.code, 5) << r.output;
  const json s = read_json(out + "/summary.json");
  EXPECT_EQ(s["failure"]["kind"], "numerical");
  const std::string hint = s["failure"]["hint"];
  EXPECT_EQ(hint.find("fp16"), std::string::npos) << hint;
  EXPECT_NE(std::string(s["failure"]["message"]).find("at step 2"), std::string::npos) << s["failure"]["message"];
}

// Issue 14: two runs on one --out never mix their files; an earlier run's are moved aside.
TEST(Cli, OneRunAtATimePerOutFolder) {
  const std::string out = tmpdir("lock");
  const std::string cfg = write(out, R"({"train_micro_batch_size_per_gpu": 2})");
  const std::string o = out + "/o";
  // A first run holds the folder for a few seconds.
  const std::string first = "timeout 120 " + std::string(ZREPRO_BIN).append(" run --config ") + cfg +
                            " --model tiny --steps 800 --out " + o + " > " + out + "/first.log 2>&1 & echo $!";
  std::string pid = zrepro_test::shell(first).output;
  pid.erase(pid.find_last_not_of(" \n") + 1);
  ASSERT_FALSE(pid.empty());
  for (int i = 0; i < 200 && !std::filesystem::exists(o + "/.zrepro.lock"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  Result second = cli("run --config " + cfg + " --steps 2 --out " + o);
  EXPECT_EQ(second.code, 2) << second.output;
  EXPECT_NE(second.output.find("another zrepro run (pid "), std::string::npos) << second.output;
  zrepro_test::shell("for i in $(seq 1200); do kill -0 " + pid + " 2>/dev/null || break; sleep 0.1; done");
  const json s = read_json(o + "/summary.json");
  EXPECT_EQ(s["status"], "ok");
  EXPECT_EQ(s["steps"].size(), 800u);  // the first run's, whole
  std::ifstream m(o + "/metrics.jsonl");
  int lines = 0;
  for (std::string line; std::getline(m, line); ++lines) EXPECT_TRUE(json::accept(line)) << line;
  EXPECT_GT(lines, 0);
  // A later run moves the first run's files aside instead of writing beside them: here
  // also a hang's report and flight dumps, as a hung run records them in its manifest.
  std::filesystem::create_directories(o + "/flight");
  std::ofstream(o + "/hang_report.json") << "{}";
  std::ofstream(o + "/.zrepro-outputs", std::ios::app) << "flight\nhang_report.json\n";
  Result third = cli("run --config " + cfg + " --steps 2 --out " + o);
  EXPECT_EQ(third.code, 0) << third.output;
  EXPECT_FALSE(std::filesystem::exists(o + "/hang_report.json"));
  EXPECT_FALSE(std::filesystem::exists(o + "/flight"));
  EXPECT_TRUE(std::filesystem::exists(o + "/previous/hang_report.json"));
  EXPECT_EQ(read_json(o + "/previous/summary.json")["steps"].size(), 800u);
  EXPECT_EQ(read_json(o + "/summary.json")["steps"].size(), 2u);
}

// [Note: only zrepro's files move] (trainer/runtime/out_dir.h): a folder of the user's with a
// name a run writes (inputs/, previous/) is never moved or deleted: the run refuses with
// exit 2, naming it; the user's other files stay where they are through every rotation.
TEST(Cli, TheUsersFilesInOutAreNeverMovedOrDeleted) {
  const std::string out = tmpdir("userdata");
  const std::string cfg = write(out, R"({"train_micro_batch_size_per_gpu": 2})");
  const std::string o = out + "/o";
  std::filesystem::create_directories(o + "/inputs");
  std::ofstream(o + "/inputs/keep.txt") << "mine";
  std::ofstream(o + "/notes.txt") << "mine too";
  const Result first = cli("run --config " + cfg + " --model tiny --steps 2 --out " + o);
  EXPECT_EQ(first.code, 2) << first.output;
  EXPECT_NE(first.output.find("\"inputs\" is a folder no zrepro run recorded writing"), std::string::npos) << first.output;
  EXPECT_EQ(zrepro_test::read_text(o + "/inputs/keep.txt"), "mine");
  std::filesystem::rename(o + "/inputs", out + "/inputs");
  for (int i = 0; i < 3; ++i) {  // three runs: two rotations, the second replacing previous/
    const Result r = cli("run --config " + cfg + " --model tiny --steps 2 --out " + o);
    EXPECT_EQ(r.code, 0) << r.output;
  }
  EXPECT_EQ(zrepro_test::read_text(o + "/notes.txt"), "mine too");
  EXPECT_TRUE(std::filesystem::exists(o + "/previous/summary.json"));
  // A folder the user adds later under an output name is theirs too.
  std::filesystem::create_directories(o + "/flight");
  std::ofstream(o + "/flight/keep.txt") << "mine";
  Result r = cli("run --config " + cfg + " --model tiny --steps 2 --out " + o);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(zrepro_test::read_text(o + "/flight/keep.txt"), "mine");
  std::filesystem::remove_all(o + "/flight");
  // A previous/ of the user's is not replaced.
  std::filesystem::remove_all(o + "/previous");
  std::filesystem::create_directories(o + "/previous");
  std::ofstream(o + "/previous/keep.txt") << "mine";
  r = cli("run --config " + cfg + " --model tiny --steps 2 --out " + o);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("\"previous\" holds no zrepro manifest"), std::string::npos) << r.output;
  EXPECT_EQ(zrepro_test::read_text(o + "/previous/keep.txt"), "mine");
}

// Issue 33: the newer commands end with an exit code on odd input, never abort (134):
// check of a failed run and of a malformed or missing baseline (refused before any run),
// diagnose --json of non-UTF-8 bytes, config --json of a non-UTF-8 file name, a baseline
// to a read-only place (exit 12), --write-scenario "".
// Issue 61 item 3, [Note: only zrepro's files move]: a file the user put in OUT/previous/
// was deleted when the next run replaced previous/; now that run refuses, naming it.
TEST(Cli, AUsersFileInPreviousIsNeverDeleted) {
  const std::string out = tmpdir("previous61");
  const std::string cfg = write(out, R"({"train_micro_batch_size_per_gpu": 2})");
  const std::string run = "run --config " + cfg + " --model tiny --steps 1 --out " + out + "/o";
  ASSERT_EQ(cli(run).code, 0);
  ASSERT_EQ(cli(run).code, 0);  // the first run's files now in o/previous/
  ASSERT_TRUE(std::filesystem::exists(out + "/o/previous/summary.json"));
  std::ofstream(out + "/o/previous/my_notes.txt") << "mine";
  const Result third = cli(run);
  EXPECT_EQ(third.code, 2) << third.output;
  EXPECT_NE(third.output.find("\"previous/my_notes.txt\" is not one of the earlier run's files"), std::string::npos)
      << third.output;
  EXPECT_EQ(zrepro_test::read_text(out + "/o/previous/my_notes.txt"), "mine");
  std::filesystem::remove(out + "/o/previous/my_notes.txt");
  EXPECT_EQ(cli(run).code, 0) << "previous/ holding only the earlier run's files is replaced";
}

TEST(Cli, OddInputToTheNewerCommandsEndsWithAnExitCodeNotAnAbort) {
  const std::string out = tmpdir("odd33");
  const std::string cfg = write(out, R"({"train_micro_batch_size_per_gpu": 2})");
  Result r = cli("run --config " + cfg + " --model tiny --steps 2 --device-memory 1MB --out " + out + "/oom");
  ASSERT_EQ(r.code, 3) << r.output;
  r = cli("check --run " + out + "/oom --save " + out + "/oom_base.json");
  EXPECT_EQ(r.code, 0) << r.output;
  r = cli("run --config " + cfg + " --model tiny --steps 2 --out " + out + "/ok");
  ASSERT_EQ(r.code, 0) << r.output;
  r = cli("check --run " + out + "/ok --save " + out + "/base.json");
  ASSERT_EQ(r.code, 0) << r.output;
  r = cli("check --run " + out + "/oom --baseline " + out + "/base.json");
  EXPECT_EQ(r.code, 11) << r.output;  // the failure is a regression of the good baseline
  json bad = read_json(out + "/base.json");
  bad["memory"]["ranks"][0]["by_category"]["params"] = nullptr;
  std::ofstream(out + "/bad.json") << bad.dump();
  r = cli("check --run " + out + "/ok --baseline " + out + "/bad.json");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("memory.ranks[].by_category.params"), std::string::npos) << r.output;
  const auto t0 = std::chrono::steady_clock::now();
  r = cli("check --baseline " + out + "/nonexistent.json -- --config " + cfg + " --model tiny --steps 100000");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30) << "the run started";
  r = zrepro_test::shell("mkdir -p " + out + "/ro && chmod 555 " + out + "/ro && " + std::string(ZREPRO_BIN) +
                         " check --run " + out + "/ok --save " + out + "/ro/b.json 2>&1; echo \"exit=$?\"");
  if (::geteuid() != 0) {  // root writes through a read-only mode
    EXPECT_NE(r.output.find("exit=12"), std::string::npos) << r.output;
  }
  EXPECT_EQ(r.output.find("exit=134"), std::string::npos) << r.output;
  std::ofstream(out + "/latin1.log", std::ios::binary)
      << "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB \xe9\xff\xfe\n";
  r = cli("diagnose --json " + out + "/latin1.log");
  EXPECT_TRUE(r.code == 0 || r.code == 7) << r.code << "\n" << r.output;
  EXPECT_TRUE(json::accept(r.output.substr(r.output.find('{')))) << r.output;
  r = zrepro_test::shell("cp " + cfg + " " + out + "/$(printf 'c\\377fg.json') && cd " + out + " && " +
                         std::string(ZREPRO_BIN).append(" config --json --config $(printf 'c\\377fg.json') 2>&1; echo \"exit=$?\""));
  EXPECT_NE(r.output.find("exit=0"), std::string::npos) << r.output;
  r = cli("diagnose " + out + "/latin1.log --config " + cfg + " --write-scenario \"\"");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--write-scenario: got \"\""), std::string::npos) << r.output;
  // --write-scenario's prerequisites are checked before the log is diagnosed: a folder
  // that exists, and --run without it, are refused first (no diagnosis printed).
  r = cli("diagnose " + out + "/latin1.log --config " + cfg + " --write-scenario " + out);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("exists; give a new folder"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.rfind("[zrepro diagnose] error: --write-scenario", 0), 0u) << "diagnosed first:\n" << r.output;
  r = cli("diagnose " + out + "/latin1.log --run");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--run: needs --write-scenario"), std::string::npos) << r.output;
}

// Issue 33, issue 59 item 4 ([Note: a log read as a stream], trainer/diagnose/evidence.h):
// diagnose streams a log line by line and holds none of it: every line of a 40 MB gzip is
// read (nothing said about a part left out), the failure at its end is found, and a failure
// in its middle too (the old reader kept the first eighth and last seven eighths of
// --read-limit and missed it); a damaged gzip names zlib's error (read before gzclose
// freed it).
TEST(Cli, DiagnoseReadsAHugeLogInBoundedMemoryAndNamesADamagedGzip) {
  const std::string out = tmpdir("diaglog");
  const Result made = zrepro_test::shell(
      "python3 -c \"import gzip\nwith gzip.open('" + out + "/big.log.gz', 'wb', 1) as f:\n"
      " line = b'[rank0] step progress ' + b'.' * 100 + b'\\n'\n for _ in range(200000): f.write(line)\n"
      " f.write(b'OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 1, reducing to 1\\n')\n"
      " for _ in range(200000): f.write(line)\n"
      " f.write(b'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
      "of 79.15 GiB of which 1.50 GiB is free.\\n')\" 2>&1; echo done");
  ASSERT_NE(made.output.find("done"), std::string::npos) << made.output;
  Result r = zrepro_test::shell(std::string(ZREPRO_BIN).append(" diagnose --json --read-limit 4MiB ") + out +
                                "/big.log.gz 2>&1");
  ASSERT_NE(r.output.find('{'), std::string::npos) << r.output.substr(0, 2000);
  const json d = json::parse(r.output.substr(r.output.find('{')));
  EXPECT_GT(d["log_bytes"].get<int64_t>(), int64_t{40} << 20);
  EXPECT_FALSE(d.contains("log_read")) << d.dump();  // all of it was read
  EXPECT_NE(d.dump().find("out of memory"), std::string::npos) << "the failure at the end was not read";
  EXPECT_NE(d.dump().find("OVERFLOW! Rank 0"), std::string::npos) << "the middle was not read";
  zrepro_test::shell("head -c 20000 " + out + "/big.log.gz > " + out + "/cut.log.gz");
  r = cli("diagnose " + out + "/cut.log.gz");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("is a damaged gzip file ("), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("unexpected end of file)"), std::string::npos) << r.output;
}

// Issue 33 ([Note: the emulated device lives in host memory] in trainer/app/run.cpp): a
// run on the CPU-emulated device whose planned bytes exceed this host's available memory
// (each allocation small enough to succeed, the kernel's OOM killer part-way: exit 137,
// no summary) is refused before its first allocation: exit 3, phase host, the figures.
// (ulimit -v guards the machine should the refusal ever not come; not under
// AddressSanitizer, whose shadow memory needs terabytes of address space.)
TEST(Cli, ARunLargerThanThisHostIsRefusedBeforeItAllocates) {
  const std::string out = tmpdir("hostmem");
  const std::string cfg = write(out, R"({"train_micro_batch_size_per_gpu": 2})");
#if defined(__SANITIZE_ADDRESS__)
  const std::string guard;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  const std::string guard;
#else
  const std::string guard = "ulimit -v 16000000; ";
#endif
#else
  const std::string guard = "ulimit -v 16000000; ";
#endif
  const Result r = zrepro_test::shell(guard + std::string(ZREPRO_BIN).append(" run --config ") + cfg +
                                      " --model tiny --layers 4000 --hidden 2048 --steps 1 --out " + out +
                                      "/o 2>&1; echo \"exit=$?\"");
  EXPECT_NE(r.output.find("exit=13"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("of this host's memory"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("available (MemAvailable)"), std::string::npos) << r.output;
  const json s = read_json(out + "/o/summary.json");
  EXPECT_EQ(s["status"], "host_oom");
  EXPECT_EQ(s["failure"]["phase"], "host");
  EXPECT_NE(s["failure"]["hint"].get<std::string>().find("--device-memory"), std::string::npos);
}

// Issue 33: diagnose on logs that are not plain text: a binary file is refused (exit 2),
// never "memlock-limit (strong)" with raw bytes echoed; an empty log says so; a UTF-16 log
// (as Windows tools write) is read; `diagnose -` reads standard input; a second LOG is
// refused rather than ignored.
TEST(Cli, DiagnoseSaysWhatALogIsBeforeWhatItShows) {
  const std::string out = tmpdir("diagkinds");
  const Result made = zrepro_test::shell("head -c 200000 /dev/urandom > " + out + "/bin.dat; : > " + out +
                                         "/empty.log; printf 'torch.OutOfMemoryError: CUDA out of memory. Tried to "
                                         "allocate 2.00 GiB\\n' > " + out + "/oom.log; iconv -f UTF-8 -t UTF-16 " +
                                         out + "/oom.log > " + out + "/oom16.log; echo done");
  ASSERT_NE(made.output.find("done"), std::string::npos) << made.output;
  Result r = cli("diagnose " + out + "/bin.dat");
  EXPECT_EQ(r.code, 2) << r.output.substr(0, 500);
  EXPECT_NE(r.output.find("is binary, not a text log"), std::string::npos) << r.output.substr(0, 500);
  r = cli("diagnose " + out + "/empty.log");
  EXPECT_EQ(r.code, 7) << r.output;
  EXPECT_NE(r.output.find("is empty: nothing to diagnose"), std::string::npos) << r.output;
  r = cli("diagnose --json " + out + "/oom16.log");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("\"log_encoding\": \"UTF-16 text\""), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\"checkpoint\": \"zero-stage\""), std::string::npos) << r.output;
  r = zrepro_test::shell(std::string(ZREPRO_BIN).append(" diagnose - < ") + out + "/oom.log 2>&1; echo \"exit=$?\"");
  EXPECT_NE(r.output.find("exit=0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("out of memory"), std::string::npos) << r.output;
  r = cli("diagnose " + out + "/oom.log " + out + "/empty.log");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("one LOG at a time"), std::string::npos) << r.output;
}

// Issue 33: words a command would have ignored are refused (a stray positional to run,
// --out "", a scenario name that is a path), and a size out of range keeps its range
// message behind a flag that also takes presets.
TEST(Cli, StrayWordsPathsAndRangesAreRefusedWithTheirReason) {
  const std::string out = tmpdir("stray");
  const std::string cfg = write(out, R"({"train_micro_batch_size_per_gpu": 2})");
  Result r = cli("run --config " + cfg + " --steps 2 stray --out " + out + "/o");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("\"stray\" is not an option"), std::string::npos) << r.output;
  r = cli("run --config " + cfg + " --steps 2 --out \"\"");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--out: got \"\""), std::string::npos) << r.output;
  r = cli("scenario run ../../.. --out " + out + "/s");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("no path"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(out + "/s"));
  r = cli("run --config " + cfg + " --steps 2 --device-memory 9.3e18");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("from 1 byte to 1 PiB"), std::string::npos) << r.output;
}

// Issue 61 item 6: a scenario whose setup runs a scenario (itself) recursed without end;
// a setup step is refused unless it makes inputs ([Note: a setup step makes inputs]).
TEST(Cli, AScenarioWhoseSetupRunsAScenarioIsRefusedNotRecursed) {
  const std::string out = tmpdir("recurse");
  std::filesystem::create_directories(out + "/cat/loop");
  write(out + "/cat/loop", R"({"train_micro_batch_size_per_gpu": 2})");
  std::ofstream(out + "/cat/loop/scenario.json") << R"({"name": "loop", "symptom": "s", "args": [], "ranks": [1],
    "a": {"config": "ds_config.json"}, "b": {"config": "ds_config.json"},
    "setup": [{"why": "again", "args": ["scenario", "run", "loop", "--dir", "{scenario}/.."]}]})";
  const Result r = cli("scenario run loop --dir " + out + "/cat --out " + out + "/o");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("a \"setup\" step runs zrepro scenario"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(out + "/o/setup_1.log")) << "nothing ran";
}

// Issue 61 item 8: a stray word is refused by every command ([Note: a stray word is
// refused]), and plan refuses what run refuses ([Note: plan and run refuse alike]): a step
// count or save interval below 1, a micro-batch past what a device step indexes, leaf
// module classes that name no module of a dense model (DeepSpeed raises there too).
TEST(Cli, EveryCommandRefusesAStrayWordAndPlanRefusesWhatRunRefuses) {
  const std::string out = tmpdir("stray_all");
  const std::string cfg = write(out, R"({"train_micro_batch_size_per_gpu": 2})");
  for (const std::string& c : std::vector<std::string>{"plan --config " + cfg, "check --suite " + out,
                              "config --config " + cfg, "env", "doctor --config " + cfg, "scenario list",
                              "bench copy --sizes 1K"}) {
    const Result r = cli(c + " stray");
    EXPECT_EQ(r.code, 2) << c << "\n" << r.output;
    EXPECT_NE(r.output.find("\"stray\""), std::string::npos) << c << "\n" << r.output;
  }
  for (const auto& [flags, says] : std::vector<std::pair<std::string, std::string>>{
           {"--steps 0", "--steps: must be > 0"},
           {"--save-every 0", "--save-every: got 0"},
           {"--micro-batch 100000000000", "more than 2^31 tokens per micro-batch"},
           {"--z3-leaf-modules NoSuchBlock", "none of the classes ['NoSuchBlock'] is a module of tiny"}}) {
    for (const std::string& cmd : std::vector<std::string>{"plan", "run --out " + out + "/o"}) {
      const Result r = cli(cmd + " --config " + cfg + " " + flags + (cmd != "plan" && flags.rfind("--save-every", 0) == 0 ? " --save-dir " + out + "/c" : ""));
      EXPECT_EQ(r.code, 2) << cmd << " " << flags << "\n" << r.output;
      EXPECT_NE(r.output.find(says), std::string::npos) << cmd << " " << flags << "\n" << r.output;
    }
  }
  EXPECT_EQ(cli("plan --config " + cfg + " --z3-leaf-modules GPT2Block").code, 0) << "a module the model has";
}

// Issue 14: SIGINT / SIGTERM stop the run at the next step boundary with a summary
// (status interrupted, the steps done), report.html and metrics.jsonl; exit 130 / 143.
// The signal goes only once the run logs a step: a background job of a non-interactive
// shell starts with SIGINT ignored, so a signal sent before the handlers are installed
// (a slow start, e.g. under AddressSanitizer) would be lost and the run would go on.
TEST(Cli, SignalsEndTheRunAtAStepBoundaryWithItsSummary) {
  struct Case {
    const char* sig;
    int code;
    const char* ranks;
  };
  for (const Case c : {Case{"INT", 130, ""}, Case{"TERM", 143, ""}, Case{"TERM", 143, " --world-size 2"}}) {
    const std::string out = tmpdir(std::string("sig") + c.sig + (c.ranks[0] ? "v" : ""));
    const std::string cfg = write(out, R"({"train_micro_batch_size_per_gpu": 2})");
    const std::string o = out + "/o";
    const Result r = zrepro_test::shell(std::string(ZREPRO_BIN).append(" run --config ") + cfg + c.ranks +
                                        " --model tiny --steps 100000 --out " + o + " > " + out +
                                        "/log 2>&1 & pid=$!; for i in $(seq 1200); do grep -q 'step=' " + out +
                                        "/log && break; sleep 0.1; done; kill -" + c.sig +
                                        " $pid; for i in $(seq 300); do kill -0 $pid 2>/dev/null || break; sleep 0.1; "
                                        "done; wait $pid; echo $?");
    const std::string what = std::string("SIG") + c.sig + c.ranks;
    EXPECT_EQ(std::atoi(r.output.c_str()), c.code) << what << "\n" << zrepro_test::read_text(out + "/log");
    const json s = read_json(o + "/summary.json");
    EXPECT_EQ(s["status"], "interrupted") << what;
    EXPECT_EQ(s["failure"]["signal"], std::string("SIG") + c.sig) << what;
    const int64_t done = s["failure"]["steps_done"];
    EXPECT_GT(done, 0) << what;
    EXPECT_EQ(static_cast<int64_t>(s["steps"].size()), done) << what;
    EXPECT_TRUE(std::filesystem::exists(o + "/report.html")) << what;
    EXPECT_TRUE(std::filesystem::exists(o + "/metrics.jsonl")) << what;
    EXPECT_FALSE(std::filesystem::exists(o + "/metrics.jsonl.partial")) << what;
  }
}

// Issue 61 item 6: a run held inside a step (a 10-minute injected straggler delay) heard
// SIGTERM only at the step's end, and a scheduler's second signal killed it without a
// summary; the delay now ends at the signal, with the interrupted summary, exit 143.
TEST(Cli, ARunHeldInsideAStepStopsAtTheSignalWithItsSummary) {
  const std::string out = tmpdir("sig_in_step");
  const std::string cfg = write(out, R"({"train_micro_batch_size_per_gpu": 2})");
  const Result r = zrepro_test::shell(std::string(ZREPRO_BIN).append(" run --config ") + cfg +
                                      " --model tiny --steps 3 --inject straggler:0:600000 --out " + out + "/o > " + out +
                                      "/log 2>&1 & pid=$!; for i in $(seq 1200); do grep -q 'batch:' " + out +
                                      "/log && break; sleep 0.1; done; sleep 1; kill -TERM $pid; for i in $(seq 600); "
                                      "do kill -0 $pid 2>/dev/null || break; sleep 0.1; done; kill -9 $pid 2>/dev/null; "
                                      "wait $pid; echo $?");
  EXPECT_EQ(std::atoi(r.output.c_str()), 143) << zrepro_test::read_text(out + "/log");
  const json s = read_json(out + "/o/summary.json");
  EXPECT_EQ(s["status"], "interrupted");
  EXPECT_NE(s["failure"]["message"].get<std::string>().find("SIGTERM inside step 1 of 3"), std::string::npos) << s.dump(1);
}

// [Note: no orphan] (trainer/runtime/subprocess.h): SIGTERM or SIGINT to a command that runs
// zrepro children (ab here; check, verify, scenario and doctor share run_self) reaches the
// running child once, the child stops at its step boundary with its summary, the command
// records the comparison as interrupted and exits 143 / 130, and no zrepro process is left.
TEST(Cli, SignalsToAbReachItsRunAndLeaveNoProcess) {
  for (const char* sig : {"TERM", "INT"}) {
    const std::string out = tmpdir(std::string("absig") + sig);
    const std::string cfg = write(out, R"({"train_micro_batch_size_per_gpu": 2})");
    const std::string o = out + "/ab";
    const Result r = zrepro_test::shell(
        std::string(ZREPRO_BIN).append(" ab --a ") + cfg + " --b-args=--activation-checkpointing --model tiny --steps 100000 "
        "--out " + o + " > " + out + "/log 2>&1 & pid=$!; for i in $(seq 1200); do grep -q 'step=' " + o +
        "/A_r1.log 2>/dev/null && break; sleep 0.1; done; child=$(pgrep -P $pid); kill -" + sig +
        " $pid; for i in $(seq 300); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done; wait $pid; echo \"exit=$?\"; "
        "sleep 0.5; kill -0 $child 2>/dev/null && echo \"child $child alive\"; echo \"child=$child\"");
    const std::string what = std::string("SIG") + sig + "\n" + r.output + zrepro_test::read_text(out + "/log");
    EXPECT_NE(r.output.find(std::string("exit=") + (sig[0] == 'T' ? "143" : "130")), std::string::npos) << what;
    EXPECT_EQ(r.output.find("alive"), std::string::npos) << what;
    EXPECT_EQ(r.output.find("child=\n"), std::string::npos) << "no child was running when the signal went\n" << what;
    const json s = read_json(o + "/A_r1/summary.json");
    EXPECT_EQ(s["status"], "interrupted") << what;
    EXPECT_EQ(zrepro::AbDocument::from_json(read_json(o + "/ab.json")).outcome, "interrupted") << what;
    EXPECT_FALSE(std::filesystem::exists(o + "/B_r1")) << "side B started after the signal\n" << what;
  }
}

// Issue 14: outputs that cannot be written (here a 2 KiB file size limit, as a full disk)
// end the run as an I/O failure, exit 12; no final name holds a partial file, no .tmp stays.
// Issue 61 item 6: a --memory-log cut short (a full disk, a file size limit) ended the run
// "ok", exit 0; the run now ends as an I/O failure naming the log, with its summary.
TEST(Cli, AMemoryLogCutShortEndsTheRunAsAnIoFailure) {
  const std::string out = tmpdir("memlog_cut");
  const std::string cfg = write(out, R"({"train_micro_batch_size_per_gpu": 2})");
  // 300 blocks per file (150 KiB in dash's 512-byte blocks, 300 KiB in bash's): the run's own
  // outputs fit, 60 steps of the memory log (about 750 KB) do not.
  const Result r = zrepro_test::shell("ulimit -f 300; " + std::string(ZREPRO_BIN).append(" run --config ") + cfg +
                                      " --model tiny --steps 60 --out " + out + "/o --memory-log " + out +
                                      "/mem.log 2>&1; echo \"exit=$?\"");
  EXPECT_NE(r.output.find("exit=12"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("the memory log " + out + "/mem.log could not be written whole"), std::string::npos)
      << r.output;
  EXPECT_EQ(read_json(out + "/o/summary.json")["status"], "io_error");
  EXPECT_FALSE(std::filesystem::exists(out + "/o/trace")) << "the ranks' traces were merged first";
}

TEST(Cli, AnOutputThatCannotBeWrittenEndsTheRunAsAnIoFailure) {
  const std::string out = tmpdir("fsize");
  const std::string cfg = write(out, R"({"train_micro_batch_size_per_gpu": 2})");
  const std::string o = out + "/o";
  // No `trap '' XFSZ`: a user's shell does not set it (zrepro ignores SIGXFSZ itself).
  const Result r = zrepro_test::shell("ulimit -f 2; " + std::string(ZREPRO_BIN).append(" run --config ") + cfg +
                                      " --model tiny --steps 200 --out " + o + " 2>&1; echo \"exit=$?\"");
  EXPECT_NE(r.output.find("exit=12"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("cannot write"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(o + "/metrics.jsonl")) << "a partial metrics file under its final name";
  for (const auto& e : std::filesystem::directory_iterator(o)) {
    const std::string name = e.path().filename().string();
    EXPECT_EQ(name.find(".tmp."), std::string::npos) << name;
    if (name == "summary.json") {
      EXPECT_NO_THROW((void)read_json(e.path().string()));  // whole, if there at all
    }
  }
}
