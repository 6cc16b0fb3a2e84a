// See device_memory.h.
#include "device/device_memory.h"

#include "device/base/errors.h"
#include "device/cuda_memory.h"

#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>

namespace zrepro {

namespace {
thread_local int tl_category = -1;  // -1: decided by the phase
thread_local bool tl_host = false;
thread_local int tl_owner = 0;  // the virtual rank charged
}  // namespace

const char* mem_category_name(MemCategory c) {
  static const char* names[] = {"params", "grads", "optimizer_states", "activations", "comm_buffers", "other"};
  return names[static_cast<int>(c)];
}

const char* phase_name(Phase p) {
  static const char* names[] = {"init", "partition", "forward", "backward", "step", "offload", "save", "load"};
  return names[static_cast<int>(p)];
}

std::string format_bytes(int64_t b) {
  char buf[64];
  const double x = static_cast<double>(b);
  if (x >= 1073741824.0) std::snprintf(buf, sizeof buf, "%.2f GiB", x / 1073741824.0);
  else if (x >= 1048576.0) std::snprintf(buf, sizeof buf, "%.2f MiB", x / 1048576.0);
  else if (x >= 1024.0) std::snprintf(buf, sizeof buf, "%.2f KiB", x / 1024.0);
  else std::snprintf(buf, sizeof buf, "%lld bytes", static_cast<long long>(b));
  return buf;
}

DeviceMemory& DeviceMemory::instance() {
  static DeviceMemory* m = new DeviceMemory();  // never destroyed: tensors may outlive main()
  return *m;
}

std::vector<std::unique_ptr<DeviceMemory::Ledger>> DeviceMemory::one_ledger() {
  std::vector<std::unique_ptr<Ledger>> v;
  v.push_back(std::make_unique<Ledger>());
  return v;
}

DeviceMemory::Ledger& DeviceMemory::ledger(int owner) const {
  const int o = owner >= 0 ? owner : tl_owner;
  TORCH_CHECK(o < static_cast<int>(ledgers_.size()), "device memory: no ledger for virtual rank ", o);
  return *ledgers_[o];
}

void DeviceMemory::set_ledgers(int n) {
  std::lock_guard<std::mutex> lock(mu_);
  const Ledger& first = *ledgers_.front();
  while (static_cast<int>(ledgers_.size()) < n) {
    auto l = std::make_unique<Ledger>();
    l->s.capacity = first.s.capacity;
    l->pool.set_capacity(first.s.capacity);
    l->pool.set_expandable(first.pool.expandable());
    ledgers_.push_back(std::move(l));
  }
}

int DeviceMemory::ledgers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(ledgers_.size());
}

void DeviceMemory::install(int64_t capacity, bool caching, bool expandable) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!underlying_) {
    underlying_ = c10::GetCPUAllocator();
    c10::SetCPUAllocator(this, /*priority=*/100);
  }
  for (auto& l : ledgers_) {
    l->s.capacity = capacity;
    // A new allocator setting starts from an empty cache: wholly free segments cached
    // under the previous one are returned (torch.cuda.empty_cache()).
    l->pool.empty_cache();
    for (int64_t seg : l->pool.take_released()) l->segments.erase(seg);
    l->pool.set_capacity(capacity);
    l->pool.set_expandable(expandable);
  }
  caching_ = caching;
  for (auto& l : ledgers_) l->s.reserved = caching_ ? l->pool.reserved() : l->s.allocated;
}

void DeviceMemory::set_capacity(int64_t capacity) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& l : ledgers_) {
    l->s.capacity = capacity;
    l->pool.set_capacity(capacity);
  }
}

PhaseWindow& DeviceMemory::Ledger::window() {
  for (auto it = windows.rbegin(); it != windows.rend(); ++it)
    if (it->phase == phase) return *it;
  windows.push_back({phase, s.allocated, s.by_category});
  return windows.back();
}

void DeviceMemory::note_alloc(Ledger& l, int category, int64_t bytes) const {
  MemorySnapshot& s = l.s;
  s.allocated += bytes;
  s.by_category[category] += bytes;
  PhaseWindow& w = l.window();
  if (s.allocated > w.peak) w.peak = s.allocated, w.by_category = s.by_category;
  s.category_peaks[category] = std::max(s.category_peaks[category], s.by_category[category]);
  s.reserved = caching_ ? l.pool.reserved() : s.allocated;
  s.peak_reserved = std::max(s.peak_reserved, s.reserved);
  s.phases.note(l.phase, s.allocated, s.reserved);
  if (s.allocated > s.peak) {
    s.peak = s.allocated;
    s.by_category_at_peak = s.by_category;
    s.peak_phase = l.phase;
  }
}

void DeviceMemory::log_to(const std::string& path, int owner) {
  close_log();
  std::lock_guard<std::mutex> lock(mu_);
  log_ = path.empty() ? nullptr : std::fopen(path.c_str(), "w");
  log_owner_ = owner;
  log_path_ = path;
  if (!path.empty() && !log_) throw std::runtime_error("cannot write the memory log " + path);
}

void DeviceMemory::close_log() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!log_) return;
  const bool failed = std::fflush(log_) != 0 || std::ferror(log_) != 0;
  const int err = errno;
  const bool closed = std::fclose(log_) == 0;
  log_ = nullptr;
  if (failed || !closed)
    throw IoError("the memory log " + log_path_ + " could not be written whole (" + std::strerror(err) +
                  "): it is cut short; free space there and run again");
}

void DeviceMemory::mark(const char* what, int64_t index) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (log_ && tl_owner == log_owner_) std::fprintf(log_, "M %s %lld\n", what, static_cast<long long>(index));
}

void DeviceMemory::log_event(const Ledger& l, char kind, int64_t bytes, int category) const {
  if (!log_ || &l != ledgers_[log_owner_].get()) return;
  std::fprintf(log_, "%c %lld %s %s %lld\n", kind, static_cast<long long>(bytes),
               mem_category_name(static_cast<MemCategory>(category)), phase_name(l.phase),
               static_cast<long long>(l.s.allocated));
}

void DeviceMemory::copy_data(void* dest, const void* src, std::size_t count) const { std::memcpy(dest, src, count); }

void DeviceMemory::throw_oom(Ledger& l, int category, int64_t bytes) const {
  const MemorySnapshot& s = l.s;
  const int64_t reserved = caching_ ? l.pool.reserved() : s.allocated;
  l.last_oom = "CUDA out of memory (emulated device). Tried to allocate " + format_bytes(bytes) +
               ". GPU 0 has a total capacity of " + format_bytes(s.capacity) + " of which " +
               format_bytes(s.capacity - reserved) + " is free. Of the allocated memory " + format_bytes(s.allocated) +
               " is allocated by PyTorch, and " + format_bytes(reserved - s.allocated) +
               " is reserved by PyTorch but unallocated." +
               (caching_ && !l.pool.expandable() && reserved - s.allocated > bytes
                    ? " If reserved but unallocated memory is large try setting "
                      "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
                    : "") +
               " (category " + mem_category_name(static_cast<MemCategory>(category)) + ", phase " +
               phase_name(l.phase) + ")";
  l.at_oom = s;
  l.at_oom.alloc_retries = l.pool.alloc_retries();
  l.at_oom.reserved = reserved;
  l.at_oom.request = bytes;
  l.at_oom.request_category = category;
  C10_THROW_ERROR(OutOfMemoryError, l.last_oom);
}

c10::DataPtr DeviceMemory::allocate(size_t n) ZREPRO_ALLOCATE_CONST {
  int category = -1;
  const int owner = tl_owner;
  if (!tl_host) {
    std::lock_guard<std::mutex> lock(mu_);
    Ledger& l = ledger(owner);
    category = tl_category >= 0 ? tl_category
               : (l.phase == Phase::forward || l.phase == Phase::backward) ? static_cast<int>(MemCategory::activations)
                                                                           : static_cast<int>(MemCategory::other);
    const int64_t bytes = static_cast<int64_t>(n);
    if (caching_) {
      int64_t new_segment = 0;
      std::optional<CachingPool::Block> cached = l.pool.allocate(bytes, &new_segment);
      for (int64_t seg : l.pool.take_released()) l.segments.erase(seg);  // frees their memory
      if (!cached) throw_oom(l, category, bytes);
      if (new_segment > 0) l.segments[cached->segment] = underlying_->allocate(new_segment);
      void* data = static_cast<char*>(l.segments.at(cached->segment).get()) + cached->offset;
      blocks_[data] = Block{cached->size, category, nullptr, nullptr, *cached, owner};
      note_alloc(l, category, cached->size);
      return c10::DataPtr(data, data, &DeviceMemory::free_raw, c10::Device(c10::kCPU));
    }
    if (l.s.capacity > 0 && l.s.allocated + bytes > l.s.capacity) throw_oom(l, category, bytes);
    note_alloc(l, category, bytes);
    log_event(l, 'A', bytes, category);
  }
  c10::DataPtr inner = underlying_->allocate(n);
  void* data = inner.get();
  const c10::Device dev = inner.device();
  const c10::DeleterFnPtr deleter = inner.get_deleter();
  void* ctx = inner.release_context();
  if (data) {
    std::lock_guard<std::mutex> lock(mu_);
    blocks_[data] = Block{static_cast<int64_t>(n), category, deleter, ctx, CachingPool::Block{-1, 0, 0}, owner};
  }
  return c10::DataPtr(data, data, &DeviceMemory::free_raw, dev);
}

void DeviceMemory::free_raw(void* ptr) {
  if (!ptr) return;
  DeviceMemory& m = instance();
  Block b;
  {
    std::lock_guard<std::mutex> lock(m.mu_);
    auto it = m.blocks_.find(ptr);
    if (it == m.blocks_.end()) return;
    b = it->second;
    m.blocks_.erase(it);
    Ledger& l = m.ledger(b.owner);
    if (b.category >= 0) {
      l.s.allocated -= b.bytes;
      l.s.by_category[b.category] -= b.bytes;
      m.log_event(l, 'F', b.bytes, b.category);
    }
    if (b.cached.segment >= 0) {
      l.pool.free(b.cached);  // cached, not returned: reserved stays
      return;
    }
  }
  if (b.inner_deleter) b.inner_deleter(b.inner_ctx);
}

MemorySnapshot DeviceMemory::snapshot(int owner) const {
  std::lock_guard<std::mutex> lock(mu_);
  Ledger& l = ledger(owner);
  MemorySnapshot s = l.s;
  s.alloc_retries = l.pool.alloc_retries();
  return s;
}

void DeviceMemory::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  Ledger& l = ledger();
  if (!caching_) return;
  l.pool.empty_cache();
  for (int64_t seg : l.pool.take_released()) l.segments.erase(seg);
  l.s.reserved = l.pool.reserved();
}

void DeviceMemory::reset_peaks() {
  std::lock_guard<std::mutex> lock(mu_);
  Ledger& l = ledger();
  l.s.peak = l.s.allocated;
  l.s.peak_reserved = l.s.reserved;
  l.s.by_category_at_peak = l.s.by_category;
  l.s.category_peaks = l.s.by_category;
  l.s.peak_phase = l.phase;
  l.s.phases = {};
  l.s.phases.note(l.phase, l.s.allocated, l.s.reserved);
}

void DeviceMemory::set_phase(Phase p) {
  Phase before;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Ledger& l = ledger();
    before = l.phase;
    l.phase = p;
    l.s.phases.note(p, l.s.allocated, l.s.reserved);  // a phase begins with what is held
    PhaseWindow& w = l.window();
    if (l.s.allocated > w.peak) w.peak = l.s.allocated, w.by_category = l.s.by_category;
  }
  cuda_phase_changed(before, p, owner());  // the same boundaries on a CUDA run
}

std::vector<PhaseWindow> DeviceMemory::take_windows(int owner) {
  std::lock_guard<std::mutex> lock(mu_);
  Ledger& l = ledger(owner);
  std::vector<PhaseWindow> out;
  out.swap(l.windows);
  l.window();
  return out;
}

Phase DeviceMemory::phase(int owner) const {
  std::lock_guard<std::mutex> lock(mu_);
  return ledger(owner).phase;
}

std::string DeviceMemory::last_oom(int owner) const {
  std::lock_guard<std::mutex> lock(mu_);
  return ledger(owner).last_oom;
}

MemorySnapshot DeviceMemory::at_oom(int owner) const {
  std::lock_guard<std::mutex> lock(mu_);
  return ledger(owner).at_oom;
}

DeviceMemory::CategoryScope::CategoryScope(MemCategory c) : prev(tl_category) { tl_category = static_cast<int>(c); }
DeviceMemory::CategoryScope::~CategoryScope() { tl_category = prev; }
DeviceMemory::HostScope::HostScope() : prev(tl_host) { tl_host = true; }
DeviceMemory::HostScope::~HostScope() { tl_host = prev; }
DeviceMemory::DeviceScope::DeviceScope() : prev(tl_host) { tl_host = false; }
DeviceMemory::DeviceScope::~DeviceScope() { tl_host = prev; }
DeviceMemory::OwnerScope::OwnerScope(int owner) : prev(tl_owner) { tl_owner = owner; }
DeviceMemory::OwnerScope::~OwnerScope() { tl_owner = prev; }
int DeviceMemory::owner() { return tl_owner; }

}  // namespace zrepro
