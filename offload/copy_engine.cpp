// See copy_engine.h.
#include "offload/copy_engine.h"

#include <chrono>
#include <stdexcept>

#include "device/device.h"

namespace zrepro {

const char* copy_dir_name(CopyDir d) { return d == CopyDir::d2h ? "d2h" : "h2d"; }

bool CopyEvent::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

bool CopyEvent::landed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return landed_;
}

void CopyEvent::wait() const {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_; });
}

void CopyEvent::wait_landed() const {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return landed_; });
}

void CopyEvent::land() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    landed_ = true;
  }
  cv_.notify_all();
}

void CopyEvent::complete() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    landed_ = done_ = true;
  }
  cv_.notify_all();
}

CopyStats CopyStats::minus(const CopyStats& o) const {
  CopyStats d;
  for (int i = 0; i < 2; ++i) {
    d.bytes[i] = bytes[i] - o.bytes[i];
    d.copies[i] = copies[i] - o.copies[i];
    d.seconds[i] = seconds[i] - o.seconds[i];
  }
  d.exposed_s = exposed_s - o.exposed_s;
  for (int i = 0; i < 2; ++i) d.exposed_dir_s[i] = exposed_dir_s[i] - o.exposed_dir_s[i];
  return d;
}

CopyEngine::CopyEngine(Options o) : o_(o) {
  if (o_.cuda) stream_ = cuda_copy_stream_create();
  thread_ = std::thread([this] { worker(); });
  host_thread_ = std::thread([this] { host_worker(); });
}

CopyEngine::~CopyEngine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();  // every copy has landed and been handed to the host worker
  {
    std::lock_guard<std::mutex> lock(host_mu_);
    host_stopping_ = true;
  }
  host_cv_.notify_all();
  host_thread_.join();
  if (stream_) cuda_copy_stream_destroy(stream_);
}

CopyEventPtr CopyEngine::copy(torch::Tensor dst, torch::Tensor src, CopyDir dir, bool pinned,
                              std::function<void()> then, std::string label) {
  if (dst.numel() != src.numel() || !dst.is_contiguous() || !src.is_contiguous())
    throw std::invalid_argument("CopyEngine::copy (" + label + "): tensors must be contiguous and of equal numel");
  if (o_.cuda && dst.scalar_type() != src.scalar_type())
    throw std::invalid_argument("CopyEngine::copy (" + label + "): a CUDA copy cannot convert dtypes");
  auto event = std::make_shared<CopyEvent>();
  event->dir_ = dir;
  Task t{std::move(dst), std::move(src), dir, pinned, std::move(then), event, std::move(label), wall_seconds()};
  if (!pinned) {
    // Pageable: synchronous on the caller (the whole copy is exposed).
    expose(dir, [&] {
      await_readers(range_of(t.dst));
      run(t);
    });
    return event;
  }
  if (o_.cuda) t.cuda_ready = cuda_record_compute_event();
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(t));
    last_ = event;
  }
  cv_.notify_all();
  return event;
}

CopyEngine::Range CopyEngine::range_of(const torch::Tensor& t) {
  const auto lo = reinterpret_cast<uintptr_t>(t.data_ptr());
  return {lo, lo + static_cast<uintptr_t>(t.numel() * t.element_size())};
}

void CopyEngine::await_readers(const Range& dst) {
  std::unique_lock<std::mutex> lock(host_mu_);
  host_cv_.wait(lock, [&] {
    for (const Range& r : reading_)
      if (r.overlaps(dst)) return false;
    return true;
  });
}

// The bytes a copy puts on the link. A device-to-host copy that widens (a gradient going
// down as fp32, [Note: the boundary gradient goes down as fp32]) is cast on the device
// before it crosses, as DeepSpeed's .to(fp32) then copy_: the destination's width
// crosses. Any other copy crosses at the source's width.
int64_t CopyEngine::link_bytes(const Task& t) {
  const int64_t src = t.src.numel() * static_cast<int64_t>(t.src.element_size());
  const int64_t dst = t.dst.numel() * static_cast<int64_t>(t.dst.element_size());
  return t.dir == CopyDir::d2h ? std::max(src, dst) : src;
}

double CopyEngine::transfer(Task& t, double gbps) {
  const double start = wall_seconds();
  const int64_t bytes = link_bytes(t);
  const auto t0 = std::chrono::steady_clock::now();
  if (o_.cuda) {
    const int kind = t.dir == CopyDir::d2h ? 0 : 1;
    if (t.pinned)
      cuda_copy_async(stream_, t.cuda_ready, t.dst.data_ptr(), t.src.data_ptr(), static_cast<size_t>(bytes), kind);
    else
      cuda_copy_sync(t.dst.data_ptr(), t.src.data_ptr(), static_cast<size_t>(bytes), kind);
    return start;  // real link: nothing to model
  }
  {
    torch::NoGradGuard no_grad;
    t.dst.copy_(t.src);
  }
  if (gbps > 0) {
    // The link model: the copy cannot finish before bytes / bandwidth.
    const auto until = t0 + std::chrono::duration<double>(static_cast<double>(bytes) / (gbps * 1e9));
    std::this_thread::sleep_until(until);
  } else if (!t.pinned) {
    // No link model: a pageable copy still runs at pageable_ratio of the memcpy speed.
    const auto took = std::chrono::steady_clock::now() - t0;
    std::this_thread::sleep_for(took * (1.0 / o_.pageable_ratio - 1.0));
  }
  return start;
}

void CopyEngine::account(const Task& t, double start, double end) {
  const int64_t bytes = link_bytes(t);
  std::lock_guard<std::mutex> lock(mu_);
  const int d = static_cast<int>(t.dir);
  stats_.bytes[d] += bytes;
  stats_.copies[d] += 1;
  stats_.seconds[d] += end - start;
  records_.push_back({t.dir, t.pinned, bytes, t.t_submit, start, end, t.label});
  if (records_.size() > kMaxRecords) records_.pop_front();
}

void CopyEngine::finish(Task& t, bool registered) {
  if (t.then) t.then();
  t.then = nullptr;
  if (registered) {
    const Range dst = range_of(t.dst);
    {
      std::lock_guard<std::mutex> lock(host_mu_);
      for (auto it = reading_.begin(); it != reading_.end(); ++it)
        if (it->lo == dst.lo && it->hi == dst.hi) {
          reading_.erase(it);
          break;
        }
    }
    host_cv_.notify_all();  // a copy may be waiting to rewrite this range
  }
  t.dst = torch::Tensor();  // release before signalling: a waiter may free the memory
  t.src = torch::Tensor();
  t.event->complete();
}

void CopyEngine::run(Task& t) {
  const double start = transfer(t, o_.link_gbps * o_.pageable_ratio);  // 0 stays 0: no model
  account(t, start, wall_seconds());
  finish(t, false);
}

namespace {

// The next task of a worker's queue, or false once it is stopping with nothing left.
template <class T>
bool next_task(std::mutex& mu, std::condition_variable& cv, std::deque<T>& queue, const bool& stopping, T& out) {
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return stopping || !queue.empty(); });
  if (queue.empty()) return false;
  out = std::move(queue.front());
  queue.pop_front();
  return true;
}

}  // namespace

void CopyEngine::worker() {
  for (Task t; next_task(mu_, cv_, queue_, stopping_, t);) {
    const Range dst = range_of(t.dst);
    await_readers(dst);
    const double start = transfer(t, o_.link_gbps);
    account(t, start, wall_seconds());
    t.src = torch::Tensor();  // release before signalling: the source's buffer may be refilled
    t.event->land();
    {
      std::lock_guard<std::mutex> lock(host_mu_);
      if (t.then) reading_.push_back(dst);
      host_queue_.push_back(std::move(t));
    }
    host_cv_.notify_all();
  }
}

void CopyEngine::host_worker() {
  for (Task t; next_task(host_mu_, host_cv_, host_queue_, host_stopping_, t);) finish(t, static_cast<bool>(t.then));
}

void CopyEngine::expose(CopyDir dir, const std::function<void()>& block) {
  const double t0 = wall_seconds();
  block();
  const double dt = wall_seconds() - t0;
  std::lock_guard<std::mutex> lock(mu_);
  stats_.exposed_s += dt;
  stats_.exposed_dir_s[static_cast<int>(dir)] += dt;
}

void CopyEngine::wait(const CopyEventPtr& e) {
  if (e && !e->done()) expose(e->dir_, [&] { e->wait(); });
}

void CopyEngine::wait_landed(const CopyEventPtr& e) {
  if (e && !e->landed()) expose(e->dir_, [&] { e->wait_landed(); });
}

void CopyEngine::synchronize() {
  CopyEventPtr last;
  {
    std::lock_guard<std::mutex> lock(mu_);
    last = last_;
  }
  wait(last);  // copies complete in submission order
}

CopyStats CopyEngine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

std::vector<CopyRecord> CopyEngine::records() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {records_.begin(), records_.end()};
}

}  // namespace zrepro
