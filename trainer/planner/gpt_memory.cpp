// See gpt_memory.h. The tapes themselves are this build's recording (tape_recorder.h),
// from the tracking allocator's log (allocations of 16 bytes or less, and buffers freed
// right after their allocation, left out). They differ by family and attention, by
// compute dtype (bf16 keeps fp32 softmax rows and RMSNorm copies) and by micro-batch
// 1 vs > 1 (with B > 1 the strided q/k/v views cannot be folded into a batched
// matmul, so LibTorch saves contiguous copies of them instead).
#include "trainer/planner/gpt_memory.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace zrepro {

namespace {

TapeTable read_planner_tapes() {
  const char* env = std::getenv("ZREPRO_TAPES_FILE");
  const std::string path = env && *env ? env : ZREPRO_TAPES_FILE;
  const std::string record = "the build records them (cmake --build <build folder> --target zrepro_tapes), or "
                             "zrepro_record_tapes FILE and ZREPRO_TAPES_FILE=FILE";
  std::ifstream in(path);
  if (!in) throw std::runtime_error("the planner's activation tapes " + path + " are missing: " + record);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error("the planner's activation tapes " + path + " are no JSON (" + e.what() + "): " + record);
  }
  TapeTable t = tapes_from_json(j, path);
  if (t.libtorch != linked_libtorch_version())
    throw std::runtime_error("the planner's activation tapes " + path + " were recorded with LibTorch " + t.libtorch +
                             ", this binary links " + linked_libtorch_version() + ": " + record);
  return t;
}

}  // namespace

const TapeTable& planner_tapes() {
  static const TapeTable t = read_planner_tapes();
  return t;
}

bool is_param_token(const std::string& s) { return s == "hb" || s[0] == 'W' || s[0] == 'b'; }

int64_t gpt_compute_elem(Precision p, bool cpu_device) {
  return p == Precision::fp32 || (p == Precision::fp16 && cpu_device) ? 4 : 2;
}

// A recording's sizes at micro-batch B (a + c x B), and the planner's own symbols: n, a
// block's input (cpu checkpointing keeps it on the host), and Wlm 0: zrepro's model hands
// the tied head's gradient of the embedding from the head's reduce to the embedding's
// ([Note: a group used twice]); a recording holds transformers' own flow (autograd sums
// both uses' gradients before the embedding's hook fires), so nothing is handed over.
static TapeSymbols recorded_symbols(const ModelSpec& m, int64_t B) {
  TapeSymbols s;
  for (const auto& [name, ac] : m.recorded->symbols) s[name] = ac.first + ac.second * B;
  s["n"] = B * m.seq * m.hidden * m.recorded->compute_bytes;
  s["Wlm"] = 0;
  return s;
}

TapeSymbols gpt_tape_symbols(const ModelSpec& m, int64_t B, Precision p, bool cpu_device) {
  if (m.recorded) return recorded_symbols(m, B);
  // fp16 on the CPU-emulated device computes in fp32 (gpt.cpp compute_dtype).
  const int64_t e = gpt_compute_elem(p, cpu_device);
  // [Note: MoE in the planner] A MoE block replays the llama block's tapes with its MLP
  // standing for the experts: the B*S*k token-expert pairs and the shared expert run an
  // MLP of k x moe_intermediate + shared_intermediate per token (m), and the three MLP
  // weight gradients are every expert's (a leaf block's unpicked experts get zero ones)
  // and the shared expert's (Wfc). What the dense tape has no place for, the routing,
  // the planner adds per block from forward to backward (moe_dispatch_bytes). In the
  // MLP's backward the experts run one after the other, each on the tokens that picked
  // it (B*S*k/E on average), each allocating its weight gradients and freeing its saved
  // activations: replay_tape replays the MLP's part of the tape once per expert, with one
  // expert's temporaries (m~, or the shared expert's when wider), not the k experts'
  // together. planner_test.cpp measures the result against runs.
  const int64_t I = m.moe() ? m.experts_per_tok * m.moe_intermediate + m.shared_intermediate : m.intermediate;
  const int64_t I_grad = m.moe() ? m.experts * m.moe_intermediate + m.shared_intermediate : m.intermediate;
  const int64_t S = m.seq, h = m.hidden, a = m.heads, V = m.vocab;
  const int64_t n = B * S * h * e, kv = m.kv_head_count() * m.head_dim();
  const int64_t c = std::min(S, m.attention_tile);
  return {
      {"n", n},
      {"n4", B * S * h * 4},           // fp32 copies of a hidden state (RMSNorm computes in fp32)
      {"s4", B * S * 4},               // fp32 rows (RMSNorm's mean square / rstd)
      {"kv", B * S * kv * e},          // grouped-query keys / values
      {"r4", B * a * S * 4},           // sdpa: the log-sum-exp of each score row
      {"r1", B * a * S},               // logsumexp's mask of infinite row maxima (bool)
      // sdpa, per tile of c query rows: scores, their fp32 copy, the output rows, the
      // log-sum-exp rows and logsumexp's mask of them.
      {"tc", B * a * c * S * e},
      {"tc4", B * a * c * S * 4},
      {"nc", B * c * h * e},
      {"nc4", B * c * h * 4},
      {"rc4", B * a * c * 4},
      {"rc1", B * a * c},
      {"n/2", n / 2},                  // rotary: half of each query head, negated
      {"kv/2", B * S * kv * e / 2},    // rotary: half of each key head, negated
      {"Wkv", kv * h * e},
      {"bkv", kv * e},
      {"3n", 3 * n},
      {"m", B * S * I * e},
      {"m~", m.moe() ? std::max(B * S * m.experts_per_tok * m.moe_intermediate / m.experts, B * S * m.shared_intermediate) * e
                     : B * S * I * e},
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
      {"Wfc", I_grad * h * e},
      {"bfc", I * e},
      {"Wlm", V * h * e},
      {"Wte", V * h * e},
      {"Wpe", m.position_rows() * h * e},
  };
}

int64_t moe_dispatch_bytes(const ModelSpec& m, int64_t B, int64_t e) {
  if (!m.moe()) return 0;
  const int64_t T = B * m.seq, E = m.experts, k = m.experts_per_tok;
  return T * E * (e + 4)           // router logits, their fp32 softmax
         + T * k * (4 + 8 + e)     // top-k weights (fp32), indices (int64), weights in the compute dtype
         + 3 * k * T * m.hidden * e   // each token-expert pair's gathered input, output and weighted output
         + k * T * (16 + e)           // ... its (token, slot) indices and its gathered weight
         + (m.shared_intermediate > 0 ? T * (m.hidden + 2) * e : 0)  // the shared expert's output, its gate
         // With the router's aux loss: the router logits, kept for it until the loss, then
         // their gradient from it, waiting for the block's MLP backward.
         + (m.router_aux_loss ? T * E * e : 0);
}

const char* gpt_tape_name(GptTape which) {
  switch (which) {
    case GptTape::embed_forward: return "embed_forward";
    case GptTape::block_forward: return "block_forward";
    case GptTape::head_forward: return "head_forward";
    case GptTape::block_forward_no_grad: return "block_forward_no_grad";
    case GptTape::head_backward: return "head_backward";
    case GptTape::block_backward_mlp: return "block_backward_mlp";
    case GptTape::block_backward_attn: return "block_backward_attn";
    case GptTape::block_backward_recomputed_mlp: return "block_backward_recomputed_mlp";
    case GptTape::block_backward_recomputed_attn: return "block_backward_recomputed_attn";
    case GptTape::embed_backward: return "embed_backward";
    case GptTape::block_recompute_release: return "block_recompute_release";
    case GptTape::backward_tail: return "backward_tail";
    case GptTape::between_blocks: return "between_blocks";
    case GptTape::between_checkpointed_blocks: return "between_checkpointed_blocks";
    case GptTape::block_recompute: return "block_recompute";
  }
  return "?";
}

std::string gpt_tape_key(const ModelSpec& m, GptTape which, int64_t B, Precision p, bool cpu_device) {
  // fp16 on the CPU-emulated device computes in fp32 (gpt.cpp compute_dtype).
  const bool b16 = p == Precision::bf16 || (p == Precision::fp16 && !cpu_device);
  return std::string(family_name(m.family)) + " " + attention_name(m.attention) + (m.tied ? " tied" : " untied") +
         (b16 ? " bf16" : " fp32") + (B == 1 ? " B1 " : " BN ") + gpt_tape_variant(m) + gpt_tape_name(which);
}

std::string gpt_tape_variant(const ModelSpec& m) {
  // [Note: what Hugging Face's modules keep]: the gpt2 family's activation (torch's fused
  // tanh GELU keeps what the exact one keeps) and eager attention's softmax dtype (the
  // llama family's is always fp32).
  if (m.family != Family::gpt2) return "";
  std::string v = m.activation == Activation::gelu_new ? "gelu_new " : "gelu ";
  if (m.attention == Attention::eager && !m.softmax_fp32) v += "softmax16 ";
  return v;
}

const char* gpt_tape(const ModelSpec& m, GptTape which, int64_t B, Precision p, bool cpu_device, bool checkpointed) {
  if (m.recorded) {  // [Note: a recorded architecture]: a part it does not have allocates nothing
    const auto& tapes = m.recorded->tapes;
    auto it = checkpointed ? tapes.find(gpt_tape_name(which) + std::string("@checkpointed")) : tapes.end();
    if (it == tapes.end()) it = tapes.find(gpt_tape_name(which));
    return it == tapes.end() ? "" : it->second.c_str();
  }
  if (which == GptTape::block_recompute) which = GptTape::block_forward;  // zrepro's model: the whole forward again
  const TapeTable& t = planner_tapes();
  const auto& table = t.tapes;
  const std::string key = gpt_tape_key(m, which, B, p, cpu_device);
  auto it = table.find(key);
  if (it == table.end())
    throw std::logic_error("gpt_memory: no activation tape \"" + key + "\" in " + t.source +
                           " (the recorder and the planner disagree on the parts: rebuild)");
  return it->second.c_str();
}

namespace {

std::vector<std::string> tape_tokens(const char* tape) {
  std::istringstream in(tape);
  std::vector<std::string> toks;
  for (std::string tok; in >> tok;) {
    if (tok.size() < 2 || (tok[0] != '+' && tok[0] != '-'))
      throw std::logic_error("gpt_memory: bad tape token \"" + tok + "\"");
    toks.push_back(tok);
  }
  return toks;
}

int64_t symbol_bytes(const TapeSymbols& sym, const std::string& tok, const std::string& name) {
  auto it = sym.find(name);
  if (it == sym.end()) throw std::logic_error("gpt_memory: bad tape token \"" + tok + "\"");
  return tok[0] == '+' ? it->second : -it->second;
}

// One of `parts` equal slices of bytes (the last takes the remainder, so they add up).
int64_t slice(int64_t bytes, int j, int parts) { return bytes / parts + (j == parts - 1 ? bytes % parts : 0); }

}  // namespace

void replay_tape(const char* tape, const TapeSymbols& sym, const std::function<void(int64_t)>& on_activation,
                 const std::function<void(int64_t)>& on_param, int experts) {
  const std::vector<std::string> toks = tape_tokens(tape);
  auto emit = [&](const std::string& tok, const std::string& name, int64_t bytes) {
    (is_param_token(name) ? on_param : on_activation)(bytes);
  };
  if (experts <= 0) {
    for (const std::string& tok : toks) emit(tok, tok.substr(1), symbol_bytes(sym, tok, tok.substr(1)));
    return;
  }
  // [Note: MoE in the planner]: the MLP's part of the tape (to its last m) is replayed once
  // per expert. Each pass allocates its share of the weight gradients (W...) and frees its
  // share of the saved activations (a free of m when no temporary is live), with one
  // expert's temporaries (+m, as m~) in between; the hidden-state tokens (n, ...) are the
  // block's, charged once, on the last pass. The rest of the tape (the norm's) follows.
  size_t mlp_end = 0;
  for (size_t i = 0; i < toks.size(); ++i)
    if (toks[i].substr(1) == "m") mlp_end = i + 1;
  for (int j = 0; j < experts; ++j) {
    int live_temporaries = 0;  // m~ allocated in this pass and not yet freed
    for (size_t i = 0; i < mlp_end; ++i) {
      const std::string& tok = toks[i];
      const std::string name = tok.substr(1);
      if (name == "m" && (tok[0] == '+' || live_temporaries > 0)) {
        live_temporaries += tok[0] == '+' ? 1 : -1;
        emit(tok, "m~", symbol_bytes(sym, tok, "m~"));
      } else if (name == "m" || is_param_token(name)) {
        emit(tok, name, slice(symbol_bytes(sym, tok, name), j, experts));
      } else if (j == experts - 1) {
        emit(tok, name, symbol_bytes(sym, tok, name));
      }
    }
  }
  for (size_t i = mlp_end; i < toks.size(); ++i) emit(toks[i], toks[i].substr(1), symbol_bytes(sym, toks[i], toks[i].substr(1)));
}

int64_t block_activation_bytes(const ModelSpec& m, int64_t B, Precision p, bool cpu_device) {
  const TapeSymbols sym = gpt_tape_symbols(m, B, p, cpu_device);
  int64_t bytes = 0;
  for (GptTape t : {GptTape::block_forward, GptTape::between_blocks})
    replay_tape(gpt_tape(m, t, B, p, cpu_device), sym, [&](int64_t b) { bytes += b; }, [&](int64_t b) { bytes += b; });
  return bytes;
}

}  // namespace zrepro
