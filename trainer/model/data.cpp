// See data.h. splitmix64 keyed by (seed, sample) keeps every sample independent of
// every other, so any slice can be generated on its own.
#include "trainer/model/data.h"

#include <algorithm>
#include <cmath>

#include "device/base/errors.h"

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

std::string SeqLenDist::spec() const {
  return fixed() ? "fixed" : "uniform:" + std::to_string(min) + "-" + std::to_string(max);
}

SeqLenDist parse_seq_len_dist(const std::string& value, int64_t seq) {
  const std::string expected = "expected fixed, uniform:MIN (MIN..seq) or uniform:MIN-MAX, with 1 <= MIN <= MAX <= " +
                               std::to_string(seq) + " (the model's sequence length)";
  const auto bad = [&](const std::string& why) {
    return ConfigError("--seq-len-dist: got \"" + value + "\"" + why + ", " + expected);
  };
  if (value == "fixed") return {};
  const std::string kUniform = "uniform:";
  if (value.rfind(kUniform, 0) != 0) throw bad("");
  const std::string range = value.substr(kUniform.size());
  const auto whole = [&](const std::string& s) -> int64_t {
    if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos) throw bad("");
    return std::stoll(s);
  };
  const auto dash = range.find('-');
  SeqLenDist d;
  d.min = whole(range.substr(0, dash));
  d.max = dash == std::string::npos ? seq : whole(range.substr(dash + 1));
  if (d.min < 1 || d.min > d.max || d.max > seq) throw bad(" (out of range)");
  return d;
}

MarkovData::MarkovData(int64_t vocab, int64_t seq, uint64_t seed, SeqLenDist lengths)
    : vocab_(vocab), seq_(seq), seed_(seed), lengths_(lengths), next_(vocab * kSuccessors) {
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
    if (padded())
      for (int64_t j = length(first + i) + 1; j <= seq_; ++j) a[i][j] = kPadLabel;
  }
  return out;
}

int64_t MarkovData::length(int64_t sample) const {
  if (lengths_.fixed()) return seq_;
  uint64_t s = (seed_ ^ 0x1e9f7a11ULL) * 0x100000001b3ULL + static_cast<uint64_t>(sample) * 0xd1b54a32d192ed03ULL;
  const uint64_t span = static_cast<uint64_t>(lengths_.max - lengths_.min + 1);
  return lengths_.min + static_cast<int64_t>(splitmix64(s) % span);
}

int64_t MarkovData::target_tokens(int64_t first, int64_t n, int64_t len) const {
  int64_t total = 0;
  for (int64_t i = first; i < first + n; ++i) total += std::min(length(i), len);
  return total;
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
