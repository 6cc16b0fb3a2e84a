// Synthetic training data with learnable structure: token sequences drawn from a
// fixed random Markov chain (each token has 4 likely successors), addressed by
// global sample index. Sample i is the same sequence whatever the world size,
// micro-batch or accumulation split, which is what makes runs comparable. Token ids
// are int32 in the successor table: vocabularies up to kMaxVocab (model_spec.h).
//
// [Note: variable-length samples] --seq-len-dist gives sample i its own length l_i (its
// count of target tokens, 1 <= l_i <= seq), drawn from a hash of (seed, i) apart from the
// token stream: the fixed distribution gives the tokens it always gave. A sample is padded
// to the model's length after its l_i + 1 real tokens with kPadLabel, the label Hugging
// Face's collators give padding (-100, cross-entropy's ignore_index): the loop feeds token 0
// in its place and the loss does not score it. Right padding under a causal mask leaves the
// real tokens' logits as they are, so no attention mask is needed.
#pragma once
#include <cstdint>
#include <string>

#include <torch/torch.h>

namespace zrepro {

constexpr int64_t kPadLabel = -100;

// The sample lengths: every sample full (fixed), or l_i uniform in min..max.
struct SeqLenDist {
  int64_t min = 0, max = 0;  // 0: fixed
  bool fixed() const { return min == 0; }
  std::string spec() const;  // "fixed", "uniform:MIN-MAX", as --seq-len-dist reads it
};
// --seq-len-dist VALUE: "fixed", "uniform:MIN" (MIN..seq) or "uniform:MIN-MAX"; 1 <= MIN <=
// MAX <= seq. Throws ConfigError naming the flag, the value and the form expected.
SeqLenDist parse_seq_len_dist(const std::string& value, int64_t seq);

class MarkovData {
 public:
  MarkovData(int64_t vocab, int64_t seq, uint64_t seed, SeqLenDist lengths = {});

  // Tokens [n, seq + 1] (int64) of global samples first .. first + n - 1, padded with
  // kPadLabel after each sample's length.
  torch::Tensor samples(int64_t first, int64_t n) const;
  // Target tokens of sample i (seq when fixed).
  int64_t length(int64_t sample) const;
  // Target tokens the loss scores in samples first .. first + n - 1 cut to `len` positions
  // (dynamic padding's step length): the sum of min(l_i, len).
  int64_t target_tokens(int64_t first, int64_t n, int64_t len) const;
  bool padded() const { return !lengths_.fixed(); }
  int64_t seq() const { return seq_; }

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
  SeqLenDist lengths_;
  std::vector<int32_t> next_;  // [vocab * kSuccessors]
};

}  // namespace zrepro
