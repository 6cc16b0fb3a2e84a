// Offload's parts in isolation: the copy engine (order, events, the host-link model,
// pageable copies), host memory (pinned accounting) and the optimizer's landing
// buffers (no buffer rewritten before its add read it).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "device/device_memory.h"
#include "offload/copy_engine.h"
#include "offload/host_memory.h"
#include "offload/optimizer_offload.h"
#include "tests/support/train_helpers.h"
#include "tests/support/process.h"
#include "trainer/config/ds_config.h"
#include "trainer/config/model_spec.h"
#include "trainer/loop/train.h"

using namespace zrepro;
using zrepro_test::expect_same_losses;
using zrepro_test::train_tiny;

TEST(CopyEngine, CopiesCompleteInOrderAfterTheirHostWork) {
  CopyEngine ce({/*link_gbps=*/0.2, 0.5, false});
  HostMemory& host = HostMemory::instance();
  std::vector<torch::Tensor> dst;
  std::vector<CopyEventPtr> events;
  std::vector<int> order;
  std::mutex mu;
  for (int i = 0; i < 8; ++i) {
    torch::Tensor src = torch::full({1000 * (8 - i)}, static_cast<float>(i));  // later copies are smaller
    dst.push_back(host.empty(src.numel(), torch::kFloat, true, "test"));
    events.push_back(ce.copy(dst.back(), src, CopyDir::d2h, true, [&, i] {
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(i);
    }));
  }
  for (int i = 0; i < 8; ++i) {
    ce.wait(events[i]);
    // An event completes only after its bytes landed and its host work ran.
    EXPECT_EQ(dst[i][0].item<float>(), static_cast<float>(i));
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_GE(order.size(), static_cast<size_t>(i + 1));
  }
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  const auto rec = ce.records();
  ASSERT_EQ(rec.size(), 8u);
  for (size_t i = 1; i < rec.size(); ++i) EXPECT_GE(rec[i].t_start, rec[i - 1].t_end);  // one engine, FIFO
  // The link model is a lower bound: 4000 bytes at 0.2 GB/s take at least 20 us.
  for (const auto& r : rec) EXPECT_GE(r.t_end - r.t_start, r.bytes / 0.2e9 * 0.999);
  const CopyStats s = ce.stats();
  EXPECT_EQ(s.copies[0], 8);
  EXPECT_EQ(s.bytes[0], 4 * 1000 * (8 + 7 + 6 + 5 + 4 + 3 + 2 + 1));
}

TEST(CopyEngine, TheLinkRunsAheadOfHostWorkButNeverRewritesWhatItReads) {
  // [Note: the link does not wait for host work] Copy A's host work blocks until copy
  // B (another destination) has landed: it can only land if the link runs while A's
  // host work is pending. Copy C rewrites A's destination: it must wait until A's
  // host work read it, whatever the timing.
  CopyEngine ce({/*link_gbps=*/0, 0.5, false});
  HostMemory& host = HostMemory::instance();
  torch::Tensor a = host.empty(4096, torch::kFloat, true, "test a");
  torch::Tensor b = host.empty(4096, torch::kFloat, true, "test b");
  std::atomic<bool> b_landed_during_a{false};
  float a_read = -1;
  CopyEventPtr ea = ce.copy(a, torch::full({4096}, 1.0f), CopyDir::d2h, true, [&] {
    for (int i = 0; i < 5000 && !b_landed_during_a; ++i) {
      if (b[4095].item<float>() == 2.0f) b_landed_during_a = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    a_read = a.sum().item<float>();
  });
  CopyEventPtr eb = ce.copy(b, torch::full({4096}, 2.0f), CopyDir::d2h, true);
  CopyEventPtr ec = ce.copy(a.narrow(0, 1000, 1000), torch::full({1000}, 3.0f), CopyDir::d2h, true);
  ce.wait(ec);
  EXPECT_TRUE(ea->done() && eb->done());  // completions stay in submission order
  EXPECT_TRUE(b_landed_during_a) << "the link waited for host work on another destination";
  EXPECT_EQ(a_read, 4096.0f) << "copy C rewrote A's destination before A's host work read it";
  EXPECT_EQ(a.sum().item<float>(), 4096.0f + 2.0f * 1000);
}

TEST(CopyEngine, PageableCopiesAreSynchronousAndExposed) {
  CopyEngine ce({0, 0.5, false});
  torch::Tensor src = torch::arange(4096, torch::kFloat);
  torch::Tensor dst = HostMemory::instance().empty(4096, torch::kFloat, false, "test");
  CopyEventPtr e = ce.copy(dst, src, CopyDir::d2h, /*pinned=*/false);
  EXPECT_TRUE(e->done());  // done when copy() returns
  EXPECT_TRUE(dst.equal(src));
  EXPECT_GT(ce.stats().exposed_s, 0);
  EXPECT_THROW(ce.copy(dst.narrow(0, 0, 10), src, CopyDir::d2h, true), std::invalid_argument);
}

TEST(HostMemory, PinnedAndPageableBuffersAreCountedAndNotDeviceMemory) {
  HostMemory& host = HostMemory::instance();
  DeviceMemory& dev = DeviceMemory::instance();
  dev.install(0);
  const int64_t dev0 = dev.snapshot().allocated, pinned0 = host.pinned_bytes(), pageable0 = host.pageable_bytes();
  {
    torch::Tensor p = host.empty(1 << 16, torch::kFloat, true, "test pinned");
    torch::Tensor q = host.empty(1 << 10, torch::kBFloat16, false, "test pageable");
    EXPECT_EQ(host.pinned_bytes() - pinned0, 4 << 16);
    EXPECT_EQ(host.pageable_bytes() - pageable0, 2 << 10);
    EXPECT_EQ(p.sum().item<float>(), 0.0f);  // zero-filled
    EXPECT_EQ(dev.snapshot().allocated - dev0, 0);
    const MemlockInfo info = memlock_info();
#if defined(__SANITIZE_ADDRESS__)
    // AddressSanitizer intercepts mlock and returns 0 without locking (its shadow
    // memory), so VmLck stays 0 under scripts/sanitize.sh.
    (void)info;
#else
    EXPECT_GE(info.locked_bytes, 4 << 16);  // really mlock-ed (VmLck)
#endif
  }
  EXPECT_EQ(host.pinned_bytes(), pinned0);
  EXPECT_EQ(host.pageable_bytes(), pageable0);
}

TEST(OptimizerOffload, LandingBufferIsRewrittenOnlyAfterItsAddReadIt) {
  // A slow link and no waiting on the compute side: each micro-step's piece lands in
  // the same range as the previous one, so any reordering of copies and host adds
  // would corrupt the sums.
  CopyEngine ce({0.05, 0.5, false});
  OptimizerOffload::Options o;
  OptimizerOffload off({1024}, {true}, o, ce);
  for (int micro = 0; micro < 3; ++micro) {
    off.begin_micro_step(micro);
    for (int piece = 0; piece < 4; ++piece)  // 4 pieces of 256 cover the partition
      off.add_grad(0, piece * 256, torch::full({256}, static_cast<float>(1 + piece + 10 * micro)));
  }
  off.finish_grads();
  for (int piece = 0; piece < 4; ++piece) {
    const float want = (1 + piece) + (11 + piece) + (21 + piece);  // micro 0 copies, 1 and 2 add
    EXPECT_TRUE(off.grad(0).narrow(0, piece * 256, 256).eq(want).all().item<bool>()) << "piece " << piece;
  }
  EXPECT_EQ(ce.stats().copies[0], 12);
}
