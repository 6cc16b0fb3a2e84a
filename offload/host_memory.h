// Host buffers for offload (optimizer states, gradient accumulators, parameter
// shards, staging): never device memory, pinned or pageable as the config's
// pin_memory says. Pinned on the CPU-emulated device is mmap + mlock, bounded by
// RLIMIT_MEMLOCK unless the process holds CAP_IPC_LOCK, exactly as DeepSpeed's
// native pinning backend; on CUDA it is cudaHostAlloc (not bounded by ulimit -l),
// one call per buffer (per layer), never one huge call. A pin that fails throws
// PinnedMemoryError naming the limit, the bytes needed, CAP_IPC_LOCK and the fixes.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace zrepro {

struct MemlockInfo {
  int64_t limit_bytes = -1;    // RLIMIT_MEMLOCK soft limit; -1: unlimited
  bool cap_ipc_lock = false;   // effective CAP_IPC_LOCK (mlock ignores the limit)
  int64_t locked_bytes = 0;    // VmLck of this process now
  // Bytes this process may still lock (-1: no bound).
  int64_t available() const;
};
MemlockInfo memlock_info();
// Runs the rest of this process as a container's non-root user: RLIMIT_MEMLOCK (soft)
// lowered to `bytes` (no higher than the hard limit: the soft limit set is returned) and
// CAP_IPC_LOCK dropped from the effective set. Throws std::runtime_error when the kernel
// refuses either.
int64_t restrict_memlock(int64_t bytes);

struct PinnedMemoryError : std::runtime_error {
  PinnedMemoryError(const std::string& what, int64_t needed, const MemlockInfo& info);
  int64_t needed;
  MemlockInfo info;
};

enum class PinBackend { mlock, cuda };
// Who a host buffer serves: offload (parameter, gradient and optimizer buffers; the
// config's offload pin_memory) or input (the data loader's batches; its own pin_memory).
// Reports keep the two apart: they are different switches (configs/scenarios/pinned-vs-dataloader).
enum class HostUse { offload, input };

class HostMemory {
 public:
  static HostMemory& instance();
  // The subject virtual rank's engine decides (the others never pin for real).
  void set_backend(PinBackend b) {
    if (pins_for_real()) backend_ = b;
  }
  PinBackend backend() const { return backend_; }

  // A host tensor of numel elements, zero-filled. pinned: page-locked (throws
  // PinnedMemoryError), else pageable. `what` names the buffer in errors.
  torch::Tensor empty(int64_t numel, torch::ScalarType dtype, bool pinned, const std::string& what,
                      HostUse use = HostUse::offload);
  // Preflight before allocating: would `bytes` more pinned bytes fit? (mlock backend)
  void preflight(int64_t bytes, const std::string& what) const;

  // The calling thread's virtual rank's bytes (DeviceMemory::owner(); see
  // [Note: virtual ranks' host buffers]).
  int64_t pinned_bytes() const { return counters().pinned.load(); }  // offload buffers
  int64_t input_pinned_bytes() const { return counters().input_pinned.load(); }
  int64_t pageable_bytes() const { return counters().pageable.load(); }
  int64_t peak_pinned_bytes() const { return counters().peak_pinned.load(); }

  // [Note: virtual ranks' host buffers] A process standing in for N ranks counts each
  // virtual rank's host buffers apart, and page-locks only the subject rank's (the one
  // it stands in for, --as-rank): the memlock limit and the pinned bytes of this
  // process are that rank's, as in the real job where each rank is its own process.
  // The other ranks' "pinned" buffers are pageable here but counted as pinned.
  // Call before any virtual rank's thread starts.
  void set_virtual_ranks(int n, int subject);
  // Pageable bytes held for the virtual ranks other than the subject (their pinned
  // buffers included): host memory this process spends to stand in for them; now and
  // at most.
  int64_t peer_bytes() const;
  int64_t peak_peer_bytes() const { return peak_peer_.load(); }

 private:
  HostMemory();
  struct Counters {
    std::atomic<int64_t> pinned{0}, pageable{0}, peak_pinned{0}, input_pinned{0};
  };
  Counters& counters() const;
  bool pins_for_real() const;
  void note(Counters& c, bool pinned, int64_t bytes, HostUse use);
  PinBackend backend_ = PinBackend::mlock;
  std::vector<std::unique_ptr<Counters>> counters_;
  int subject_ = 0;
  std::atomic<int64_t> peak_peer_{0};
};

// CUDA runtime pinning (host_memory_cuda.cpp; false without the CUDA toolkit).
bool cuda_host_alloc(void** ptr, size_t bytes, std::string* error);
void cuda_host_free(void* ptr);

}  // namespace zrepro
