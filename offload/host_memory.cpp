// See host_memory.h.
#include "offload/host_memory.h"

#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "device/cuda_memory.h"
#include "device/device_memory.h"

namespace zrepro {

namespace {

constexpr int kCapIpcLock = 14;

int64_t page_round(int64_t bytes) {
  const int64_t page = ::sysconf(_SC_PAGESIZE);
  return (std::max<int64_t>(bytes, 1) + page - 1) / page * page;
}

std::string describe(const MemlockInfo& i) {
  std::ostringstream os;
  if (i.limit_bytes < 0)
    os << "ulimit -l is unlimited";
  else
    os << "ulimit -l is " << i.limit_bytes / 1024 << " KiB (" << format_bytes(i.limit_bytes) << ")";
  os << ", " << format_bytes(i.locked_bytes) << " already locked, CAP_IPC_LOCK " << (i.cap_ipc_lock ? "held" : "not held");
  return os.str();
}

std::string fixes() {
  return "Fix: raise the memlock limit (ulimit -l unlimited; memlock in /etc/security/limits.conf; docker run "
         "--ulimit memlock=-1), or set \"pin_memory\": false in offload_optimizer / offload_param (pageable buffers: "
         "synchronous, slower copies).";
}

}  // namespace

int64_t MemlockInfo::available() const {
  if (cap_ipc_lock || limit_bytes < 0) return -1;
  return std::max<int64_t>(0, limit_bytes - locked_bytes);
}

MemlockInfo memlock_info() {
  MemlockInfo info;
  rlimit rl{};
  if (::getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
    info.limit_bytes = static_cast<int64_t>(rl.rlim_cur);
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("CapEff:", 0) == 0) {
      const unsigned long long caps = std::strtoull(line.c_str() + 7, nullptr, 16);
      info.cap_ipc_lock = (caps >> kCapIpcLock) & 1ULL;
    } else if (line.rfind("VmLck:", 0) == 0) {
      info.locked_bytes = std::strtoll(line.c_str() + 6, nullptr, 10) * 1024;  // "VmLck:   123 kB"
    }
  }
  return info;
}

int64_t restrict_memlock(int64_t bytes) {
  rlimit rl{};
  if (::getrlimit(RLIMIT_MEMLOCK, &rl) != 0) throw std::runtime_error(std::string("getrlimit: ") + std::strerror(errno));
  rl.rlim_cur = static_cast<rlim_t>(bytes);
  if (rl.rlim_max != RLIM_INFINITY && rl.rlim_cur > rl.rlim_max) rl.rlim_cur = rl.rlim_max;
  if (::setrlimit(RLIMIT_MEMLOCK, &rl) != 0) throw std::runtime_error(std::string("setrlimit: ") + std::strerror(errno));
  __user_cap_header_struct head{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (::syscall(SYS_capget, &head, data) != 0) throw std::runtime_error(std::string("capget: ") + std::strerror(errno));
  data[kCapIpcLock / 32].effective &= ~(1u << (kCapIpcLock % 32));
  if (::syscall(SYS_capset, &head, data) != 0) throw std::runtime_error(std::string("capset: ") + std::strerror(errno));
  return static_cast<int64_t>(rl.rlim_cur);
}

PinnedMemoryError::PinnedMemoryError(const std::string& what, int64_t n, const MemlockInfo& i)
    : std::runtime_error(what + ". " + describe(i) + ". " + fixes()), needed(n), info(i) {}

HostMemory& HostMemory::instance() {
  static HostMemory* m = new HostMemory();  // never destroyed: buffers may outlive main()
  return *m;
}

HostMemory::HostMemory() { counters_.push_back(std::make_unique<Counters>()); }

HostMemory::Counters& HostMemory::counters() const {
  const int o = DeviceMemory::owner();
  TORCH_CHECK(o < static_cast<int>(counters_.size()), "host memory: no counters for virtual rank ", o);
  return *counters_[o];
}

bool HostMemory::pins_for_real() const { return DeviceMemory::owner() == subject_; }

void HostMemory::set_virtual_ranks(int n, int subject) {
  while (static_cast<int>(counters_.size()) < n) counters_.push_back(std::make_unique<Counters>());
  subject_ = subject;
}

int64_t HostMemory::peer_bytes() const {
  int64_t b = 0;
  for (size_t k = 0; k < counters_.size(); ++k)
    if (static_cast<int>(k) != subject_)
      b += counters_[k]->pinned.load() + counters_[k]->pageable.load() + counters_[k]->input_pinned.load();
  return b;
}

void HostMemory::note(Counters& c, bool pinned, int64_t bytes, HostUse use) {
  if (pinned && use == HostUse::input) {
    c.input_pinned += bytes;
  } else if (pinned) {
    const int64_t now = c.pinned += bytes;
    int64_t peak = c.peak_pinned.load();
    while (now > peak && !c.peak_pinned.compare_exchange_weak(peak, now)) {
    }
  } else {
    c.pageable += bytes;
  }
  if (!pins_for_real()) {
    const int64_t now = peer_bytes();
    int64_t peak = peak_peer_.load();
    while (now > peak && !peak_peer_.compare_exchange_weak(peak, now)) {
    }
  }
}

void HostMemory::preflight(int64_t bytes, const std::string& what) const {
  if (backend_ != PinBackend::mlock || bytes <= 0 || !pins_for_real()) return;
  const MemlockInfo info = memlock_info();
  const int64_t avail = info.available();
  if (avail >= 0 && bytes > avail)
    throw PinnedMemoryError("pinned host memory: " + what + " needs " + format_bytes(bytes) + " of page-locked memory, " +
                                "more than this process may lock (" + format_bytes(avail) + ")",
                            bytes, info);
}

torch::Tensor HostMemory::empty(int64_t numel, torch::ScalarType dtype, bool pinned, const std::string& what,
                                HostUse use) {
  Counters& c = counters();
  std::atomic<int64_t>& pinned_count = use == HostUse::input ? c.input_pinned : c.pinned;
  const int64_t bytes = numel * static_cast<int64_t>(c10::elementSize(dtype));
  const auto opts = torch::TensorOptions().dtype(dtype).device(torch::kCPU);
  void* ptr = nullptr;
  std::function<void(void*)> deleter;
  if (!pinned || !pins_for_real()) {
    ptr = std::calloc(static_cast<size_t>(std::max<int64_t>(bytes, 1)), 1);
    if (!ptr) throw std::bad_alloc();
    std::atomic<int64_t>& count = pinned ? pinned_count : c.pageable;
    deleter = [&count, bytes](void* p) {
      std::free(p);
      count -= bytes;
    };
  } else if (backend_ == PinBackend::cuda) {
    cuda_init(-1);  // else LibTorch calls this memory unpinned (and copies from it synchronously)
    std::string err;
    if (!cuda_host_alloc(&ptr, static_cast<size_t>(std::max<int64_t>(bytes, 1)), &err))
      throw PinnedMemoryError("pinned host memory: cudaHostAlloc of " + format_bytes(bytes) + " for " + what +
                                  " failed: " + err,
                              bytes, memlock_info());
    std::memset(ptr, 0, static_cast<size_t>(bytes));
    deleter = [&pinned_count, bytes](void* p) {
      cuda_host_free(p);
      pinned_count -= bytes;
    };
  } else {
    const int64_t mapped = page_round(bytes);
    ptr = ::mmap(nullptr, static_cast<size_t>(mapped), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ptr == MAP_FAILED) throw std::bad_alloc();
    if (::mlock(ptr, static_cast<size_t>(mapped)) != 0) {
      const int err = errno;
      ::munmap(ptr, static_cast<size_t>(mapped));
      throw PinnedMemoryError("pinned host memory: mlock of " + format_bytes(mapped) + " for " + what + " failed (" +
                                  std::strerror(err) + ")",
                              mapped, memlock_info());
    }
    deleter = [&pinned_count, mapped, bytes](void* p) {
      ::munlock(p, static_cast<size_t>(mapped));
      ::munmap(p, static_cast<size_t>(mapped));
      pinned_count -= bytes;
    };
  }
  note(c, pinned, bytes, use);
  return torch::from_blob(ptr, {numel}, deleter, opts);
}

}  // namespace zrepro
