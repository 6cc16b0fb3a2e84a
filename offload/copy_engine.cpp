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

void CopyEvent::wait() const {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_; });
}

void CopyEvent::complete() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
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
  return d;
}

CopyEngine::CopyEngine(Options o) : o_(o) {
  if (o_.cuda) stream_ = cuda_copy_stream_create();
  thread_ = std::thread([this] { worker(); });
}

CopyEngine::~CopyEngine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
  if (stream_) cuda_copy_stream_destroy(stream_);
}

CopyEventPtr CopyEngine::copy(torch::Tensor dst, torch::Tensor src, CopyDir dir, bool pinned,
                              std::function<void()> then, std::string label) {
  if (dst.numel() != src.numel() || !dst.is_contiguous() || !src.is_contiguous())
    throw std::invalid_argument("CopyEngine::copy (" + label + "): tensors must be contiguous and of equal numel");
  if (o_.cuda && dst.scalar_type() != src.scalar_type())
    throw std::invalid_argument("CopyEngine::copy (" + label + "): a CUDA copy cannot convert dtypes");
  auto event = std::make_shared<CopyEvent>();
  Task t{std::move(dst), std::move(src), dir, pinned, std::move(then), event, std::move(label), wall_seconds()};
  if (!pinned) {
    // Pageable: synchronous on the caller (the whole copy is exposed).
    const double t0 = wall_seconds();
    run(t);
    std::lock_guard<std::mutex> lock(mu_);
    stats_.exposed_s += wall_seconds() - t0;
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

void CopyEngine::transfer(Task& t, double gbps) {
  const int64_t bytes = t.src.numel() * static_cast<int64_t>(t.src.element_size());
  const auto t0 = std::chrono::steady_clock::now();
  if (o_.cuda) {
    const int kind = t.dir == CopyDir::d2h ? 0 : 1;
    if (t.pinned)
      cuda_copy_async(stream_, t.cuda_ready, t.dst.data_ptr(), t.src.data_ptr(), static_cast<size_t>(bytes), kind);
    else
      cuda_copy_sync(t.dst.data_ptr(), t.src.data_ptr(), static_cast<size_t>(bytes), kind);
    return;  // real link: nothing to model
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
}

void CopyEngine::run(Task& t) {
  const double start = wall_seconds();
  transfer(t, t.pinned ? o_.link_gbps : o_.link_gbps * o_.pageable_ratio);  // 0 stays 0: no model
  const double end = wall_seconds();
  if (t.then) t.then();
  const int64_t bytes = t.src.numel() * static_cast<int64_t>(t.src.element_size());
  t.dst = torch::Tensor();  // release before signalling: a waiter may free the memory
  t.src = torch::Tensor();
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int d = static_cast<int>(t.dir);
    stats_.bytes[d] += bytes;
    stats_.copies[d] += 1;
    stats_.seconds[d] += end - start;
    records_.push_back({t.dir, t.pinned, bytes, t.t_submit, start, end, t.label});
    if (records_.size() > kMaxRecords) records_.pop_front();
  }
  t.event->complete();
}

void CopyEngine::worker() {
  for (;;) {
    Task t;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      t = std::move(queue_.front());
      queue_.pop_front();
    }
    run(t);
  }
}

void CopyEngine::wait(const CopyEventPtr& e) {
  if (!e || e->done()) return;
  const double t0 = wall_seconds();
  e->wait();
  std::lock_guard<std::mutex> lock(mu_);
  stats_.exposed_s += wall_seconds() - t0;
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
