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
// accumulator) that runs on the worker after the bytes arrived and before the
// event completes; source and destination stay alive (and their device bytes
// allocated) until then. Every copy is counted: bytes and seconds per direction,
// and the time the compute thread waited on copies (exposed); the rest overlapped.
#pragma once
#include <condition_variable>
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

class CopyEvent {
 public:
  bool done() const;
  void wait() const;  // no accounting; CopyEngine::wait counts exposed time

 private:
  friend class CopyEngine;
  void complete();
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool done_ = false;
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
  void wait(const CopyEventPtr& e);  // blocks; the wait is exposed copy time
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
  void run(Task& t);
  void transfer(Task& t, double bandwidth_gbps);
  void worker();

  Options o_;
  void* stream_ = nullptr;  // CUDA stream (cudaStream_t)
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  CopyEventPtr last_;  // the last pinned copy submitted
  bool stopping_ = false;
  CopyStats stats_;
  std::deque<CopyRecord> records_;
  std::thread thread_;
};

// CUDA runtime pieces of the copy engine (copy_engine_cuda.cpp; without the CUDA
// toolkit they throw). kind: 0 = device to host, 1 = host to device.
void* cuda_copy_stream_create();
void cuda_copy_stream_destroy(void* stream);
void* cuda_record_compute_event();  // on the legacy default stream LibTorch computes on
void cuda_copy_async(void* stream, void* ready_event, void* dst, const void* src, size_t bytes, int kind);
void cuda_copy_sync(void* dst, const void* src, size_t bytes, int kind);

}  // namespace zrepro
