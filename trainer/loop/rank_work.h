// Work between optimizer steps that runs forwards without gradients: an evaluation pass
// (the Trainer's evaluate, or a script's `if rank == 0: model(eval_batch)`) and greedy
// generation (generate() with an end-of-sequence stop), on every rank or on some.
//
// [Note: a forward on some ranks] Under ZeRO-3 a forward all-gathers every layer it
// runs, so it is a collective operation even when its result is used on one rank only.
// A forward that runs on rank 0 alone (evaluation there), or a generation loop that a
// rank leaves at its own end-of-sequence while the others generate on, issues
// all-gathers the other ranks do not. They pair up with whatever the others issue next
// (often the same gathers of their next training forward, so the first mismatch comes
// later, in backward) and the job hangs, as DeepSpeed's does. The fixes are DeepSpeed's
// and transformers': evaluate on every rank (--eval-on-all-ranks), and generate with
// synced_gpus (--synced-gpus: each step all-reduces whether any rank is still
// generating, and a finished rank keeps running forwards until none is). Stages 0-2
// gather nothing for a forward, so there a forward on one rank is harmless.
#pragma once
#include <cstdint>
#include <string>

#include "trainer/model/data.h"
#include "trainer/model/gpt.h"
#include "zero/comm/communicator.h"
#include "zero/engine.h"

namespace zrepro {

struct RankWork {
  int64_t eval_every = 0;      // evaluate after every N-th optimizer step (0: never)
  bool eval_rank0_only = false;  // --eval-on-rank0: only rank 0 evaluates (else every rank)
  int64_t eval_batch = 1;      // evaluation samples per rank
  int64_t generate_tokens = 0;  // --generate: new tokens per rank after every step (0: no generation)
  double eos_prob = 0;         // --eos-prob: the chance each new token ends the rank's sequence
  bool synced_gpus = false;    // --synced-gpus: generate() as under ZeRO-3 (see the Note)
  bool any() const { return eval_every > 0 || generate_tokens > 0; }
};

// Whether the seeded draw for (rank, step, token) ends the sequence there: the stand-in
// for a model that emits its end-of-sequence token. Deterministic.
bool draws_eos(uint64_t seed, int rank, int64_t step, int64_t token, double eos_prob);

// After optimizer step `step` (0-based): the evaluation and generation `w` asks for.
// Prints one line per evaluation (rank 0) and per rank's generation.
void run_rank_work(const RankWork& w, int64_t step, uint64_t seed, Gpt& model, ZeroEngine& engine,
                   const MarkovData& data, Communicator& comm, const torch::Device& device);

}  // namespace zrepro
