// The planner's activation tapes against the model code ([Note: tapes of this LibTorch],
// trainer/planner/tape_recorder.h). The build records them from its own LibTorch; here a
// fresh recording must cut every part with no unexplained size, its two surrogates must
// agree, the planner must replay exactly it (the build's recording is current), and,
// for a LibTorch release with a reference in tests/data/tapes/, the recording must equal
// the reference (the model code did not change what it allocates unnoticed).
// ZREPRO_WRITE_TAPES=<file> writes this build's recording as a new reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainer/config/model_spec.h"
#include "trainer/planner/gpt_memory.h"
#include "trainer/planner/tape_recorder.h"

using namespace zrepro;

namespace {

// The bytes a tape replays, in order (what equality of two tapes means).
std::vector<int64_t> replayed(const std::string& tape, const TapeSymbols& sym) {
  std::vector<int64_t> out;
  auto on = [&](int64_t b) { out.push_back(b); };
  replay_tape(tape.c_str(), sym, on, on);
  return out;
}



const TapeTable& recording() {
  static const TapeTable t = record_gpt_tapes();
  return t;
}

std::string reference_path() {
  return std::string(ZREPRO_SOURCE_DIR).append("/tests/data/tapes/libtorch-") + linked_libtorch_version() + ".json";
}

}  // namespace

TEST(Tapes, EveryPartIsRecordedInSymbols) {
  const TapeTable& t = recording();
  for (const auto& problem : t.problems) ADD_FAILURE() << problem;
  // Kinds (tape_kinds: llama eager and sdpa; gpt2 eager x {gelu, gelu_new} x softmax {fp32,
  // compute dtype}; gpt2 sdpa x {gelu, gelu_new}) x tied x precision x micro-batch class x 14 parts.
  EXPECT_EQ(t.tapes.size(), 8u * 2 * 2 * 2 * 14);
  // [Note: what Hugging Face's modules keep]: a block's forward keeps 3 more intermediate-
  // sized tensors with gelu_new's separate ops, and, in bf16 eager attention, 4 bytes less per
  // score with the softmax in the compute dtype (what transformers' GPT-2 keeps).
  ModelSpec m = resolve_model("gpt2");
  m.layers = 2, m.seq = 64;
  auto block_bytes = [&](Activation a, bool fp32_softmax) {
    m.activation = a, m.softmax_fp32 = fp32_softmax;
    const TapeSymbols sym = gpt_tape_symbols(m, 1, Precision::bf16, true);
    int64_t kept = 0;
    replay_tape(gpt_tape(m, GptTape::block_forward, 1, Precision::bf16, true), sym, [&](int64_t b) { kept += b; },
                [&](int64_t b) { kept += b; });
    return kept;
  };
  const int64_t n = m.seq * m.hidden, mlp = m.seq * m.intermediate, scores = m.heads * m.seq * m.seq;
  EXPECT_EQ(block_bytes(Activation::gelu_new, true) - block_bytes(Activation::gelu, true), 3 * 2 * mlp) << n;
  EXPECT_EQ(block_bytes(Activation::gelu, true) - block_bytes(Activation::gelu, false), 4 * scores);
  std::printf("LibTorch %s; bf16 GEMM scratch on this CPU with oneDNN on: %lld bytes\n", t.libtorch.c_str(),
              static_cast<long long>(t.bf16_gemm_scratch_bytes));
  // The recording turns oneDNN off; the scratch is measured with it on, and restored.
  EXPECT_EQ(bf16_matmul_scratch_bytes(), t.bf16_gemm_scratch_bytes);
  {
    OneDnnOff off;
    EXPECT_EQ(bf16_matmul_scratch_bytes(), 0) << "a bf16 GEMM with oneDNN off allocates only its output";
  }
}

// The planner replays the build's recording: equal to a recording made now.
TEST(Tapes, ThePlannerReadsThisBuildsRecording) {
  const TapeTable& now = recording();
  const TapeTable& planner = planner_tapes();
  EXPECT_EQ(planner.libtorch, now.libtorch);
  EXPECT_EQ(planner.tapes, now.tapes) << planner.source << " is stale: rebuild (the zrepro_tapes target)";
  for (Family f : {Family::gpt2, Family::llama})
    for (Attention a : {Attention::eager, Attention::sdpa})
      for (Precision p : {Precision::fp32, Precision::bf16}) {
        const ModelSpec m = tape_surrogate(f, a, false, 0);
        const std::string key = gpt_tape_key(m, GptTape::block_backward_attn, 1, p, true);
        EXPECT_EQ(std::string(gpt_tape(m, GptTape::block_backward_attn, 1, p, true)), now.tapes.at(key));
      }
}

// A release with a reference: the recording equals it (what the model allocates changed
// unnoticed otherwise).
TEST(Tapes, TheRecordingEqualsThisReleasesReference) {
  const TapeTable& t = recording();
  if (const char* out = std::getenv("ZREPRO_WRITE_TAPES")) {
    const nlohmann::json ref = {
        {"libtorch", t.libtorch},
        {"note", "Test reference (tests/trainer/planner/tapes_test.cpp): the planner's tapes as LibTorch " +
                     t.libtorch + " records them (oneDNN off). The planner reads the build's own recording, not this file; "
                     "re-record it with ZREPRO_WRITE_TAPES=$PWD/tests/data/tapes/libtorch-" + t.libtorch +
                     ".json build/zrepro_unit_tests --gtest_filter=Tapes.*"},
        {"tapes", t.tapes}};
    std::ofstream(out) << ref.dump(1) << "\n";
    std::printf("wrote %s\n", out);
  }
  std::ifstream in(reference_path());
  if (!in) GTEST_SKIP() << "no reference for LibTorch " << t.libtorch << " (" << reference_path() << ")";
  const nlohmann::json ref = nlohmann::json::parse(in);
  const auto reference = ref.at("tapes").get<std::map<std::string, std::string>>();
  // A reference recorded before a block's backward was split in two parts ([Note: a block's
  // backward in two parts], gpt.cpp) has the whole: it must equal the two parts in a row.
  auto recorded = [&](const std::string& key) {
    if (t.tapes.count(key)) return t.tapes.at(key);
    for (const char* whole : {"block_backward_recomputed", "block_backward"}) {
      const std::string w(whole);
      if (key.size() > w.size() && key.compare(key.size() - w.size(), w.size(), w) == 0 &&
          t.tapes.count(key + "_mlp") && t.tapes.count(key + "_attn"))
        return t.tapes.at(key + "_mlp") + " " + t.tapes.at(key + "_attn");
    }
    ADD_FAILURE() << key << ": in the reference, not recorded";
    return std::string();
  };
  int split = 0;
  for (const auto& [key, tape] : reference) split += !t.tapes.count(key);
  ASSERT_EQ(reference.size() + split, t.tapes.size());
  int differ = 0;
  for (const auto& [key, tape] : reference) {
    const ModelSpec m = tape_surrogate(key.rfind("llama", 0) == 0 ? Family::llama : Family::gpt2,
                                  key.find(" sdpa ") != std::string::npos ? Attention::sdpa : Attention::eager,
                                  key.find(" tied ") != std::string::npos, 0);
    const Precision p = key.find(" bf16 ") != std::string::npos ? Precision::bf16 : Precision::fp32;
    const TapeSymbols sym = gpt_tape_symbols(m, key.find(" B1 ") != std::string::npos ? 1 : 3, p, true);
    if (replayed(tape, sym) != replayed(recorded(key), sym)) {
      ++differ;
      ADD_FAILURE() << key << "\n  reference: " << tape << "\n  recorded:  " << recorded(key);
    }
  }
  if (differ)
    std::printf("%d tapes differ from %s: if the model change is intended, re-record the reference with\n"
                "  ZREPRO_WRITE_TAPES=%s <build>/zrepro_unit_tests --gtest_filter=Tapes.*\n",
                differ, reference_path().c_str(), reference_path().c_str());
}
