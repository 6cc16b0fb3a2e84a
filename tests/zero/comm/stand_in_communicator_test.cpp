// The stand-in communicator: sum_of_copies is bit for bit the n-1 additions N ranks'
// rank-order sum makes (every binade, ties, subnormals, overflow, NaN, 16-bit payloads),
// and one stand-in rank gets from each collective exactly what the same rank of N
// virtual ranks gets when every rank contributes the same input (the same-data rule),
// with the peers' all-gather slices from its PeerValues and the same byte counts.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "zero/comm/stand_in_communicator.h"
#include "zero/comm/virtual_communicator.h"

using namespace zrepro;

namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Values that exercise every path: random magnitudes over the whole range, mantissas
// with their last bits set (ties after a few additions), subnormals, near-overflow.
std::vector<float> hard_values() {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> any;
  std::vector<float> v = {0.0f, -0.0f, 1.0f, 3.0f, 0.1f, -0.1f, 1.0f + FLT_EPSILON, 1.0f + 3 * FLT_EPSILON,
                          FLT_MIN, FLT_TRUE_MIN, 3 * FLT_TRUE_MIN, FLT_MAX / 3000, -FLT_MAX / 5000,
                          std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()};
  for (int i = 0; i < 3000; ++i) {
    float f;
    uint32_t u = any(rng);
    std::memcpy(&f, &u, 4);
    if (std::isfinite(f)) v.push_back(f);
  }
  for (int i = 0; i < 500; ++i) v.push_back(std::ldexp(1.0f + static_cast<float>(any(rng) % 4096) * FLT_EPSILON, -40 + i % 80));
  return v;
}

// Runs f(rank, comm) on one thread per virtual rank.
void on_virtual_ranks(int n, const std::function<void(int, Communicator&)>& f) {
  auto group = std::make_shared<VirtualGroup>(n, 30);
  std::vector<std::unique_ptr<VirtualCommunicator>> comms;
  for (int k = 0; k < n; ++k) comms.push_back(std::make_unique<VirtualCommunicator>(group, k));
  std::vector<std::thread> threads;
  for (int k = 0; k < n; ++k) threads.emplace_back([&, k] { f(k, *comms[k]); });
  for (auto& t : threads) t.join();
}

// The peers' model of a gather whose every rank j holds `base * (j + 1)`.
struct ScaledPeers : PeerValues {
  torch::Tensor base, mine;
  bool fill_gather(const torch::Tensor& in, torch::Tensor out) override {
    if (in.data_ptr() != mine.data_ptr()) return false;
    const int64_t m = in.numel();
    for (int64_t j = 0; j < out.numel() / m; ++j) out.narrow(0, j * m, m).copy_(base * (j + 1));
    return true;
  }
};

}  // namespace

TEST(SumOfCopies, EqualsTheAdditionsOfNRanksBitForBit) {
  const std::vector<float> values = hard_values();
  const torch::Tensor x = torch::from_blob(const_cast<float*>(values.data()), {static_cast<int64_t>(values.size())},
                                           torch::kFloat).clone();
  for (int64_t n : {1, 2, 3, 5, 7, 8, 100, 1000, 4097, 8192}) {
    const torch::Tensor got = sum_of_copies(x, n);
    int64_t wrong = 0;
    for (size_t i = 0; i < values.size(); ++i) {
      float s = values[i];
      for (int64_t k = 1; k < n; ++k) s += values[i];
      const float g = got[static_cast<int64_t>(i)].item<float>();
      const bool same = bits(s) == bits(g) || (std::isnan(s) && std::isnan(g));
      if (!same && wrong++ < 5)
        ADD_FAILURE() << "n=" << n << " x=" << values[i] << " (bits " << bits(values[i]) << "): additions " << s
                      << ", sum_of_copies " << g;
    }
    EXPECT_EQ(wrong, 0) << "n=" << n;
  }
  EXPECT_TRUE(std::isnan(sum_of_copies(torch::tensor({NAN}), 9).item<float>()));
}

TEST(SumOfCopies, SixteenBitPayloadsAccumulateInFp32) {
  // 0.1 in bf16, 3 copies summed in fp32 (as the virtual and MPI reductions sum 16-bit
  // payloads), returned in fp32 for the caller to round once.
  const torch::Tensor x = torch::tensor({0.1f, 300.0f}).to(torch::kBFloat16);
  const torch::Tensor got = sum_of_copies(x, 3);
  EXPECT_EQ(got.scalar_type(), torch::kFloat);
  const torch::Tensor x32 = x.to(torch::kFloat);
  EXPECT_TRUE(torch::equal(got, x32 + x32 + x32));
}

TEST(StandInComm, EachCollectiveEqualsTheSameRankOfNVirtualRanksUnderTheSameData) {
  const int n = 4, me = 2;
  const torch::Tensor grads = torch::randn({4 * 5}, torch::TensorOptions().dtype(torch::kFloat)) / 3;
  const torch::Tensor half = torch::randn({8}).to(torch::kBFloat16);
  const torch::Tensor slice = torch::randn({3});
  // The job: every rank reduces the same gradients, gathers slice * (rank + 1).
  torch::Tensor v_ar, v_half, v_rs, v_ag;
  CommStats v_stats;
  on_virtual_ranks(n, [&](int k, Communicator& c) {
    torch::Tensor ar = grads.clone(), h = half.clone(), rs = torch::empty({5}), ag = torch::empty({3 * n});
    c.all_reduce(ar, "ar")->wait();
    c.all_reduce(h, "bf16")->wait();
    c.reduce_scatter(rs, grads.clone(), "rs")->wait();
    c.all_gather(ag, slice * (k + 1), "ag")->wait();
    if (k == me) v_ar = ar, v_half = h, v_rs = rs, v_ag = ag, v_stats = c.stats();
  });
  StandInCommunicator c(me, n);
  ScaledPeers peers;
  peers.base = slice;
  peers.mine = slice * (me + 1);
  c.set_peer_values(&peers);
  torch::Tensor ar = grads.clone(), h = half.clone(), rs = torch::empty({5}), rs_in = grads.clone(),
                ag = torch::empty({3 * n});
  c.all_reduce(ar, "ar")->wait();
  c.all_reduce(h, "bf16")->wait();
  c.reduce_scatter(rs, rs_in, "rs")->wait();
  c.all_gather(ag, peers.mine, "ag")->wait();
  EXPECT_TRUE(torch::equal(ar, v_ar));
  EXPECT_TRUE(torch::equal(h, v_half));
  EXPECT_TRUE(torch::equal(rs, v_rs));
  EXPECT_TRUE(torch::equal(ag, v_ag));
  // The reduce-scatter's input holds every rank's reduced slice, for the peers' model.
  EXPECT_TRUE(torch::equal(rs_in.narrow(0, 5 * me, 5), rs));
  const CommStats s = c.stats();
  for (CollOp op : {CollOp::all_reduce, CollOp::reduce_scatter, CollOp::all_gather}) {
    EXPECT_EQ(s[op].bytes, v_stats[op].bytes) << coll_op_name(op);
    EXPECT_EQ(s[op].calls, v_stats[op].calls) << coll_op_name(op);
  }
}

TEST(StandInComm, AnAllReduceOfEveryRanksOwnInputSumsThemInRankOrder) {
  StandInCommunicator c(1, 3);
  torch::Tensor t = torch::tensor({0.5, 2.0}, torch::kDouble);
  torch::Tensor rows = torch::tensor({{0.1, 1.0}, {0.5, 2.0}, {0.2, 4.0}}, torch::kDouble);
  c.set_rank_inputs(t, rows);
  c.all_reduce_wait(t, "stats");
  EXPECT_EQ(t[0].item<double>(), (0.1 + 0.5) + 0.2);
  EXPECT_EQ(t[1].item<double>(), 7.0);
  // Given once: the next all-reduce of the same tensor sums copies again.
  c.all_reduce_wait(t, "stats");
  EXPECT_EQ(t[1].item<double>(), 21.0);
}

TEST(StandInComm, AGatherOfABufferNoPeerModelHoldsFailsSayingSo) {
  StandInCommunicator c(0, 2);
  torch::Tensor out = torch::empty({4});
  try {
    c.all_gather_wait(out, torch::ones({2}), "activations");
    FAIL() << "expected CommError";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("--peers run"), std::string::npos) << e.what();
  }
}
