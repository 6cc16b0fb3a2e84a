// The virtual communicator: N threads of one process get exactly what N processes'
// collectives give (sums, slices, gathers, broadcast, bf16 summed in fp32), the ZeRO
// byte counts per rank, and a mismatched or abandoned collective fails every rank.
#include <gtest/gtest.h>

#include <functional>
#include <thread>
#include <vector>

#include "device/device_memory.h"
#include "zero/comm/virtual_communicator.h"

using namespace zrepro;

namespace {

// Runs f(rank, comm) on one thread per virtual rank; returns each rank's error text ("" if none).
std::vector<std::string> on_ranks(int n, const std::function<void(int, Communicator&)>& f, double timeout_s = 30) {
  auto group = std::make_shared<VirtualGroup>(n, timeout_s);
  std::vector<std::unique_ptr<VirtualCommunicator>> comms;
  for (int k = 0; k < n; ++k) comms.push_back(std::make_unique<VirtualCommunicator>(group, k));
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int k = 0; k < n; ++k)
    threads.emplace_back([&, k] {
      try {
        f(k, *comms[k]);
      } catch (const std::exception& e) {
        errors[k] = e.what();
        group->abort(e.what());
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

}  // namespace

TEST(VirtualComm, CollectivesEqualWhatNProcessesCompute) {
  const int n = 4;
  std::vector<torch::Tensor> ar(n), rs(n), ag(n), bc(n);
  on_ranks(n, [&](int k, Communicator& c) {
    ar[k] = torch::full({6}, static_cast<float>(k + 1));
    c.all_reduce(ar[k], "ar")->wait();
    torch::Tensor in = torch::arange(0, 8, torch::kFloat) * static_cast<float>(k + 1);
    rs[k] = torch::empty({2});
    c.reduce_scatter(rs[k], in, "rs")->wait();
    ag[k] = torch::zeros({3 * n});
    c.all_gather(ag[k], torch::full({3}, static_cast<float>(10 * k)), "ag")->wait();
    bc[k] = torch::full({2}, static_cast<float>(k));
    c.broadcast(bc[k], 2, "bc")->wait();
    const CommStats s = c.stats();
    EXPECT_EQ(s[CollOp::all_reduce].bytes, 2 * 6 * 4);
    EXPECT_EQ(s[CollOp::reduce_scatter].bytes, 8 * 4);
    EXPECT_EQ(s[CollOp::all_gather].bytes, 3 * n * 4);
  });
  for (int k = 0; k < n; ++k) {
    EXPECT_TRUE(torch::equal(ar[k], torch::full({6}, 10.0f)));  // 1+2+3+4
    // sum over ranks of arange * (r+1) = arange * 10; rank k keeps elements 2k, 2k+1
    EXPECT_TRUE(torch::equal(rs[k], torch::tensor({20.0f * k, 20.0f * k + 10})));
    for (int j = 0; j < n; ++j) EXPECT_TRUE(torch::equal(ag[k].narrow(0, 3 * j, 3), torch::full({3}, 10.0f * j)));
    EXPECT_TRUE(torch::equal(bc[k], torch::full({2}, 2.0f)));
  }
}

TEST(VirtualComm, InPlaceAllGatherAndBf16SumInFp32) {
  const int n = 2;
  std::vector<torch::Tensor> flat(n), half(n);
  on_ranks(n, [&](int k, Communicator& c) {
    flat[k] = torch::zeros({4});
    flat[k].narrow(0, 2 * k, 2).fill_(static_cast<float>(k + 1));
    c.all_gather(flat[k], flat[k].narrow(0, 2 * k, 2), "in place")->wait();
    // 256 + 1 is not a bf16 value: summed in fp32 and rounded once, 256 + 1 + 1 = 258 is.
    half[k] = torch::tensor({k == 0 ? 256.0f : 2.0f}).to(torch::kBFloat16);
    c.all_reduce(half[k], "bf16")->wait();
  });
  for (int k = 0; k < n; ++k) {
    EXPECT_TRUE(torch::equal(flat[k], torch::tensor({1.0f, 1.0f, 2.0f, 2.0f})));
    EXPECT_EQ(half[k].item<float>(), 258.0f);
  }
}

TEST(VirtualComm, MismatchedCollectivesFailEveryRankNamingBoth) {
  const std::vector<std::string> errors = on_ranks(2, [&](int k, Communicator& c) {
    torch::Tensor t = torch::ones({k == 0 ? 4 : 5});
    c.all_reduce(t, "grads")->wait();
  });
  for (const std::string& e : errors) {
    EXPECT_NE(e.find("disagree"), std::string::npos) << e;
    EXPECT_NE(e.find("in 4"), std::string::npos) << e;
    EXPECT_NE(e.find("in 5"), std::string::npos) << e;
  }
}

TEST(VirtualComm, ARankThatNeverArrivesTimesOutNamingIt) {
  const std::vector<std::string> errors = on_ranks(
      3,
      [&](int k, Communicator& c) {
        if (k == 2) return;  // stops early
        torch::Tensor t = torch::ones({2});
        c.all_reduce(t, "grads")->wait();
      },
      0.5);
  EXPECT_NE(errors[0].find("rank 2"), std::string::npos) << errors[0];
  EXPECT_FALSE(errors[1].empty());
  EXPECT_TRUE(errors[2].empty());
}

TEST(VirtualComm, ScratchIsNobodysDeviceMemory) {
  DeviceMemory& mem = DeviceMemory::instance();
  mem.install(0);
  const int64_t before = mem.snapshot(0).peak;
  {
    DeviceMemory::HostScope host;  // the test's own tensors
    on_ranks(2, [&](int, Communicator& c) {
      DeviceMemory::HostScope h;
      torch::Tensor t = torch::ones({1 << 16});
      c.all_reduce(t, "big")->wait();
    });
  }
  EXPECT_EQ(mem.snapshot(0).peak, before);  // the group's fp32 accumulator was not charged
}
