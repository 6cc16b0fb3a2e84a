// The planner's activation tapes against the model code. Each tape is recorded from
// the tracking allocator's log of one micro-step of a small surrogate model (two
// blocks, stage 0, one rank), cut at the engine's marks (acquire / after_forward /
// use / recomputed), and written in the planner's symbols; recording two surrogates
// of different dimensions and getting the same symbols shows that every size is the
// symbol's, not a coincidence of the surrogate. The tapes the planner replays
// (gpt_memory.cpp) must equal the recorded ones, byte for byte, for every family,
// attention, precision and micro-batch class. When the model code changes, this test
// fails; ZREPRO_WRITE_TAPES=<file> writes the new tapes there (ZREPRO_GPT_TAPES: the
// file of this build's LibTorch major, gpt_memory.h).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "device/device_memory.h"
#include "tests/support/train_helpers.h"
#include "trainer/model/data.h"
#include "trainer/model/gpt.h"
#include "trainer/planner/gpt_memory.h"
#include "zero/comm/communicator.h"
#include "zero/engine.h"

using namespace zrepro;

namespace {

struct Event {
  char kind;  // A, F, M
  int64_t bytes = 0;
  std::string what;  // M: mark name; A/F: category
  int64_t index = 0;
};

std::vector<Event> read_log(const std::string& path) {
  std::vector<Event> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    std::istringstream ls(line);
    Event e;
    ls >> e.kind;
    if (e.kind == 'M') {
      ls >> e.what >> e.index;
    } else {
      ls >> e.bytes >> e.what;
    }
    out.push_back(e);
  }
  return out;
}

// Symbols in order of preference when two have equal sizes (t and t4 in fp32).
const std::vector<std::string> kOrder = {"n",   "3n",   "m",   "t",    "s",     "v",   "kv",  "r4",  "r1",  "s4",
                                         "n4",  "t4",   "v4",  "n/2",  "kv/2",  "tc",  "tc4", "nc",  "nc4", "rc4",
                                         "rc1", "L",    "Wqkv", "bqkv", "Wproj", "Wfc", "bfc", "hb",  "Wkv", "bkv",
                                         "Wte", "Wlm",  "Wpe"};

// A cut's end at the next mark of that name, whatever its index.
constexpr int64_t kAny = -1;

struct Recording {
  std::map<GptTape, std::string> tapes;
  std::vector<std::string> problems;
};

class Recorder {
 public:
  Recorder(const ModelSpec& m, int64_t B, Precision p) : m_(m), B_(B), p_(p) {
    const TapeSymbols sym = gpt_tape_symbols(m, B, p, true);
    for (const std::string& name : kOrder) {
      const int64_t v = sym.at(name);
      if (!by_bytes_.count(v)) by_bytes_[v] = name;
    }
  }

  // One micro-step, checkpointed or not; returns the cut and symbolized log.
  std::vector<Event> run(bool ckpt) {
    DeviceMemory& mem = DeviceMemory::instance();
    mem.install(0);
    const std::string path = testing::TempDir() + "/tape_log.txt";
    SelfCommunicator comm;
    EngineConfig cfg;
    cfg.precision = p_;
    cfg.zero.stage = 0;
    std::vector<torch::Tensor> init;
    {
      DeviceMemory::HostScope host;
      init = gpt_init(m_, 3);
    }
    ZeroEngine engine(m_.layer_shapes(), init, cfg, comm);
    Gpt model(m_, compute_dtype(p_, torch::kCPU), torch::kCPU, Checkpointing{ckpt, false});
    torch::Tensor batch;
    {
      DeviceMemory::HostScope host;
      batch = MarkovData(m_.vocab, m_.seq, 3).samples(0, B_);
    }
    torch::Tensor inputs = batch.narrow(1, 0, m_.seq).clone(), targets = batch.narrow(1, 1, m_.seq).clone();
    mem.log_to(path);
    engine.begin_micro_step(0, 0);
    engine.begin_forward();
    torch::Tensor loss = model.loss(inputs, targets, engine);
    engine.begin_backward();
    mem.mark("backward", 0);
    loss.backward();
    loss = torch::Tensor();
    mem.mark("end", 0);
    mem.log_to("");
    engine.end_backward();
    mem.set_phase(Phase::init);
    std::vector<Event> events;
    for (const Event& e : read_log(path))
      if (e.kind == 'M' || e.what == "activations") events.push_back(e);
    std::remove(path.c_str());
    return events;
  }

  // The events from the n-th mark `from` (index) to the next mark `to` (index), as a tape.
  std::string cut(const std::vector<Event>& ev, const std::string& from, int64_t fi, int nth, const std::string& to,
                  int64_t ti, bool backward, std::vector<std::string>& problems) const {
    size_t i = 0;
    for (int seen = 0; i < ev.size(); ++i)
      if (ev[i].kind == 'M' && ev[i].what == from && ev[i].index == fi && seen++ == nth) break;
    if (i == ev.size()) {
      problems.push_back("no mark " + from + " " + std::to_string(fi));
      return "";
    }
    std::vector<std::string> toks;
    std::vector<int64_t> sizes;
    for (++i; i < ev.size(); ++i) {
      const Event& e = ev[i];
      if (e.kind == 'M') {
        if (e.what == to && (e.index == ti || ti == kAny)) break;
        continue;
      }
      if (e.bytes <= 16) continue;  // scalars
      auto it = by_bytes_.find(e.bytes);
      if (it == by_bytes_.end()) {
        // A buffer freed as soon as it was allocated (oneDNN's scratch) is left out.
        if (e.kind == 'A' && i + 1 < ev.size() && ev[i + 1].kind == 'F' && ev[i + 1].bytes == e.bytes) {
          ++i;
          continue;
        }
        problems.push_back(from + " " + std::to_string(fi) + ": " + std::string(1, e.kind) + " " +
                           std::to_string(e.bytes) + " bytes is no symbol");
        continue;
      }
      // The previous layer's parameter gradients, freed once its use delivered them,
      // lead the segment: the planner frees them at that layer's reduce.
      if (e.kind == 'F' && is_param_token(it->second) && toks.empty()) continue;
      if (e.kind == 'A' && is_param_token(it->second) && !backward) {
        problems.push_back(from + ": a parameter-gradient size allocated in forward");
      }
      toks.push_back((e.kind == 'A' ? "+" : "-") + it->second);
    }
    std::string out;
    for (const auto& t : toks) out += (out.empty() ? "" : " ") + t;
    return out;
  }

  Recording record() {
    Recording r;
    const int last = static_cast<int>(m_.layers) + 1;
    const std::vector<Event> plain = run(false), ckpt = run(true);
    auto& pr = r.problems;
    r.tapes[GptTape::embed_forward] = cut(plain, "acquire", 0, 0, "after_forward", 0, false, pr);
    if (!cut(plain, "after_forward", 0, 0, "acquire", 1, false, pr).empty())
      pr.push_back("allocations between the embedding and the first block");
    r.tapes[GptTape::block_forward] = cut(plain, "acquire", 1, 0, "after_forward", 1, false, pr);
    if (cut(plain, "acquire", 2, 0, "after_forward", 2, false, pr) != r.tapes[GptTape::block_forward])
      pr.push_back("blocks 1 and 2 differ in forward");
    // What Gpt::loss frees between two blocks: the previous block's output, when
    // nothing saved it (bf16's RMSNorm saves its fp32 copy instead).
    r.tapes[GptTape::between_blocks] = cut(plain, "after_forward", 1, 0, "acquire", 2, false, pr);
    // The head runs to backward: its input dies when Gpt::loss returns.
    r.tapes[GptTape::head_forward] = m_.tied ? cut(plain, "acquire", 0, 1, "backward", 0, false, pr)
                                             : cut(plain, "acquire", last, 0, "backward", 0, false, pr);
    if (cut(plain, "after_forward", 2, 0, "acquire", kAny, false, pr) != r.tapes[GptTape::between_blocks])
      pr.push_back("the last block's output is freed unlike the others'");
    r.tapes[GptTape::head_backward] = cut(plain, "backward", 0, 0, "use", last, true, pr);
    // Tied: the head's use of the embed group delivers its gradients right after the
    // head's own use (ZeroEngine::use_backward keeps them); nothing is freed between.
    if (m_.tied && !cut(plain, "use", last, 0, "use", 0, true, pr).empty())
      pr.push_back("frees between the head's two uses");
    r.tapes[GptTape::block_backward] = cut(plain, "use", m_.tied ? 0 : last, 0, "use", 2, true, pr);
    if (cut(plain, "use", 2, 0, "use", 1, true, pr) != r.tapes[GptTape::block_backward])
      pr.push_back("blocks 1 and 2 differ in backward");
    r.tapes[GptTape::embed_backward] = cut(plain, "use", 1, 0, "use", 0, true, pr);
    r.tapes[GptTape::backward_tail] = cut(plain, "use", 0, m_.tied ? 1 : 0, "end", 0, true, pr);

    r.tapes[GptTape::block_forward_no_grad] = cut(ckpt, "acquire", 1, 0, "after_forward", 1, false, pr);
    r.tapes[GptTape::between_checkpointed_blocks] = cut(ckpt, "after_forward", 1, 0, "acquire", 2, false, pr);
    if (cut(ckpt, "acquire", 2, 1, "recomputed", 2, false, pr) != r.tapes[GptTape::block_forward])
      pr.push_back("the recomputation's forward differs from block_forward");
    r.tapes[GptTape::block_backward_recomputed] = cut(ckpt, "recomputed", 2, 0, "use", 2, true, pr);
    r.tapes[GptTape::block_recompute_release] = cut(ckpt, "use", 2, 0, "acquire", 1, true, pr);
    return r;
  }

 private:
  ModelSpec m_;
  int64_t B_;
  Precision p_;
  std::map<int64_t, std::string> by_bytes_;
};

// Two surrogates of a family: dimensions chosen (by a search over small sizes) so that
// no two symbols coincide except structurally (t and t4 in fp32, ...), with different
// head counts and query heads per key/value head (8 / 2 and 10 / 2), so a size that is
// a multiple of one of them is told apart. sdpa's tiles: three per sequence in both,
// so tile-sized symbols are not the full sequence's.
ModelSpec surrogate(Family f, Attention a, bool tied, int which) {
  ModelSpec m = resolve_model(f == Family::llama ? "tiny-llama" : "tiny");
  m.layers = 2;
  m.attention = a;
  m.tied = tied;
  if (which == 0) m.vocab = 37, m.seq = 15, m.hidden = 96, m.heads = 8, m.intermediate = 52;
  else m.vocab = 43, m.seq = 21, m.hidden = 120, m.heads = 10, m.intermediate = 76;
  m.kv_heads = f == Family::llama ? 2 : 0;
  m.attention_tile = m.seq / 3;
  return m;
}

// The bytes a tape replays, in order (what equality of two tapes means).
std::vector<int64_t> replayed(const std::string& tape, const TapeSymbols& sym) {
  std::vector<int64_t> out;
  auto on = [&](int64_t b) { out.push_back(b); };
  replay_tape(tape.c_str(), sym, on, on);
  return out;
}

}  // namespace

TEST(Tapes, PlannerTapesEqualTheModelCodesAllocations) {
  // The bf16 tapes describe a GEMM that allocates only its output (CUDA's, and LibTorch's
  // on CPUs without native bf16). Where LibTorch's CPU bf16 GEMM goes through oneDNN
  // (AVX512-BF16, AMX) it allocates activation-sized reorder buffers around each matmul
  // (+n +n -n -n), which the planner leaves out: bf16 is compared on the other CPUs only.
  const bool onednn_bf16 = zrepro_test::bf16_matmul_scratch_bytes() > 0;
  if (onednn_bf16)
    std::printf("this CPU's bf16 GEMM allocates oneDNN scratch: the bf16 tapes are not compared here\n");
  int compared = 0;
  std::string table;  // the recorded tapes as ZREPRO_GPT_TAPES
  for (Family f : {Family::gpt2, Family::llama})
    for (Attention a : {Attention::eager, Attention::sdpa})
      for (bool tied : {false, true})
        for (Precision p : {Precision::fp32, Precision::bf16})
          for (int64_t B : {1, 3}) {
            std::string label = std::string(family_name(f)) + " " + attention_name(a) + (tied ? " tied" : "") +
                                 (p == Precision::bf16 ? " bf16" : " fp32") + " B=" + std::to_string(B);
            const ModelSpec m0 = surrogate(f, a, tied, 0), m1 = surrogate(f, a, tied, 1);
            if (p == Precision::bf16 && onednn_bf16) continue;
            const Recording r0 = Recorder(m0, B, p).record(), r1 = Recorder(m1, B, p).record();
            for (const auto& problem : r0.problems) ADD_FAILURE() << label << ": " << problem;
            for (const auto& problem : r1.problems) ADD_FAILURE() << label << " (second surrogate): " << problem;
            const TapeSymbols sym = gpt_tape_symbols(m0, B, p, true);
            for (const auto& [which, tape] : r0.tapes) {
              EXPECT_EQ(tape, r1.tapes.at(which)) << label << " " << gpt_tape_name(which)
                                                  << ": the surrogates disagree (a size coincidence)";
              table += "    {\"" + gpt_tape_key(m0, which, B, p, true) + "\",\n     \"" + tape + "\"},\n";
              std::string planned;
              try {
                planned = gpt_tape(m0, which, B, p, true);
              } catch (const std::logic_error& e) {
                ADD_FAILURE() << e.what();
                continue;
              }
              EXPECT_EQ(replayed(planned, sym), replayed(tape, sym))
                  << label << " " << gpt_tape_name(which) << "\n  planned:  " << planned << "\n  recorded: " << tape;
              ++compared;
            }
          }
  EXPECT_EQ(compared, 2 * 2 * 2 * (onednn_bf16 ? 1 : 2) * 2 * 12);
  if (::testing::Test::HasFailure())
    std::printf("the model code and %s part: if the change is intended, re-record it with\n"
                "  ZREPRO_WRITE_TAPES=$PWD/%s <build>/zrepro_unit_tests --gtest_filter=Tapes.*\n",
                ZREPRO_GPT_TAPES, ZREPRO_GPT_TAPES);
  if (const char* out = std::getenv("ZREPRO_WRITE_TAPES"); out && onednn_bf16) {
    ADD_FAILURE() << "ZREPRO_WRITE_TAPES: this CPU's bf16 GEMM allocates oneDNN scratch, so its bf16 tapes are not "
                     "the planner's; record the tapes on a CPU without AVX512-BF16 / AMX";
  } else if (out) {
    std::ofstream f(out);
    f << "// Generated by tests/trainer/planner/tapes_test.cpp (ZREPRO_WRITE_TAPES=<this file>) with LibTorch "
      << TORCH_VERSION_MAJOR << "." << TORCH_VERSION_MINOR << "." << TORCH_VERSION_PATCH << ": do not edit.\n"
         "// Key: family attention tied|untied fp32|bf16 B1|BN tape.\n"
         "constexpr TapeEntry kTapes[] = {\n" << table << "};\n";
    std::printf("wrote %s\n", out);
  }
}
