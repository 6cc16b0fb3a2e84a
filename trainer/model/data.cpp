// See data.h. splitmix64 keyed by (seed, sample) keeps every sample independent of
// every other, so any slice can be generated on its own.
#include "trainer/model/data.h"

#include <cmath>

namespace zrepro {

namespace {
// Successor probabilities: cumulative thresholds of 0.5, 0.25, 0.15, 0.1.
constexpr double kCumulative[] = {0.5, 0.75, 0.9, 1.0};

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
double uniform(uint64_t& x) { return (splitmix64(x) >> 11) * (1.0 / 9007199254740992.0); }
}  // namespace

MarkovData::MarkovData(int64_t vocab, int64_t seq, uint64_t seed)
    : vocab_(vocab), seq_(seq), seed_(seed), next_(vocab * kSuccessors) {
  uint64_t s = seed ^ 0x5eedda7aULL;
  for (auto& t : next_) t = static_cast<int32_t>(splitmix64(s) % static_cast<uint64_t>(vocab));
}

torch::Tensor MarkovData::samples(int64_t first, int64_t n) const {
  torch::Tensor out = torch::empty({n, seq_ + 1}, torch::kLong);
  auto a = out.accessor<int64_t, 2>();
  for (int64_t i = 0; i < n; ++i) {
    uint64_t s = seed_ * 0x100000001b3ULL + static_cast<uint64_t>(first + i) * 0x9e3779b97f4a7c15ULL;
    int64_t tok = static_cast<int64_t>(splitmix64(s) % static_cast<uint64_t>(vocab_));
    a[i][0] = tok;
    for (int64_t j = 1; j <= seq_; ++j) {
      const double u = uniform(s);
      int k = 0;
      while (k + 1 < kSuccessors && u >= kCumulative[k]) ++k;
      tok = next_[tok * kSuccessors + k];
      a[i][j] = tok;
    }
  }
  return out;
}

double MarkovData::entropy_floor() {
  double h = 0, prev = 0;
  for (double c : kCumulative) {
    const double p = c - prev;
    h -= p * std::log(p);
    prev = c;
  }
  return h;  // upper bound: successors that collide only lower it
}

int64_t MarkovData::first_sample(int64_t step, int64_t micro_step, int rank, int world, int64_t micro, int64_t gas) {
  return step * micro * gas * world + (micro_step * world + rank) * micro;
}

}  // namespace zrepro
