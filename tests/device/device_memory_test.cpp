// The tracking allocator on a scripted allocation sequence: categories sum to the
// total, peaks and the phase of the peak, host allocations ignored, capacity
// enforcement with PyTorch's OOM message shape.
#include <gtest/gtest.h>

#include <numeric>

#include "device/device_memory.h"

using namespace zrepro;

namespace {
int64_t sum(const std::array<int64_t, kNumMemCategories>& a) { return std::accumulate(a.begin(), a.end(), int64_t{0}); }
int64_t cat(const MemorySnapshot& s, MemCategory c) { return s.by_category[static_cast<int>(c)]; }
}  // namespace

TEST(DeviceMemory, ScriptedSequenceTracksCategoriesPeaksAndPhases) {
  DeviceMemory& m = DeviceMemory::instance();
  m.install(0);
  m.set_phase(Phase::init);
  m.reset_peaks();
  const MemorySnapshot base = m.snapshot();

  torch::Tensor params;
  {
    DeviceMemory::CategoryScope tag(MemCategory::params);
    params = torch::empty({1000});  // 4000 bytes
  }
  EXPECT_EQ(cat(m.snapshot(), MemCategory::params) - cat(base, MemCategory::params), 4000);

  m.set_phase(Phase::forward);
  torch::Tensor act = torch::empty({2000});  // untagged in forward: activations
  EXPECT_EQ(cat(m.snapshot(), MemCategory::activations) - cat(base, MemCategory::activations), 8000);
  const MemorySnapshot at_top = m.snapshot();
  EXPECT_EQ(at_top.peak, base.allocated + 12000);
  EXPECT_EQ(at_top.peak_phase, Phase::forward);

  act.reset();
  m.set_phase(Phase::step);
  torch::Tensor opt;
  {
    DeviceMemory::CategoryScope tag(MemCategory::optimizer_states);
    opt = torch::empty({500});
  }
  torch::Tensor host;
  {
    DeviceMemory::HostScope h;
    host = torch::empty({100000});  // pinned/offload buffers are not device memory
  }
  const MemorySnapshot s = m.snapshot();
  EXPECT_EQ(s.allocated, base.allocated + 4000 + 2000);
  EXPECT_EQ(sum(s.by_category), s.allocated);  // categories sum to the total
  EXPECT_EQ(s.peak, base.allocated + 12000);   // the peak stays where it was
  EXPECT_EQ(s.peak_phase, Phase::forward);
  EXPECT_EQ(s.by_category_at_peak[static_cast<int>(MemCategory::activations)] -
                base.by_category[static_cast<int>(MemCategory::activations)],
            8000);
  EXPECT_EQ(s.category_peaks[static_cast<int>(MemCategory::activations)] -
                base.by_category[static_cast<int>(MemCategory::activations)],
            8000);
  host.reset();
  EXPECT_EQ(m.snapshot().allocated, s.allocated);
}

TEST(DeviceMemory, CapacityIsEnforcedWithPyTorchsMessage) {
  DeviceMemory& m = DeviceMemory::instance();
  m.install(0);
  m.set_phase(Phase::backward);
  const int64_t used = m.snapshot().allocated;
  m.set_capacity(used + 10000);
  torch::Tensor fits = torch::empty({2000});  // 8000 bytes
  try {
    torch::Tensor too_big = torch::empty({1000});  // 4000 more: past capacity
    FAIL() << "no OOM";
  } catch (const c10::OutOfMemoryError&) {
    const std::string msg = m.last_oom();
    EXPECT_NE(msg.find("CUDA out of memory (emulated device). Tried to allocate 3.91 KiB"), std::string::npos) << msg;
    EXPECT_NE(msg.find("total capacity of"), std::string::npos) << msg;
    EXPECT_NE(msg.find("is reserved by PyTorch but unallocated"), std::string::npos) << msg;
    EXPECT_NE(msg.find("phase backward"), std::string::npos) << msg;
    const MemorySnapshot at = m.at_oom();
    EXPECT_EQ(sum(at.by_category), at.allocated);
    EXPECT_EQ(at.allocated, used + 8000);
  }
  m.set_capacity(0);
  torch::Tensor now_fits = torch::empty({1000});
  EXPECT_EQ(now_fits.numel(), 1000);
}

// [Note: phase peaks]: each phase's peak counts what was held when it began, recurs
// as the maximum over its visits, and phases never entered stay 0.
TEST(DeviceMemory, EachPhaseKeepsItsOwnPeak) {
  DeviceMemory& m = DeviceMemory::instance();
  m.install(0);
  m.set_phase(Phase::init);
  torch::Tensor held;
  {
    DeviceMemory::CategoryScope tag(MemCategory::params);
    held = torch::empty({1000});  // 4000 bytes held through every phase
  }
  m.reset_peaks();
  const int64_t base = m.snapshot().allocated;
  auto phase_peak = [&](Phase p) { return m.snapshot().phases.allocated[static_cast<int>(p)]; };
  for (int64_t extra : {3000, 1000}) {  // two forwards: the larger counts
    m.set_phase(Phase::forward);
    torch::Tensor act = torch::empty({extra});
    m.set_phase(Phase::backward);
    act.reset();
    torch::Tensor grad = torch::empty({200});
  }
  m.set_phase(Phase::step);
  EXPECT_EQ(phase_peak(Phase::init), base);
  EXPECT_EQ(phase_peak(Phase::forward), base + 12000);
  // backward began holding the forward's activations (the larger, 12000) before freeing them.
  EXPECT_EQ(phase_peak(Phase::backward), base + 12000);
  EXPECT_EQ(phase_peak(Phase::step), base);
  EXPECT_EQ(phase_peak(Phase::partition), 0);  // never entered since the reset
  EXPECT_EQ(phase_peak(Phase::offload), 0);
  EXPECT_EQ(m.snapshot().phases.reserved[static_cast<int>(Phase::forward)], base + 12000);  // tracking: reserved = allocated
}

// [Note: phase windows] Each phase entered since the last take: its peak with the
// categories at that moment, in order of entry; a phase that allocates nothing shows
// what it held; taking restarts the windows from what is held now.
TEST(DeviceMemory, PhaseWindowsGiveTheTimelineOfAStep) {
  DeviceMemory& m = DeviceMemory::instance();
  m.install(0);
  m.set_phase(Phase::init);
  torch::Tensor held;
  {
    DeviceMemory::CategoryScope tag(MemCategory::params);
    held = torch::empty({1000});  // 4000 bytes
  }
  m.take_windows();
  // What earlier tests of this process still hold counts in both (the ledger is global).
  const int64_t base = m.snapshot().allocated;
  const int64_t act0 = m.snapshot().by_category[static_cast<int>(MemCategory::activations)];
  m.set_phase(Phase::forward);
  torch::Tensor act;
  {
    DeviceMemory::CategoryScope tag(MemCategory::activations);
    act = torch::empty({3000});
  }
  m.set_phase(Phase::backward);
  act.reset();
  m.set_phase(Phase::step);  // allocates nothing
  const std::vector<PhaseWindow> w = m.take_windows();
  ASSERT_EQ(w.size(), 4u);
  EXPECT_EQ(w[0].phase, Phase::init);
  EXPECT_EQ(w[1].phase, Phase::forward);
  EXPECT_EQ(w[1].peak, base + 12000);
  EXPECT_EQ(w[1].by_category[static_cast<int>(MemCategory::activations)], act0 + 12000);
  EXPECT_EQ(w[2].phase, Phase::backward);
  EXPECT_EQ(w[2].peak, base + 12000) << "backward began holding the activations";
  EXPECT_EQ(w[3].phase, Phase::step);
  EXPECT_EQ(w[3].peak, base) << "a phase that allocates nothing shows what it held";
  const std::vector<PhaseWindow> next = m.take_windows();
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].phase, Phase::step);
  EXPECT_EQ(next[0].peak, base);
}
