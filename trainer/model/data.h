// Synthetic training data with learnable structure: token sequences drawn from a
// fixed random Markov chain (each token has 4 likely successors), addressed by
// global sample index. Sample i is the same sequence whatever the world size,
// micro-batch or accumulation split, which is what makes runs comparable. Token ids
// are int32 in the successor table: vocabularies up to kMaxVocab (model_spec.h).
#pragma once
#include <cstdint>

#include <torch/torch.h>

namespace zrepro {

class MarkovData {
 public:
  MarkovData(int64_t vocab, int64_t seq, uint64_t seed);

  // Tokens [n, seq + 1] (int64) of global samples first .. first + n - 1.
  torch::Tensor samples(int64_t first, int64_t n) const;

  // Entropy rate of the chain in nats: the loss a perfect model approaches. The same
  // for every vocabulary (four successors with fixed probabilities), so no chain is
  // built to say it.
  static double entropy_floor();

  // First global sample of (optimizer step, micro-step, rank): step j owns
  // samples [j*G, (j+1)*G), G = micro * gas * world; micro-step t of rank r takes
  // the contiguous slice (t*world + r) * micro.
  static int64_t first_sample(int64_t step, int64_t micro_step, int rank, int world, int64_t micro, int64_t gas);

 private:
  static constexpr int kSuccessors = 4;
  int64_t vocab_, seq_;
  uint64_t seed_;
  std::vector<int32_t> next_;  // [vocab * kSuccessors]
};

}  // namespace zrepro
