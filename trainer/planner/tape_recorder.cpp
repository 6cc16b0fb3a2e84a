// See tape_recorder.h. The recorder was tests/trainer/planner/tapes_test.cpp's; the test
// now checks its result (every part cut, the surrogates agree, the planner replays it).
#include "trainer/planner/tape_recorder.h"

#include <ATen/Context.h>
#include <torch/version.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <unistd.h>

#include "device/device_memory.h"
#include "trainer/model/data.h"
#include "trainer/model/gpt.h"
#include "trainer/planner/gpt_memory.h"
#include "zero/comm/communicator.h"
#include "zero/engine.h"

namespace zrepro {

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
    char tmpl[] = "/tmp/zrepro_tape_log_XXXXXX";
    const int fd = ::mkstemp(tmpl);
    if (fd < 0) throw std::runtime_error("tape recorder: cannot create a temporary log in /tmp");
    ::close(fd);
    const std::string path = tmpl;
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

  // The index of the n-th mark `from` (index), ev.size() when there is none.
  static size_t nth_mark(const std::vector<Event>& ev, const std::string& from, int64_t fi, int nth) {
    size_t i = 0;
    for (int seen = 0; i < ev.size(); ++i)
      if (ev[i].kind == 'M' && ev[i].what == from && ev[i].index == fi && seen++ == nth) break;
    return i;
  }

  // A segment being cut: where it starts (for the problems' words) and its tokens so far.
  struct Segment {
    const std::string& from;
    int64_t fi;
    bool backward;
    std::vector<std::string>& problems;
    std::vector<std::string> toks;
  };

  // Event i (an allocation or a free) into the segment's tape; returns the index of the
  // last event it consumed (a scratch buffer's free goes with its allocation).
  size_t take(const std::vector<Event>& ev, size_t i, Segment& s) const {
    const Event& e = ev[i];
    if (e.bytes <= 16) return i;  // scalars
    auto it = by_bytes_.find(e.bytes);
    if (it == by_bytes_.end()) {
      // A buffer freed as soon as it was allocated (oneDNN's scratch) is left out.
      if (e.kind == 'A' && i + 1 < ev.size() && ev[i + 1].kind == 'F' && ev[i + 1].bytes == e.bytes) return i + 1;
      s.problems.push_back(s.from + " " + std::to_string(s.fi) + ": " + std::string(1, e.kind) + " " +
                           std::to_string(e.bytes) + " bytes is no symbol");
      return i;
    }
    // The previous layer's parameter gradients, freed once its use delivered them,
    // lead the segment: the planner frees them at that layer's reduce.
    const bool param = is_param_token(it->second);
    if (e.kind == 'F' && param && s.toks.empty()) return i;
    if (e.kind == 'A' && param && !s.backward) s.problems.push_back(s.from + ": a parameter-gradient size allocated in forward");
    s.toks.push_back((e.kind == 'A' ? "+" : "-") + it->second);
    return i;
  }

  // The events from the n-th mark `from` (index) to the next mark `to` (index), as a tape.
  std::string cut(const std::vector<Event>& ev, const std::string& from, int64_t fi, int nth, const std::string& to,
                  int64_t ti, bool backward, std::vector<std::string>& problems) const {
    size_t i = nth_mark(ev, from, fi, nth);
    if (i == ev.size()) {
      problems.push_back("no mark " + from + " " + std::to_string(fi));
      return "";
    }
    Segment s{from, fi, backward, problems, {}};
    for (++i; i < ev.size(); ++i) {
      const Event& e = ev[i];
      if (e.kind != 'M') i = take(ev, i, s);
      else if (e.what == to && (e.index == ti || ti == kAny)) break;
    }
    std::string out;
    for (const auto& t : s.toks) out += (out.empty() ? "" : " ") + t;
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
    // [Note: a block's backward in two parts] (gpt.cpp): the MLP's, then the attention's.
    r.tapes[GptTape::block_backward_mlp] = cut(plain, "use", m_.tied ? 0 : last, 0, "mlp_backward", 2, true, pr);
    r.tapes[GptTape::block_backward_attn] = cut(plain, "mlp_backward", 2, 0, "use", 2, true, pr);
    if (cut(plain, "use", 2, 0, "mlp_backward", 1, true, pr) != r.tapes[GptTape::block_backward_mlp] ||
        cut(plain, "mlp_backward", 1, 0, "use", 1, true, pr) != r.tapes[GptTape::block_backward_attn])
      pr.push_back("blocks 1 and 2 differ in backward");
    r.tapes[GptTape::embed_backward] = cut(plain, "use", 1, 0, "use", 0, true, pr);
    r.tapes[GptTape::backward_tail] = cut(plain, "use", 0, m_.tied ? 1 : 0, "end", 0, true, pr);

    r.tapes[GptTape::block_forward_no_grad] = cut(ckpt, "acquire", 1, 0, "after_forward", 1, false, pr);
    r.tapes[GptTape::between_checkpointed_blocks] = cut(ckpt, "after_forward", 1, 0, "acquire", 2, false, pr);
    if (cut(ckpt, "acquire", 2, 1, "recomputed", 2, false, pr) != r.tapes[GptTape::block_forward])
      pr.push_back("the recomputation's forward differs from block_forward");
    r.tapes[GptTape::block_backward_recomputed_mlp] = cut(ckpt, "recomputed", 2, 0, "mlp_backward", 2, true, pr);
    r.tapes[GptTape::block_backward_recomputed_attn] = cut(ckpt, "mlp_backward", 2, 0, "use", 2, true, pr);
    r.tapes[GptTape::block_recompute_release] = cut(ckpt, "use", 2, 0, "acquire", 1, true, pr);
    return r;
  }

 private:
  ModelSpec m_;
  int64_t B_;
  Precision p_;
  std::map<int64_t, std::string> by_bytes_;
};

// Each family, attention and variant of the family's ops (gpt_tape_variant) a model can
// have: the fields of ModelSpec that choose its tapes besides the tied head.
std::vector<ModelSpec> tape_kinds() {
  std::vector<ModelSpec> out;
  for (Attention a : {Attention::eager, Attention::sdpa}) {
    ModelSpec llama;
    llama.family = Family::llama, llama.attention = a;
    out.push_back(llama);
    for (Activation act : {Activation::gelu, Activation::gelu_new})
      for (bool fp32 : {true, false}) {
        if (a == Attention::sdpa && !fp32) continue;  // the softmax dtype is eager's
        ModelSpec g;
        g.family = Family::gpt2, g.attention = a, g.activation = act, g.softmax_fp32 = fp32;
        out.push_back(g);
      }
  }
  return out;
}

// Every tape of one precision into `out` (the two surrogates must agree).
void record_precision(Precision p, std::map<std::string, std::string>& out, std::vector<std::string>& problems) {
  for (const ModelSpec& kind : tape_kinds())
    for (bool tied : {false, true})
      for (int64_t B : {1, 3}) {
        ModelSpec m0 = tape_surrogate(kind.family, kind.attention, tied, 0);
        ModelSpec m1 = tape_surrogate(kind.family, kind.attention, tied, 1);
        for (ModelSpec* m : {&m0, &m1}) m->activation = kind.activation, m->softmax_fp32 = kind.softmax_fp32;
        const std::string label = std::string(family_name(kind.family)) + " " + attention_name(kind.attention) + " " +
                                  gpt_tape_variant(m0) + (tied ? "tied" : "untied") +
                                  (p == Precision::bf16 ? " bf16" : " fp32") + " B=" + std::to_string(B);
        const Recording r0 = Recorder(m0, B, p).record(), r1 = Recorder(m1, B, p).record();
        for (const auto& problem : r0.problems) problems.push_back(label + ": " + problem);
        for (const auto& problem : r1.problems) problems.push_back(label + " (second surrogate): " + problem);
        for (const auto& [which, tape] : r0.tapes) {
          if (tape != r1.tapes.at(which))
            problems.push_back(label + " " + gpt_tape_name(which) + ": the surrogates disagree (a size coincidence): " +
                               tape + " vs " + r1.tapes.at(which));
          out[gpt_tape_key(m0, which, B, p, true)] = tape;
        }
      }
}

}  // namespace

// The surrogates' dimensions: chosen (by a search over small sizes) so that
// no two symbols coincide except structurally (t and t4 in fp32, ...), with different
// head counts and query heads per key/value head (8 / 2 and 10 / 2), so a size that is
// a multiple of one of them is told apart. sdpa's tiles: three per sequence in both,
// so tile-sized symbols are not the full sequence's.
ModelSpec tape_surrogate(Family f, Attention a, bool tied, int which) {
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

std::string linked_libtorch_version() {
  return std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
         std::to_string(TORCH_VERSION_PATCH);
}

int64_t bf16_matmul_scratch_bytes() {
  DeviceMemory& mem = DeviceMemory::instance();
  mem.install(0);
  const torch::Tensor a = torch::ones({8 * 100, 256}, torch::kBFloat16), b = torch::ones({256, 1024}, torch::kBFloat16);
  mem.reset_peaks();
  const int64_t base = mem.snapshot().allocated;
  const torch::Tensor c = torch::matmul(a, b);
  return mem.snapshot().peak - base - static_cast<int64_t>(c.numel() * c.element_size());
}

OneDnnOff::OneDnnOff() : was_(at::globalContext().userEnabledMkldnn()) {
  at::globalContext().setUserEnabledMkldnn(false);
}
OneDnnOff::~OneDnnOff() { at::globalContext().setUserEnabledMkldnn(was_); }

TapeTable record_gpt_tapes() {
  TapeTable t;
  t.libtorch = linked_libtorch_version();
  t.source = "recorded";
  t.bf16_gemm_scratch_bytes = bf16_matmul_scratch_bytes();
  OneDnnOff off;  // [Note: tapes of this LibTorch]: GEMMs that allocate only their output
  // One intra-op thread while recording: with more, a parallel kernel's per-thread scratch
  // enters the tapes, and the recording would depend on the caller's OMP_NUM_THREADS.
  struct OneThread {
    int was = at::get_num_threads();
    OneThread() { at::set_num_threads(1); }
    ~OneThread() { at::set_num_threads(was); }
  } one_thread;
  for (Precision p : {Precision::fp32, Precision::bf16}) record_precision(p, t.tapes, t.problems);
  return t;
}

nlohmann::json tapes_to_json(const TapeTable& t) {
  return {{"libtorch", t.libtorch},
          {"bf16_gemm_scratch_bytes", t.bf16_gemm_scratch_bytes},
          {"note", "recorded by zrepro_record_tapes with oneDNN off (trainer/planner/tape_recorder.h); keys: "
                   "family attention tied|untied fp32|bf16 B1|BN [gpt2: gelu|gelu_new [softmax16]] part"},
          {"problems", t.problems},
          {"tapes", t.tapes}};
}

TapeTable tapes_from_json(const nlohmann::json& j, const std::string& source) {
  TapeTable t;
  try {
    t.libtorch = j.at("libtorch").get<std::string>();
    t.bf16_gemm_scratch_bytes = j.at("bf16_gemm_scratch_bytes").get<int64_t>();
    t.problems = j.at("problems").get<std::vector<std::string>>();
    t.tapes = j.at("tapes").get<std::map<std::string, std::string>>();
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(source + " is not a tape table (" + e.what() + "); record it again: zrepro_record_tapes " +
                             source);
  }
  t.source = source;
  return t;
}

}  // namespace zrepro
