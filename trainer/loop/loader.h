// The input pipeline: a DataLoader with worker threads that prepare the training batches
// ahead of the loop, so that the time the loop waits for data is measured, not modelled.
// As PyTorch's DataLoader: batch k is prepared by worker k mod W, each worker keeps up to
// prefetch_factor batches ready, the loop takes them in order (so every worker count gives
// the same batches), and W = 0 prepares each batch in the loop itself when it is needed.
// Preparing a sample (reading, decoding, tokenizing) is emulated: each worker sleeps
// sample_ms per sample before it draws the sample from the Markov data, the way a loader
// bound by storage or a remote service waits (explicit and reported: data.loader).
// pin_memory puts each prepared batch in page-locked host memory (HostUse::input), apart
// from the offload buffers' pinning.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include <torch/torch.h>

#include "trainer/model/data.h"

namespace zrepro {

struct LoaderOptions {
  int workers = 0;          // 0: prepare in the loop (num_workers=0)
  int prefetch_factor = 2;  // batches each worker keeps ready
  double sample_ms = 0;     // emulated preparation time per sample
  bool pin_memory = false;  // page-locked input batches
};

// One batch the loop will ask for, in order.
struct BatchKey {
  int64_t first_sample = 0, count = 0;
};

class BatchLoader {
 public:
  BatchLoader(const MarkovData& data, std::vector<BatchKey> keys, LoaderOptions opts);
  ~BatchLoader();  // stops the workers and joins them
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // The next batch, tokens [count, seq + 1]; blocks until a worker has it ready.
  // Throws std::out_of_range past the last key, and rethrows a worker's failure.
  torch::Tensor next();
  const LoaderOptions& options() const { return opts_; }

 private:
  struct Lane {  // one worker's ready batches, in key order
    std::deque<torch::Tensor> ready;
    std::exception_ptr error;
  };
  torch::Tensor prepare(const BatchKey& key) const;
  void work(int w);

  const MarkovData& data_;
  const std::vector<BatchKey> keys_;
  const LoaderOptions opts_;
  std::vector<Lane> lanes_;
  std::mutex mu_;
  std::condition_variable changed_;
  bool stopping_ = false;
  size_t next_ = 0;
  std::vector<std::thread> threads_;
};

}  // namespace zrepro
