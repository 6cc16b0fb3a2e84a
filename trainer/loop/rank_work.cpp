// See rank_work.h.
#include "trainer/loop/rank_work.h"

#include <iostream>
#include <sstream>

namespace zrepro {

namespace {

// Held-out samples: far past any training sample's index.
constexpr int64_t kEvalFirst = int64_t{1} << 40;

void evaluate(const RankWork& w, int64_t step, Gpt& model, ZeroEngine& engine, const MarkovData& data,
              Communicator& comm, const torch::Device& device) {
  const int rank = comm.rank();
  if (w.eval_rank0_only && rank != 0) return;  // [Note: a forward on some ranks]
  const int64_t seq = data.seq();
  const torch::Tensor b = data.samples(kEvalFirst + (step * comm.world_size() + rank) * w.eval_batch, w.eval_batch)
                              .to(device);
  double loss = 0;
  {
    torch::NoGradGuard no_grad;
    engine.begin_eval_forward();
    // Padding (kPadLabel) is an input token 0 and an unscored target.
    loss = model.loss(b.narrow(1, 0, seq).clamp_min(0), b.narrow(1, 1, seq), engine).item<double>();
    engine.end_eval_forward();
  }
  std::ostringstream os;
  if (!w.eval_rank0_only) {  // the Trainer gathers every rank's eval loss for its metric
    torch::Tensor t = torch::tensor({loss}, torch::kDouble);
    comm.all_reduce_wait(t, "eval loss");
    loss = t.item<double>() / comm.world_size();
  }
  if (rank == 0)
    std::cout << "[zrepro] eval after step " << step + 1 << ": loss " << loss << " ("
              << (w.eval_rank0_only ? "rank 0 alone" : "every rank") << ")" << std::endl;
}

void generate(const RankWork& w, int64_t step, uint64_t seed, Gpt& model, ZeroEngine& engine,
              const MarkovData& data, Communicator& comm, const torch::Device& device) {
  const int rank = comm.rank();
  const int64_t seq = data.seq();
  // The prompt: half a held-out sample of this rank's; the window slides past seq tokens.
  torch::Tensor tokens =
      data.samples(kEvalFirst + (int64_t{1} << 30) + step * comm.world_size() + rank, 1).narrow(1, 0, seq / 2 + 1);
  tokens = tokens.clamp_min(0).to(device);
  bool unfinished = true;
  int64_t made = 0, forwards = 0;
  for (int64_t t = 0; t < w.generate_tokens; ++t) {
    if (w.synced_gpus) {  // transformers' _has_unfinished_sequences under synced_gpus
      torch::Tensor flag = torch::tensor({unfinished ? 1.0 : 0.0}, torch::kDouble);
      comm.all_reduce_wait(flag, "generate: unfinished ranks");
      if (flag.item<double>() == 0) break;
    } else if (!unfinished) {
      break;  // this rank leaves generate(); the others go on
    }
    engine.begin_eval_forward();
    const torch::Tensor next = model.next_token(tokens.narrow(1, std::max<int64_t>(0, tokens.size(1) - seq),
                                                              std::min<int64_t>(tokens.size(1), seq)),
                                                engine);
    engine.end_eval_forward();
    ++forwards;
    if (!unfinished) continue;  // synced_gpus: a finished rank's forward only keeps the others company
    tokens = torch::cat({tokens, next.unsqueeze(1).to(tokens.dtype())}, 1);
    ++made;
    if (draws_eos(seed, rank, step, t, w.eos_prob)) unfinished = false;
  }
  std::cout << "[zrepro] rank " << rank << " generated " << made << " token(s) after step " << step + 1
            << (unfinished ? " (the limit)" : " (end of sequence)") << " in " << forwards << " forward(s)"
            << std::endl;
}

}  // namespace

bool draws_eos(uint64_t seed, int rank, int64_t step, int64_t token, double eos_prob) {
  uint64_t h = seed ^ (static_cast<uint64_t>(rank) * 0x9E3779B97F4A7C15ULL) ^
               (static_cast<uint64_t>(step) << 32) ^ static_cast<uint64_t>(token) * 0xD1B54A32D192ED03ULL;
  h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ULL;  // splitmix64's finaliser
  h = (h ^ (h >> 27)) * 0x94D049BB133111EBULL;
  h ^= h >> 31;
  return static_cast<double>(h >> 11) * 0x1.0p-53 < eos_prob;
}

void run_rank_work(const RankWork& w, int64_t step, uint64_t seed, Gpt& model, ZeroEngine& engine,
                   const MarkovData& data, Communicator& comm, const torch::Device& device) {
  if (w.eval_every > 0 && (step + 1) % w.eval_every == 0) evaluate(w, step, model, engine, data, comm, device);
  if (w.generate_tokens > 0) generate(w, step, seed, model, engine, data, comm, device);
}

}  // namespace zrepro
