// zrepro diagnose's reading of logs: every log of the corpus in diagnose_logs/ (written
// for these tests in the formats of DeepSpeed 0.14-0.19, PyTorch 2.x and NCCL 2.2x
// messages, ranks interleaved) gives the expected checkpoint, scenario and numbers; a
// healthy log gives no scenario and the lines that looked closest; sizes as PyTorch
// prints them become bytes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "trainer/diagnose/diagnose.h"
#include "trainer/diagnose/log_text.h"

using namespace zrepro;
using json = nlohmann::json;

namespace {

const std::string kLogs = std::string(ZREPRO_SOURCE_DIR).append("/tests/trainer/diagnose/diagnose_logs/");

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST(Diagnose, CorpusGivesTheExpectedScenarioAndNumbers) {
  const json expected = json::parse(read(kLogs + "expected.json"));
  for (const auto& [file, want] : expected.items()) {
    const json got = diagnose_log(read(kLogs + file)).to_json();
    EXPECT_EQ(got["checkpoint"], want["checkpoint"]) << file << "\n" << got.dump(2);
    EXPECT_EQ(got["scenario"], want["scenario"]) << file << "\n" << got.dump(2);
    const json numbers = want.value("numbers", json::object());
    for (const auto& [k, v] : numbers.items())
      EXPECT_EQ(got["numbers"].value(k, json()), v) << file << " " << k << "\n" << got["numbers"].dump();
    if (want["scenario"].is_null()) {
      EXPECT_EQ(got["confidence"], "none") << file;
      EXPECT_FALSE(got["closest"].empty()) << file << ": the lines that looked closest";
    } else {
      EXPECT_FALSE(got["evidence"].empty()) << file;
      EXPECT_GT(got["evidence"][0]["line"].get<int>(), 0);
    }
  }
}

TEST(Diagnose, EvidenceNamesLinesAndRanks) {
  const Diagnosis d = diagnose_log(read(kLogs + "nccl_watchdog.log"));
  ASSERT_GE(d.evidence.size(), 2u);
  EXPECT_EQ(d.evidence[0].line, 2);
  EXPECT_EQ(d.evidence[0].fingerprint, "watchdog_timeout");
  EXPECT_EQ(d.numbers.ranks_seen, std::vector<int>({0, 2, 5})) << "rank prefixes [rankN]: and [Rank N]";
  EXPECT_EQ(d.numbers.ran_ms, 1800087);
  EXPECT_NE(d.to_text().find("zrepro scenario run mismatched-collectives"), std::string::npos);
}

TEST(Diagnose, OverflowLinesAloneAreTheNormalScaleSearch) {
  const Diagnosis d = diagnose_log(
      "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768\n"
      "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 32768, reducing to 16384\nstep 3 loss 2.1\n");
  EXPECT_TRUE(d.scenario.empty());
  EXPECT_NE(d.reason.find("normal search"), std::string::npos);
  EXPECT_EQ(d.numbers.overflow_steps, 2);
}

// Inputs the log fuzzer made (tests/data/fuzz/log/: timer lines cut or garbled, once
// undefined behaviour, a ratio over a zero forward time cast to int; rank numbers past
// int64, once an uncaught out_of_range): no speed verdict from a cut timer line, no rank
// from a number no job has, and nothing thrown.
TEST(Diagnose, ACutTimerLineSaysNothingAboutSpeed) {
  for (const auto& e : std::filesystem::directory_iterator(std::string(ZREPRO_SOURCE_DIR).append("/tests/data/fuzz/log"))) {
    std::ifstream in(e.path(), std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NO_THROW(diagnose_log(text)) << e.path();
  }
  const Diagnosis big_rank = diagnose_log("[rank99999999999999999999999]: torch.OutOfMemoryError: CUDA out of memory. "
                                         "Tried to allocate 2.00 GiB\n[rank3]: step=9999999999999999999999 loss=1\n");
  EXPECT_EQ(big_rank.scenario.empty(), false) << big_rank.to_json().dump();
  EXPECT_FALSE(big_rank.numbers.completed_steps.has_value()) << big_rank.numbers.to_json().dump();
  const Diagnosis no_fwd = diagnose_log("[Rank 0] time (ms) | bwd: 1398.20 | bwd_allreduce: 1045.49 | step: 44.10\n");
  EXPECT_FALSE(no_fwd.numbers.wall_clock_shares().has_value()) << no_fwd.numbers.to_json().dump();
  EXPECT_TRUE(no_fwd.to_json()["numbers"].at("wall_clock_shares").is_null()) << "said, as null, beside the timers";
  EXPECT_NE(no_fwd.scenario, "more-ranks-no-speedup");
  const std::string line = "[Rank 0] time (ms) | fwd: 1.0 | bwd: 1" + std::string(308, '0') + " | step: 1\n";
  const Diagnosis huge = diagnose_log(line + line);  // summed past the largest double
  EXPECT_FALSE(huge.numbers.wall_clock_shares().has_value()) << huge.numbers.to_json().dump();
  EXPECT_NO_THROW(huge.to_json().dump());
}

TEST(Diagnose, PrintedSizesBecomeBytes) {
  EXPECT_EQ(parse_printed_bytes("1.86", "GiB"), static_cast<int64_t>(1.86 * 1073741824.0));
  EXPECT_EQ(parse_printed_bytes("512.00", "MiB"), 512LL << 20);
  EXPECT_EQ(parse_printed_bytes("80", "GB"), 80000000000LL);
  EXPECT_EQ(parse_printed_bytes("2.7e69", "GiB"), -1) << "no device has it (the log fuzzer's, once UB)";
  EXPECT_EQ(parse_printed_bytes("8", "EiB"), -1);
  EXPECT_EQ(parse_printed_bytes("12", "bytes"), 12);
  EXPECT_EQ(parse_printed_bytes("x", "GiB"), -1);
  EXPECT_EQ(parse_printed_bytes("1", "parsecs"), -1);
}

// The log fuzzer's (2026-12-07): a request of 1.3e9 GiB on a 79 GiB device made "100 *
// request / capacity" overflow int64 (undefined behaviour). The share is a double now.
TEST(Diagnose, AHugeRequestGivesItsShareOfTheDeviceWithoutOverflow) {
  const Diagnosis d = diagnose_log(
      "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1306553305.10 GiB. GPU 0 has a total capacity of "
      "79.15 GiB of which 10.04 GiB is free.\n");
  EXPECT_EQ(d.cause, "model-states-at-init");
  EXPECT_NE(d.reason.find(", 1650730644% of the device"), std::string::npos) << d.reason;  // 100 x 1306553305.10 / 79.15
}

// DeepSpeed 0.19 prints no config at its default log level: the job's --config says
// whether it offloads. The same timer lines read as pageable copies with a pageable
// offload config, and as no fingerprint without one (the all-reduce is 10%, no stage 3).
TEST(Diagnose, TheJobsConfigStandsInForTheConfigPrint) {
  const std::string timers = "[Rank 0] time (ms) | fwd: 100.00 | bwd: 600.00 | bwd_inner: 540.00 | bwd_allreduce: 60.00 | step: 40.00\n";
  const json pageable = json::parse(R"({"zero_optimization": {"stage": 2,
      "offload_optimizer": {"device": "cpu", "pin_memory": false}}})");
  const Diagnosis with = diagnose_log(timers, pageable);
  EXPECT_EQ(with.scenario, "pageable-copies") << with.reason;
  EXPECT_EQ(with.checkpoint, "offload-target");
  EXPECT_NE(with.reason.find("6x forward"), std::string::npos) << with.reason;
  json pinned = pageable;
  pinned["zero_optimization"]["offload_optimizer"].erase("pin_memory");  // 0.19.5+: pinned by default
  EXPECT_EQ(diagnose_log(timers, pinned).scenario, "offload-link-bottleneck");
  const Diagnosis without = diagnose_log(timers);
  EXPECT_TRUE(without.scenario.empty()) << without.reason;
  EXPECT_EQ(without.closest.size(), 1u) << "the timer line is the closest";
  ASSERT_TRUE(without.numbers.wall_clock_shares().has_value());
  EXPECT_NEAR(without.numbers.wall_clock_shares()->bwd_allreduce, 60.0 / 740.0, 1e-9);
}

// Issue 33: what a log's bytes are before diagnosis: UTF-16 (BOM, or a NUL every other
// byte) converted to UTF-8, binary refused, Latin-1 and terminal control kept as text.
TEST(Diagnose, LogBytesAreTextUtf16EmptyOrBinary) {
  std::string s = "";
  EXPECT_EQ(normalise_log(s), LogKind::empty);
  s = "[rank0] step 1\r\x1b[2Kloss 4.8 caf\xe9\n";  // a progress bar's bytes and Latin-1
  EXPECT_EQ(normalise_log(s), LogKind::text);
  const std::string ascii = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n";
  std::string le = "\xFF\xFE", be = "\xFE\xFF", bare;
  for (char c : ascii) {
    le += c, le += '\0';
    be += '\0', be += c;
    bare += c, bare += '\0';
  }
  for (std::string* t : {&le, &be, &bare}) {
    EXPECT_EQ(normalise_log(*t), LogKind::utf16);
    EXPECT_EQ(*t, ascii);
  }
  std::string bin;
  for (int i = 0; i < 4096; ++i) bin += static_cast<char>((i * 7919) % 251 + 1);  // no NUL, mostly not text
  EXPECT_EQ(normalise_log(bin), LogKind::binary);
  bin = std::string("\x7f" "ELF\x02\x01\x01\0", 8);  // an executable's header and code bytes
  for (int i = 0; i < 4096; ++i) bin += static_cast<char>(i % 3 ? 0x80 + i % 100 : 0);
  EXPECT_EQ(normalise_log(bin), LogKind::binary);
  // [Note: NUL bytes in a log] (issue 61): a crash-cut log's NUL blocks are gaps, at the start
  // too (not UTF-16: its NULs are on one parity only), and the OOM after them is read.
  for (const std::string& gap : {std::string(8192, '\0') + ascii, ascii + std::string(1, '\0') + ascii,
                                 std::string("step 1\n") + std::string(4097, '\0') + ascii}) {
    std::string t = gap;
    EXPECT_EQ(normalise_log(t), LogKind::text);
    EXPECT_EQ(t.find('\0'), std::string::npos);
    const Diagnosis got = diagnose_log(t), clean = diagnose_log(ascii);
    EXPECT_FALSE(clean.checkpoint.empty());
    EXPECT_EQ(got.checkpoint, clean.checkpoint);
    EXPECT_EQ(got.cause, clean.cause);
  }
  std::string all_gap(10000, '\0');
  EXPECT_EQ(normalise_log(all_gap), LogKind::empty);
}

TEST(Diagnose, PrintableKeepsUtf8AndReplacesControlAndInvalidBytes) {
  EXPECT_EQ(printable("plain\ttab é"), "plain\ttab é");
  EXPECT_EQ(printable("a\x1b[31mb"), "a\xEF\xBF\xBD[31mb");
  EXPECT_EQ(printable("caf\xe9!"), "caf\xEF\xBF\xBD!");
}

// Issue 32: DeepSpeed's see_memory_usage lines as a timeline, each with the label line
// before it (a real log: DeepSpeed#3000's NVMe offload set-up, tests/data/diagnose_corpus).
TEST(Diagnose, SeeMemoryUsageLinesBecomeATimeline) {
  const Diagnosis d = diagnose_log(read(std::string(ZREPRO_SOURCE_DIR) +
                                        "/tests/data/diagnose_corpus/memlog_01_nvme_offload_pinned_host_oom.log"));
  const std::vector<MemoryLine>& t = d.numbers.memory_timeline;
  ASSERT_GE(t.size(), 3u);
  EXPECT_EQ(t[0].label, "DeepSpeedZeRoOffload initialize [begin]");
  EXPECT_DOUBLE_EQ(t[0].ma_gb, 0.12);
  EXPECT_EQ(t[2].label, "Before creating fp16 partitions");
  EXPECT_NE(d.to_text().find("memory (DeepSpeed's see_memory_usage, "), std::string::npos) << d.to_text();
}

// A worker SIGKILLed with no traceback (torchrun's "exitcode: -9"), under a ZeRO-3 config
// that gathers the 16-bit model at every save: save-gather-oom, "likely" (the log itself does
// not say the kill came at a save); without the config's key, no scenario.
TEST(Diagnose, AKillWithTheSaveGatherOnIsLikelyTheSave) {
  const std::string log =
      " 17%|███▏      | 1000/6060 [6:44:48<34:21:44, 24.45s/it]\n"
      "W1016 05:05:57.961000 44150 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 44151 closing "
      "signal SIGTERM\n"
      "E1016 05:06:02.579000 44150 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -9) "
      "local_rank: 0 (pid: 44150) of binary: /usr/bin/python3\n";
  const json gather = {{"zero_optimization", {{"stage", 3}, {"stage3_gather_16bit_weights_on_model_save", true}}}};
  const json g = diagnose_log(log, gather).to_json();
  EXPECT_EQ(g["scenario"], "save-gather-oom") << g.dump(2);
  EXPECT_EQ(g["confidence"], "likely");
  EXPECT_EQ(g["checkpoint"], "host-memory");
  const json none = diagnose_log(log, {{"zero_optimization", {{"stage", 3}}}}).to_json();
  EXPECT_NE(none["scenario"], "save-gather-oom") << none.dump(2);
}

// [Note: failures a short paste still names]: each class names its paste, and only its own.
TEST(Diagnose, AShortPasteIsNamedByWhatItsLinesSayAndOnlyThat) {
  auto said = [](const std::string& log) {
    const Diagnosis d = diagnose_log(log);
    return d.checkpoint + "/" + d.cause;
  };
  // A loss scale below 1 is past any start-up search; one at 2 is not.
  EXPECT_EQ(said("[deepscale] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 0.0, reducing to 0.0\n"),
            "numerics/fp16-scale-stuck");
  EXPECT_EQ(said("[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 2, reducing to 1\n"),
            "/fp16-startup-search");
  // A preprocessing bar past 27 of the default 30 minutes, where the log stops; not at 12 minutes,
  // nor when training steps followed.
  const std::string bar = "Running tokenizer on dataset:  38%|###   | 32066/85249 [32:12<53:25, 16.59ba/s]Traceback (most recent call last):\n";
  EXPECT_EQ(said(bar), "communication/slow-preprocessing");
  EXPECT_EQ(said("Running tokenizer on dataset:  38%|###   | 32066/85249 [12:12<53:25, 16.59ba/s]Traceback (most recent call last):\n"), "/");
  EXPECT_EQ(said(bar + "[deepspeed] step=40/100 loss=2.1\n"), "/");
  // "auto" compared with a number needs DeepSpeed's frame: the bare TypeError is any script's.
  const std::string type_error = "TypeError: '>' not supported between instances of 'str' and 'float'\n";
  EXPECT_EQ(said("  File \"/venv/lib/python3.8/site-packages/deepspeed/runtime/engine.py\", line 1257, in _take_model_step\n" +
                 type_error),
            "config/auto-unresolved");
  EXPECT_EQ(said(type_error), "/");
  // A flat size mismatch names a world-size change only while a ZeRO checkpoint loads.
  const std::string mismatch = "RuntimeError: The size of tensor a (778567680) must match the size of tensor b (155713536) at non-singleton dimension 0\n";
  EXPECT_EQ(said(mismatch), "/");
  const Diagnosis resume = diagnose_log("[Torch] Loading checkpoint from ckpt/global_step250/zero_pp_rank_0_mp_rank_00_model_states.pt...\n" + mismatch);
  EXPECT_EQ(resume.cause, "checkpoint-world-size");
  EXPECT_NE(resume.reason.find("exactly 5x"), std::string::npos) << resume.reason;
  // PyTorch's printed TensorOptions ("pinned_memory=false") is no pinning frame: the
  // DETAIL-mode collective check names the mismatch.
  EXPECT_EQ(said("RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running inconsistent collective: "
                 "CollectiveFingerPrint(OpType=ALLGATHER, TensorShape=[41, 256]\n"
                 "default), pinned_memory=false (default), memory_format=(nullopt))\n"),
            "communication/mismatched-collectives");
  // A traceback whose innermost frame pins a buffer; the same frame followed by more work is not one.
  const std::string pin = "  File \"deepspeed/accelerator/cuda_accelerator.py\", line 217, in pin_memory\n    return tensor.pin_memory()\n";
  EXPECT_EQ(said(pin), "pinned-memory/pinned-host-oom");
  EXPECT_EQ(said(pin + std::string(10, '\n') + "[deepspeed] step=1/10 loss=2\n"), "/");
  // NCCL's network transport.
  EXPECT_EQ(said("ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.\n"),
            "communication/nccl-transport");
}

// Review of the short-paste rules: each fires on its own evidence only.
TEST(Diagnose, AShortPasteRuleDoesNotFireOnLookAlikes) {
  auto said = [](const std::string& log) {
    const Diagnosis d = diagnose_log(log);
    return d.checkpoint + "/" + d.cause;
  };
  // Python prints 2^-14 as 6.103515625e-05: a scale below 1, read whole.
  EXPECT_EQ(said("[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 6.103515625e-05, reducing to "
                 "3.0517578125e-05\n"),
            "numerics/fp16-scale-stuck");
  // A save names the same files as a load: no resume.
  const std::string mismatch = "RuntimeError: The size of tensor a (778567680) must match the size of tensor b (155713536) at non-singleton dimension 0\n";
  EXPECT_NE(said("[Torch] Saving ckpt/global_step250/zero_pp_rank_0_mp_rank_00_model_states.pt...\n" + mismatch),
            "config/checkpoint-world-size");
  // A host at 96% while training on is a speed question, not a set-up failure.
  const std::string full = "[INFO] [utils.py:834:see_memory_usage] CPU Virtual Memory:  used = 502.63 GB, percent = 96.1%\n";
  EXPECT_EQ(said(full), "offload-target/host-memory-at-offload-init");
  EXPECT_NE(said(full + "[deepspeed] step=40/100 loss=2.1\n"), "offload-target/host-memory-at-offload-init");
  // A DataLoader's pin_memory=True argument at the end of a traceback is no pinning call.
  EXPECT_EQ(said("    loader = DataLoader(ds, batch_size=8, pin_memory=True)\nValueError: bad sampler\n"), "/");
  // The TypeError must come from DeepSpeed's frames, not follow a DeepSpeed path far above it.
  std::string far = "  File \"/venv/lib/python3.8/site-packages/deepspeed/runtime/engine.py\", line 1, in __init__\n";
  for (int i = 0; i < 20; ++i) far += "{'loss': 1.0}\n";
  EXPECT_EQ(said(far + "TypeError: '>' not supported between instances of 'str' and 'int'\n"), "/");
  // tqdm's updates joined by \r on one line: the last update's elapsed time counts.
  const Diagnosis bar = diagnose_log(
      "Running tokenizer on dataset:  1%| | 10/85249 [00:01<53:25, 16.59ba/s]\rRunning tokenizer on dataset:  38%|###   "
      "| 32066/85249 [32:12<53:25, 16.59ba/s]Traceback (most recent call last):\n");
  EXPECT_EQ(bar.numbers.preprocessing_elapsed_s, 32 * 60 + 12);
  EXPECT_EQ(bar.cause, "slow-preprocessing");
}
