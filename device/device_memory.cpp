// See device_memory.h.
#include "device/device_memory.h"

#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <cstdio>
#include <cstring>

namespace zrepro {

namespace {
thread_local int tl_category = -1;  // -1: decided by the phase
thread_local bool tl_host = false;
}  // namespace

const char* mem_category_name(MemCategory c) {
  static const char* names[] = {"params", "grads", "optimizer_states", "activations", "comm_buffers", "other"};
  return names[static_cast<int>(c)];
}

const char* phase_name(Phase p) {
  static const char* names[] = {"init", "partition", "forward", "backward", "step", "offload"};
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

void DeviceMemory::install(int64_t capacity, bool caching, bool expandable) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!underlying_) {
    underlying_ = c10::GetCPUAllocator();
    c10::SetCPUAllocator(this, /*priority=*/100);
  }
  s_.capacity = capacity;
  pool_.set_capacity(capacity);
  pool_.set_expandable(expandable);
  caching_ = caching;
}

void DeviceMemory::set_capacity(int64_t capacity) {
  std::lock_guard<std::mutex> lock(mu_);
  s_.capacity = capacity;
  pool_.set_capacity(capacity);
}

void DeviceMemory::note_alloc(int category, int64_t bytes) const {
  s_.allocated += bytes;
  s_.by_category[category] += bytes;
  s_.category_peaks[category] = std::max(s_.category_peaks[category], s_.by_category[category]);
  s_.reserved = caching_ ? pool_.reserved() : s_.allocated;
  s_.peak_reserved = std::max(s_.peak_reserved, s_.reserved);
  if (s_.allocated > s_.peak) {
    s_.peak = s_.allocated;
    s_.by_category_at_peak = s_.by_category;
    s_.peak_phase = phase_;
  }
}

void DeviceMemory::log_to(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  if (log_) std::fclose(log_);
  log_ = path.empty() ? nullptr : std::fopen(path.c_str(), "w");
  if (!path.empty() && !log_) throw std::runtime_error("cannot write the memory log " + path);
}

void DeviceMemory::mark(const char* what, int64_t index) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (log_) std::fprintf(log_, "M %s %lld\n", what, static_cast<long long>(index));
}

void DeviceMemory::log_event(char kind, int64_t bytes, int category) const {
  if (!log_) return;
  std::fprintf(log_, "%c %lld %s %s %lld\n", kind, static_cast<long long>(bytes),
               mem_category_name(static_cast<MemCategory>(category)), phase_name(phase_),
               static_cast<long long>(s_.allocated));
}

void DeviceMemory::copy_data(void* dest, const void* src, std::size_t count) const { std::memcpy(dest, src, count); }

c10::DataPtr DeviceMemory::allocate(size_t n) ZREPRO_ALLOCATE_CONST {
  int category = -1;
  if (!tl_host) {
    std::lock_guard<std::mutex> lock(mu_);
    category = tl_category >= 0 ? tl_category
               : (phase_ == Phase::forward || phase_ == Phase::backward) ? static_cast<int>(MemCategory::activations)
                                                                         : static_cast<int>(MemCategory::other);
    const int64_t bytes = static_cast<int64_t>(n);
    std::optional<CachingPool::Block> cached;
    bool oom = false;
    if (caching_) {
      int64_t new_segment = 0;
      cached = pool_.allocate(bytes, &new_segment);
      for (int64_t seg : pool_.take_released()) segments_.erase(seg);  // frees their memory
      oom = !cached;
      if (cached && new_segment > 0) segments_[cached->segment] = underlying_->allocate(new_segment);
    } else {
      oom = s_.capacity > 0 && s_.allocated + bytes > s_.capacity;
    }
    if (oom) {
      const int64_t reserved = caching_ ? pool_.reserved() : s_.allocated;
      last_oom_ = "CUDA out of memory (emulated device). Tried to allocate " + format_bytes(bytes) +
                  ". GPU 0 has a total capacity of " + format_bytes(s_.capacity) + " of which " +
                  format_bytes(s_.capacity - reserved) + " is free. Of the allocated memory " +
                  format_bytes(s_.allocated) + " is allocated by PyTorch, and " + format_bytes(reserved - s_.allocated) +
                  " is reserved by PyTorch but unallocated." +
                  (caching_ && !pool_.expandable() && reserved - s_.allocated > bytes
                       ? " If reserved but unallocated memory is large try setting "
                         "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
                       : "") +
                  " (category " + mem_category_name(static_cast<MemCategory>(category)) + ", phase " +
                  phase_name(phase_) + ")";
      at_oom_ = s_;
      at_oom_.reserved = reserved;
      at_oom_.request = bytes;
      C10_THROW_ERROR(OutOfMemoryError, last_oom_);
    }
    if (caching_) {
      void* data = static_cast<char*>(segments_.at(cached->segment).get()) + cached->offset;
      blocks_[data] = Block{cached->size, category, nullptr, nullptr, *cached};
      note_alloc(category, cached->size);
      return c10::DataPtr(data, data, &DeviceMemory::free_raw, c10::Device(c10::kCPU));
    }
    note_alloc(category, bytes);
    log_event('A', bytes, category);
  }
  c10::DataPtr inner = underlying_->allocate(n);
  void* data = inner.get();
  const c10::Device dev = inner.device();
  const c10::DeleterFnPtr deleter = inner.get_deleter();
  void* ctx = inner.release_context();
  if (data) {
    std::lock_guard<std::mutex> lock(mu_);
    blocks_[data] = Block{static_cast<int64_t>(n), category, deleter, ctx};
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
    if (b.category >= 0) {
      m.s_.allocated -= b.bytes;
      m.s_.by_category[b.category] -= b.bytes;
      m.log_event('F', b.bytes, b.category);
    }
    if (b.cached.segment >= 0) {
      m.pool_.free(b.cached);  // cached, not returned: reserved stays
      return;
    }
  }
  if (b.inner_deleter) b.inner_deleter(b.inner_ctx);
}

MemorySnapshot DeviceMemory::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return s_;
}

void DeviceMemory::reset_peaks() {
  std::lock_guard<std::mutex> lock(mu_);
  s_.peak = s_.allocated;
  s_.by_category_at_peak = s_.by_category;
  s_.category_peaks = s_.by_category;
  s_.peak_phase = phase_;
}

void DeviceMemory::set_phase(Phase p) {
  std::lock_guard<std::mutex> lock(mu_);
  phase_ = p;
}

Phase DeviceMemory::phase() const {
  std::lock_guard<std::mutex> lock(mu_);
  return phase_;
}

std::string DeviceMemory::last_oom() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_oom_;
}

MemorySnapshot DeviceMemory::at_oom() const {
  std::lock_guard<std::mutex> lock(mu_);
  return at_oom_;
}

DeviceMemory::CategoryScope::CategoryScope(MemCategory c) : prev(tl_category) { tl_category = static_cast<int>(c); }
DeviceMemory::CategoryScope::~CategoryScope() { tl_category = prev; }
DeviceMemory::HostScope::HostScope() : prev(tl_host) { tl_host = true; }
DeviceMemory::HostScope::~HostScope() { tl_host = prev; }

}  // namespace zrepro
