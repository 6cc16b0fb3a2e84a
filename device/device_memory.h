// The emulated device's memory: a tracking, capacity-limited allocator installed
// as LibTorch's CPU allocator. Every allocation is charged to a category (scoped
// tags set by the engine; by default the phase decides: activations in forward
// and backward, other elsewhere) and the run phase is recorded at each peak. An
// allocation past capacity throws an OOM with PyTorch's message shape. Host
// buffers that must not count as device memory are allocated under HostScope.
//
// [Note: one ledger per virtual rank] A process that stands in for N ranks
// (--world-size N, trainer/app/virtual_ranks.h) runs each virtual rank's engine on its
// own thread under an OwnerScope. Every allocation is charged to the ledger of the
// thread's owner: its own capacity, peaks, phase, caching pool and OOM. So each
// virtual rank's device memory is exactly what that rank holds in an N-rank job; one
// rank's OOM is that rank's. Snapshot, phase and OOM queries answer for the calling
// thread's owner (0 outside virtual mode, where there is one ledger).
#pragma once
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

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

// save / load: a checkpoint being written or read (trainer/checkpoint/ds_checkpoint.h).
enum class Phase { init, partition, forward, backward, step, offload, save, load, count_ };
constexpr int kNumPhases = static_cast<int>(Phase::count_);
const char* phase_name(Phase p);

// [Note: phase peaks] Each phase's own peak: the most bytes allocated (and reserved)
// while that phase was current, counting what was already held when it began. A phase
// that never began stays 0. Phases recur (every micro-step has a forward), so a phase's
// figure is its maximum over the run. The same figures come from the tracking allocator
// on the CPU-emulated device and from the caching allocator's peak statistics on CUDA
// (cuda_memory.cpp), and `zrepro plan` predicts them: one comparison per phase.
struct PhasePeaks {
  std::array<int64_t, kNumPhases> allocated{}, reserved{};
  void note(Phase p, int64_t alloc, int64_t res) {
    auto& a = allocated[static_cast<int>(p)];
    auto& r = reserved[static_cast<int>(p)];
    a = std::max(a, alloc);
    r = std::max(r, res);
  }
};

struct MemorySnapshot {
  int64_t capacity = 0;  // 0: unlimited
  int64_t request = 0;   // at an OOM: the allocation that failed (bytes asked for)
  int request_category = -1;  // at an OOM on the emulated device: its MemCategory (-1: unknown)
  int64_t allocated = 0, peak = 0;
  int64_t reserved = 0, peak_reserved = 0;  // caching mode: segments; else = allocated
  std::array<int64_t, kNumMemCategories> by_category{};          // now
  std::array<int64_t, kNumMemCategories> by_category_at_peak{};  // when the total peaked
  std::array<int64_t, kNumMemCategories> category_peaks{};       // each category's own peak
  Phase peak_phase = Phase::init;
  PhasePeaks phases;  // [Note: phase peaks]
  // Caching mode (and CUDA): PyTorch's num_alloc_retries so far ([Note: allocator retries]).
  int64_t alloc_retries = 0;
};

// [Note: phase windows] The memory timeline of a run (summary.json memory.timeline,
// report.html's memory over steps and phases): for each phase entered since the last
// take_windows(), the most bytes held while in it and their categories at that moment.
// A window opens with what is held when the phase is entered, so a phase that allocates
// nothing still shows what it held. The loop takes them at the end of every step (the
// first step's include init and partition); a failure takes the unfinished step's.
// Tracked where the tracking allocator sees every allocation (the CPU-emulated device).
struct PhaseWindow {
  Phase phase = Phase::init;
  int64_t peak = 0;
  std::array<int64_t, kNumMemCategories> by_category{};  // at the window's peak
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

  // Ledgers: one per virtual rank (set before any owner's thread starts; 1 by default).
  void set_ledgers(int n);
  int ledgers() const;
  // The calling thread's ledger unless `owner` names one.
  MemorySnapshot snapshot(int owner = -1) const;
  void reset_peaks();  // every peak (allocated, reserved, categories, phases) restarts from now
  // torch.cuda.empty_cache() for the calling thread's ledger: the caching emulation returns
  // its wholly free cached segments (reserved drops to what live blocks need).
  void empty_cache();
  void set_phase(Phase p);
  Phase phase(int owner = -1) const;
  // [Note: phase windows]: the windows since the last call, in the order their phases
  // were first entered; the current phase's window reopens with what is held now.
  std::vector<PhaseWindow> take_windows(int owner = -1);
  // The OOM that ended the run (message and breakdown at that moment), if any.
  std::string last_oom(int owner = -1) const;
  MemorySnapshot at_oom(int owner = -1) const;

  // Every device allocation and free from now on, one line each: "A|F bytes
  // category phase allocated_after" (how gpt_memory.cpp's tapes were derived; redo
  // it after a LibTorch upgrade). Empty path: stop.
  void log_to(const std::string& path, int owner = 0);
  // Ends the log (nothing when none): IoError naming the file when any of it could not be
  // written (a full disk, a quota), so a cut log never ends a run that says it succeeded.
  void close_log();
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
  // The device again inside a HostScope: a device tensor made while host work is under
  // way (Adam's moments created by a checkpoint load, zero/layer_optimizer.cpp).
  struct DeviceScope {
    DeviceScope();
    ~DeviceScope();
    bool prev;
  };
  // The virtual rank this thread's allocations are charged to.
  struct OwnerScope {
    explicit OwnerScope(int owner);
    ~OwnerScope();
    int prev;
  };
  static int owner();  // the calling thread's

 private:
  DeviceMemory() = default;
  struct Block {
    int64_t bytes;
    int category;  // -1: host allocation, not device memory
    c10::DeleterFnPtr inner_deleter;
    void* inner_ctx;
    CachingPool::Block cached{-1, 0, 0};  // caching mode: where it lives
    int owner = 0;                        // the ledger charged
  };
  // One virtual rank's device (see [Note: one ledger per virtual rank]).
  struct Ledger {
    MemorySnapshot s;
    std::string last_oom;
    MemorySnapshot at_oom;
    CachingPool pool;
    std::unordered_map<int64_t, c10::DataPtr> segments;  // caching mode: backing memory
    Phase phase = Phase::init;
    std::vector<PhaseWindow> windows;  // [Note: phase windows]
    PhaseWindow& window();             // the current phase's, opened with what is held
  };
  Ledger& ledger(int owner = -1) const;  // under mu_; -1: the calling thread's
  void note_alloc(Ledger& l, int category, int64_t bytes) const;
  [[noreturn]] void throw_oom(Ledger& l, int category, int64_t bytes) const;
  static void free_raw(void* ptr);
  void log_event(const Ledger& l, char kind, int64_t bytes, int category) const;  // under mu_

  c10::Allocator* underlying_ = nullptr;
  mutable std::mutex mu_;
  mutable std::vector<std::unique_ptr<Ledger>> ledgers_ = one_ledger();
  static std::vector<std::unique_ptr<Ledger>> one_ledger();
  mutable std::unordered_map<void*, Block> blocks_;
  bool caching_ = false;
  std::FILE* log_ = nullptr;
  std::string log_path_;
  int log_owner_ = 0;  // the memory log follows one ledger
};

std::string format_bytes(int64_t bytes);  // "1.50 GiB", PyTorch style

}  // namespace zrepro
