// The emulated device's memory: a tracking, capacity-limited allocator installed
// as LibTorch's CPU allocator. Every allocation is charged to a category (scoped
// tags set by the engine; by default the phase decides: activations in forward
// and backward, other elsewhere) and the run phase is recorded at each peak. An
// allocation past capacity throws an OOM with PyTorch's message shape. Host
// buffers that must not count as device memory are allocated under HostScope.
#pragma once
#include <array>
#include <cstdio>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

#include <c10/core/Allocator.h>
#include <torch/version.h>

#include "device/caching_pool.h"

// LibTorch 2.x made Allocator::allocate non-const (1.13: const).
#if TORCH_VERSION_MAJOR >= 2
#define ZREPRO_ALLOCATE_CONST
#else
#define ZREPRO_ALLOCATE_CONST const
#endif

namespace zrepro {

enum class MemCategory { params, grads, optimizer_states, activations, comm_buffers, other, count_ };
constexpr int kNumMemCategories = static_cast<int>(MemCategory::count_);
const char* mem_category_name(MemCategory c);

enum class Phase { init, partition, forward, backward, step, offload, count_ };
const char* phase_name(Phase p);

struct MemorySnapshot {
  int64_t capacity = 0;  // 0: unlimited
  int64_t request = 0;   // at an OOM: the allocation that failed (bytes asked for)
  int64_t allocated = 0, peak = 0;
  int64_t reserved = 0, peak_reserved = 0;  // caching mode: segments; else = allocated
  std::array<int64_t, kNumMemCategories> by_category{};          // now
  std::array<int64_t, kNumMemCategories> by_category_at_peak{};  // when the total peaked
  std::array<int64_t, kNumMemCategories> category_peaks{};       // each category's own peak
  Phase peak_phase = Phase::init;
};

// Thrown (as c10::OutOfMemoryError, so LibTorch passes it through) past capacity.
// The run's top level recognises it and reports status "oom", exit 3.
class DeviceMemory : public c10::Allocator {
 public:
  static DeviceMemory& instance();
  // Installs the tracking allocator as LibTorch's CPU allocator. capacity 0: no
  // limit. caching: emulate the CUDA caching allocator (rounding, segments, cached
  // blocks, reserved vs allocated) instead of charging exact request sizes.
  // expandable: the caching emulation with PyTorch's expandable segments.
  void install(int64_t capacity, bool caching = false, bool expandable = false);
  bool caching() const { return caching_; }
  void set_capacity(int64_t capacity);

  c10::DataPtr allocate(size_t n) ZREPRO_ALLOCATE_CONST override;
  // Some kernels use raw_allocate, which needs data == context and a raw deleter.
  c10::DeleterFnPtr raw_deleter() const override { return &DeviceMemory::free_raw; }
  // Newer LibTorch: pure virtual copy_data (no override keyword: absent in 1.13).
  void copy_data(void* dest, const void* src, std::size_t count) const;

  MemorySnapshot snapshot() const;
  void reset_peaks();
  void set_phase(Phase p);
  Phase phase() const;
  // The OOM that ended the run (message and breakdown at that moment), if any.
  std::string last_oom() const;
  MemorySnapshot at_oom() const;

  // Every device allocation and free from now on, one line each: "A|F bytes
  // category phase allocated_after" (how gpt_memory.cpp's tapes were derived; redo
  // it after a LibTorch upgrade). Empty path: stop.
  void log_to(const std::string& path);
  // A line "M what" in that log (nothing when not logging): where the model and the
  // engine are, for the tape recorder (tests/trainer/planner/tapes_test.cpp).
  void mark(const char* what, int64_t index) const;

  // RAII tags: allocations on this thread go to a category / bypass the device.
  struct CategoryScope {
    explicit CategoryScope(MemCategory c);
    ~CategoryScope();
    int prev;
  };
  struct HostScope {
    HostScope();
    ~HostScope();
    bool prev;
  };

 private:
  DeviceMemory() = default;
  struct Block {
    int64_t bytes;
    int category;  // -1: host allocation, not device memory
    c10::DeleterFnPtr inner_deleter;
    void* inner_ctx;
    CachingPool::Block cached{-1, 0, 0};  // caching mode: where it lives
  };
  void note_alloc(int category, int64_t bytes) const;
  static void free_raw(void* ptr);
  void log_event(char kind, int64_t bytes, int category) const;  // under mu_

  c10::Allocator* underlying_ = nullptr;
  mutable std::mutex mu_;
  mutable MemorySnapshot s_;
  mutable std::string last_oom_;
  mutable MemorySnapshot at_oom_;
  mutable std::unordered_map<void*, Block> blocks_;
  bool caching_ = false;
  mutable CachingPool pool_;
  mutable std::unordered_map<int64_t, c10::DataPtr> segments_;  // caching mode: backing memory
  Phase phase_ = Phase::init;
  std::FILE* log_ = nullptr;
};

std::string format_bytes(int64_t bytes);  // "1.50 GiB", PyTorch style

}  // namespace zrepro
