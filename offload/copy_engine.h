// CopyEngine: device<->host copies off the compute path, like a GPU's copy engine.
// Pinned copies go to one worker thread and complete in submission order; each
// returns a CopyEvent. On the CPU-emulated device a copy takes at least
// bytes / link bandwidth (the host-link model, --host-link-gbps: the worker sleeps
// out the rest, leaving the compute thread free, as a DMA engine would); on CUDA the
// worker issues cudaMemcpyAsync on its own stream after an event recorded on the
// compute stream. Pageable copies are synchronous on the caller and run at
// pageable_ratio of the pinned bandwidth, or of memcpy speed without a link model
// (CUDA stages them through a bounce buffer; there the real link decides).
// A copy may carry host work (`then`, e.g. adding a gradient into the fp32
// accumulator) that runs after the bytes arrived and before the event completes;
// it may read the copy's destination and write host memory no copy writes. The
// source is released when the bytes landed, the destination after the host work.
// Every copy is counted: bytes and seconds per direction, and the time the compute
// thread waited on copies (exposed); the rest overlapped.
//
// [Note: the link does not wait for host work] Host work runs on a second thread
// (host_worker), in submission order with every completion, so the link starts the
// next copy while the previous piece is being added: an add of a 1.5 MB bf16 piece
// takes about as long as its copy at 2 GB/s, and run on the link thread it left the
// link idle half the time. The one hazard is a copy rewriting a destination that
// pending host work still reads (the next micro-step's gradient piece lands where
// the previous one is being added): before writing, a copy waits until no pending
// host work's destination overlaps its own (reading_, checked by byte range, for
// pinned copies on the link and pageable ones on the caller alike).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <torch/torch.h>

namespace zrepro {

enum class CopyDir { d2h = 0, h2d = 1 };
const char* copy_dir_name(CopyDir d);

// Two moments of a copy: landed (the bytes are at the destination and the source is
// released: a device buffer it read may be refilled) and done (its host work ran too).
class CopyEvent {
 public:
  bool done() const;
  bool landed() const;
  void wait() const;  // until done; no accounting (CopyEngine::wait counts exposed time)
  void wait_landed() const;

 private:
  friend class CopyEngine;
  void land();
  void complete();  // landed and done
  CopyDir dir_ = CopyDir::d2h;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool landed_ = false, done_ = false;
};
using CopyEventPtr = std::shared_ptr<CopyEvent>;

struct CopyRecord {
  CopyDir dir;
  bool pinned;
  int64_t bytes;
  double t_submit, t_start, t_end;  // wall_seconds()
  std::string label;
};

struct CopyStats {
  int64_t bytes[2] = {0, 0};
  int64_t copies[2] = {0, 0};
  double seconds[2] = {0, 0};  // time the link was busy (modelled on the CPU device)
  double exposed_s = 0;        // compute thread blocked: waits + synchronous pageable copies
  double exposed_dir_s[2] = {0, 0};  // exposed_s by the direction of the copy waited for
  double busy_s() const { return seconds[0] + seconds[1]; }
  double overlapped_s() const { return std::max(0.0, busy_s() - exposed_s); }
  CopyStats minus(const CopyStats& o) const;
};

class CopyEngine {
 public:
  struct Options {
    double link_gbps = 0;         // 0: no model (as fast as memcpy)
    double pageable_ratio = 0.5;  // pageable bandwidth / pinned bandwidth
    bool cuda = false;            // CUDA device: cudaMemcpyAsync on a dedicated stream
  };
  explicit CopyEngine(Options o);
  ~CopyEngine();
  CopyEngine(const CopyEngine&) = delete;
  CopyEngine& operator=(const CopyEngine&) = delete;

  // dst <- src (same numel; dtype conversion allowed on the CPU device only).
  CopyEventPtr copy(torch::Tensor dst, torch::Tensor src, CopyDir dir, bool pinned, std::function<void()> then = {},
                    std::string label = "");
  void wait(const CopyEventPtr& e);         // until done; the wait is exposed copy time
  void wait_landed(const CopyEventPtr& e);  // until landed (the source may be reused); exposed too
  void synchronize();                // every submitted copy done (exposed)

  const Options& options() const { return o_; }
  CopyStats stats() const;
  std::vector<CopyRecord> records() const;  // the last kMaxRecords copies

  static constexpr size_t kMaxRecords = 4096;

 private:
  struct Task {
    torch::Tensor dst, src;
    CopyDir dir;
    bool pinned;
    std::function<void()> then;
    CopyEventPtr event;
    std::string label;
    double t_submit;
    void* cuda_ready = nullptr;  // CUDA: event recorded on the compute stream at submission
  };
  struct Range {
    uintptr_t lo = 0, hi = 0;  // [lo, hi) bytes of a host destination
    bool overlaps(const Range& o) const { return lo < o.hi && o.lo < hi; }
  };
  static Range range_of(const torch::Tensor& t);
  static int64_t link_bytes(const Task& t);
  void await_readers(const Range& dst);  // no pending host work reads dst (Note above)
  void run(Task& t);                     // a pageable copy, on the caller
  double transfer(Task& t, double bandwidth_gbps);  // returns the start time (wall_seconds)
  void account(const Task& t, double start, double end);
  void finish(Task& t, bool registered);  // host work, its range out of reading_, release, complete
  void expose(CopyDir dir, const std::function<void()>& block);  // block() on the compute thread, counted as exposed
  void worker();         // the link: pinned copies in submission order
  void host_worker();    // their host work and completions, in the same order

  Options o_;
  void* stream_ = nullptr;  // CUDA stream (cudaStream_t)
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  CopyEventPtr last_;  // the last pinned copy submitted
  bool stopping_ = false;
  CopyStats stats_;
  std::deque<CopyRecord> records_;
  std::mutex host_mu_;
  std::condition_variable host_cv_;  // host_queue_ grew, or a reader finished
  std::deque<Task> host_queue_;      // landed; host work and completion pending
  std::vector<Range> reading_;       // destinations that pending host work reads
  bool host_stopping_ = false;
  std::thread thread_, host_thread_;
};

// CUDA runtime pieces of the copy engine (copy_engine_cuda.cpp; without the CUDA
// toolkit they throw). kind: 0 = device to host, 1 = host to device.
void* cuda_copy_stream_create();
void cuda_copy_stream_destroy(void* stream);
void* cuda_record_compute_event();  // on the legacy default stream LibTorch computes on
void cuda_copy_async(void* stream, void* ready_event, void* dst, const void* src, size_t bytes, int kind);
void cuda_copy_sync(void* dst, const void* src, size_t bytes, int kind);

}  // namespace zrepro
