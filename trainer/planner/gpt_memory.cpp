// See gpt_memory.h. The tapes below are transcriptions of the tracking allocator's
// log (allocations of 16 bytes or less and oneDNN's short-lived bf16 scratch
// buffers left out) for the code in gpt.cpp. They differ by compute dtype (bf16
// keeps a fp32 softmax and a bf16 copy of it) and by micro-batch 1 vs > 1 (with
// B > 1 the strided q/k/v views cannot be folded into a batched matmul, so LibTorch
// saves contiguous copies of them instead of the qkv output).
#include "trainer/planner/gpt_memory.h"

#include <sstream>
#include <stdexcept>

namespace zrepro {

namespace {

// ---------------------------------------------------------------- fp32 (and fp16 computed in fp32)
constexpr const char* kEmbedForward = "+n +n -n";
constexpr const char* kHeadForward = "+n +s +s +v4 +v4 -v4";
constexpr const char* kHeadForwardBf16 = "+n +s +s +v +v4 +v4 -v4 -v";
constexpr const char* kHeadBackward =
    "+v4 +v4 -v4 -v4 +Wlm +n -v4 -n +n +hb +hb +L -L -n -n -s -s";
constexpr const char* kHeadBackwardBf16 =
    "+v4 +v4 -v4 -v4 +v -v4 +Wlm +n -v -n +n +hb +hb +L -L -n -n -s -s";
constexpr const char* kEmbedBackward = "+Wpe +Wte -n +Wpe -Wpe";

constexpr const char* kBlockForward1 =
    "+n +s +s +3n +t +t -t +t -t +t -t +n +n -n +n +n -n +n +s +s +m +m +n +n -n";
constexpr const char* kBlockForwardN =
    "+n +s +s +3n +n +n +t +t -t +t -t +t -t +n +n +n -n +n +n -n +n +s +s +m +m +n +n -3n -n";
constexpr const char* kBlockForwardBf16_1 =
    "+n +s +s +3n +t +n +n -n -n +t -t +t -t +t4 +t4 -t4 +t -t +n +n -n +n -n +n +n -n +n +s +s +m +m +n +n -n";
constexpr const char* kBlockForwardBf16_N =
    "+n +s +s +3n +n +n +t +t -t +t -t +t4 +t4 -t4 +t -t +n +n +n -n +n +n -n +n +s +s +m +m +n +n -3n -n";

// Checkpointed forward: no autograd, so every intermediate dies with the block's
// locals; only the output stays.
constexpr const char* kBlockNoGrad1 =
    "+n +s +s -s -s +3n +t +t -t +t -t +t -t +n +n -n -n +n +n -n +n +s +s -s -s -n +m +m +n -n -m -m +n -n -t -3n -n";
constexpr const char* kBlockNoGradN =
    "+n +s +s -s -s +3n +n +n +t -n -n +t -t +t -t +t -t +n +n -n +n -n -n +n +n -n +n +s +s -s -s -n +m +m +n -n -m -m "
    "+n -n -t -3n -n";
constexpr const char* kBlockNoGradBf16_1 =
    "+n +s +s -s -s +3n +t +n +n -n -n +t -t +t -t +t4 +t4 -t4 +t -t -t4 +n +n -n +n -n -n +n +n -n +n +s +s -s -s -n "
    "+m +m +n -n -m -m +n -n -t -3n -n";
constexpr const char* kBlockNoGradBf16_N =
    "+n +s +s -s -s +3n +n +n +t -n -n +t -t +t -t +t4 +t4 -t4 +t -t -t4 +n +n -n +n -n -n +n +n -n +n +s +s -s -s -n "
    "+m +m +n -n -m -m +n -n -t -3n -n";

// Backward of a block, from the incoming gradient of its output to the gradient of
// its input; fc2 first (Wfc stands for either [I,h] weight), then fc, ln2, the
// attention, qkv and ln1.
#define ZR_MLP_BWD "+m +Wfc +hb -m +m -m -m +n +Wfc +bfc -m -n +n +hb +hb +L -L -n -n -s -s "
#define ZR_QKV_LN1_BWD "-n -n -n +n +Wqkv +bqkv -3n -n +n +hb +hb +L -L "
constexpr const char* kBlockBackward1 =
    ZR_MLP_BWD "+n -n -n +n +Wproj +hb -n +n +t -n +t -t -t +t -t +t -t +n +n -t -3n +n -n +n -n +3n " ZR_QKV_LN1_BWD
               "-n -n -s -s +n -n -n";
constexpr const char* kBlockBackwardN =
    ZR_MLP_BWD "+n -n -n +n +Wproj +hb -n +n -n +n +t -n -n +t -t -t +t -t +t -t +n +n -t -n -n +n -n +n -n +3n "
    ZR_QKV_LN1_BWD "-n -n -s -s +n -n -n";
constexpr const char* kBlockBackwardBf16_1 =
    ZR_MLP_BWD "+n -n -n +n +Wproj +hb -n +n +n -n +t +n +n -n -n -n -t +t4 -t +t4 -t4 -t4 +t -t4 +t -t +t -t +n +n -n "
    "+n +n -n -t -3n +n -n +n -n +3n " ZR_QKV_LN1_BWD "-n -n -s -s +n -n -n";
constexpr const char* kBlockBackwardBf16_N =
    ZR_MLP_BWD "+n -n -n +n +Wproj +hb -n +n -n +n +t -n -t -n +t4 -t +t4 -t4 -t4 +t -t4 +t -t +t -t +n +n -t -n -n "
    "+n -n +n -n +3n " ZR_QKV_LN1_BWD "-n -n -s -s +n -n -n";
// Recomputed (checkpointed) block: the incoming gradient and the detached input are
// held by the checkpoint function, so two frees move to after the reduce.
constexpr const char* kBlockRecomputed1 =
    ZR_MLP_BWD "+n -n +n +Wproj +hb -n +n +t -n +t -t -t +t -t +t -t +n +n -t -3n +n -n +n -n +3n " ZR_QKV_LN1_BWD
               "-n -s -s +n -n -n";
constexpr const char* kBlockRecomputedN =
    ZR_MLP_BWD "+n -n +n +Wproj +hb -n +n -n +n +t -n -n +t -t -t +t -t +t -t +n +n -t -n -n +n -n +n -n +3n "
    ZR_QKV_LN1_BWD "-n -s -s +n -n -n";
constexpr const char* kBlockRecomputedBf16_1 =
    ZR_MLP_BWD "+n -n +n +Wproj +hb -n +n +n -n +t +n +n -n -n -n -t +t4 -t +t4 -t4 -t4 +t -t4 +t -t +t -t +n +n -n "
    "+n +n -n -t -3n +n -n +n -n +3n " ZR_QKV_LN1_BWD "-n -s -s +n -n -n";
constexpr const char* kBlockRecomputedBf16_N =
    ZR_MLP_BWD "+n -n +n +Wproj +hb -n +n -n +n +t -n -t -n +t4 -t +t4 -t4 -t4 +t -t4 +t -t +t -t +n +n -t -n -n "
    "+n -n +n -n +3n " ZR_QKV_LN1_BWD "-n -s -s +n -n -n";
#undef ZR_MLP_BWD
#undef ZR_QKV_LN1_BWD
constexpr const char* kRecomputeRelease = "-n -n -n";

bool is_param_token(const std::string& s) { return s == "hb" || s[0] == 'W' || s[0] == 'b'; }

}  // namespace

TapeSymbols gpt_tape_symbols(const ModelSpec& m, int64_t B, Precision p, bool cpu_device) {
  // fp16 on the CPU-emulated device computes in fp32 (gpt.cpp compute_dtype).
  const int64_t e = (p == Precision::fp32 || (p == Precision::fp16 && cpu_device)) ? 4 : 2;
  const int64_t S = m.seq, h = m.hidden, a = m.heads, I = m.intermediate, V = m.vocab;
  const int64_t n = B * S * h * e;
  return {
      {"n", n},
      {"3n", 3 * n},
      {"m", B * S * I * e},
      {"t", B * a * S * S * e},
      {"t4", B * a * S * S * 4},
      {"s", B * S * e},                // LayerNorm mean / rstd rows
      {"v", B * S * V * e},            // logits
      {"v4", B * S * V * 4},           // fp32 logits / log-softmax
      {"L", 2 * h * e},                // LayerNorm backward scratch
      {"Wqkv", 3 * h * h * e},
      {"bqkv", 3 * h * e},
      {"Wproj", h * h * e},
      {"hb", h * e},
      {"Wfc", I * h * e},
      {"bfc", I * e},
      {"Wlm", V * h * e},
      {"Wte", V * h * e},
      {"Wpe", S * h * e},
  };
}

const char* gpt_tape(GptTape which, int64_t B, Precision p, bool cpu_device) {
  const bool b16 = p == Precision::bf16 || (p == Precision::fp16 && !cpu_device);
  const bool one = B == 1;
  switch (which) {
    case GptTape::embed_forward: return kEmbedForward;
    case GptTape::head_forward: return b16 ? kHeadForwardBf16 : kHeadForward;
    case GptTape::head_backward: return b16 ? kHeadBackwardBf16 : kHeadBackward;
    case GptTape::embed_backward: return kEmbedBackward;
    case GptTape::block_forward:
      return b16 ? (one ? kBlockForwardBf16_1 : kBlockForwardBf16_N) : (one ? kBlockForward1 : kBlockForwardN);
    case GptTape::block_forward_no_grad:
      return b16 ? (one ? kBlockNoGradBf16_1 : kBlockNoGradBf16_N) : (one ? kBlockNoGrad1 : kBlockNoGradN);
    case GptTape::block_backward:
      return b16 ? (one ? kBlockBackwardBf16_1 : kBlockBackwardBf16_N) : (one ? kBlockBackward1 : kBlockBackwardN);
    case GptTape::block_backward_recomputed:
      return b16 ? (one ? kBlockRecomputedBf16_1 : kBlockRecomputedBf16_N)
                 : (one ? kBlockRecomputed1 : kBlockRecomputedN);
    case GptTape::block_recompute_release: return kRecomputeRelease;
  }
  return "";
}

void replay_tape(const char* tape, const TapeSymbols& sym, const std::function<void(int64_t)>& on_activation,
                 const std::function<void(int64_t)>& on_param) {
  std::istringstream in(tape);
  for (std::string tok; in >> tok;) {
    const std::string name = tok.substr(1);
    auto it = sym.find(name);
    if (it == sym.end() || (tok[0] != '+' && tok[0] != '-'))
      throw std::logic_error("gpt_memory: bad tape token \"" + tok + "\"");
    const int64_t bytes = tok[0] == '+' ? it->second : -it->second;
    (is_param_token(name) ? on_param : on_activation)(bytes);
  }
}

}  // namespace zrepro
