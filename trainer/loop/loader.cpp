// See loader.h.
#include "trainer/loop/loader.h"

#include <chrono>
#include <stdexcept>

#include "device/device_memory.h"
#include "offload/host_memory.h"

namespace zrepro {

BatchLoader::BatchLoader(const MarkovData& data, std::vector<BatchKey> keys, LoaderOptions opts)
    : data_(data), keys_(std::move(keys)), opts_(opts), lanes_(static_cast<size_t>(std::max(opts.workers, 0))) {
  if (opts_.workers < 0 || opts_.prefetch_factor < 1 || opts_.sample_ms < 0)
    throw std::invalid_argument("loader: workers >= 0, prefetch_factor >= 1 and sample_ms >= 0 expected");
  // A worker's batches are charged to the device of the rank that owns the loader
  // (its virtual rank's ledger when one process stands in for several).
  const int owner = DeviceMemory::owner();
  for (int w = 0; w < opts_.workers; ++w)
    threads_.emplace_back([this, w, owner] {
      DeviceMemory::OwnerScope scope(owner);
      work(w);
    });
}

BatchLoader::~BatchLoader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  changed_.notify_all();
  for (auto& t : threads_) t.join();
}

torch::Tensor BatchLoader::prepare(const BatchKey& key) const {
  if (opts_.sample_ms > 0)
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(opts_.sample_ms * static_cast<double>(key.count)));
  torch::Tensor batch = data_.samples(key.first_sample, key.count);
  if (!opts_.pin_memory) return batch;
  torch::Tensor pinned = HostMemory::instance()
                             .empty(batch.numel(), batch.scalar_type(), true, "data loader batch", HostUse::input)
                             .view(batch.sizes());
  pinned.copy_(batch);
  return pinned;
}

// Worker w prepares keys w, w + W, w + 2W, ... and keeps at most prefetch_factor ready.
void BatchLoader::work(int w) {
  Lane& lane = lanes_[static_cast<size_t>(w)];
  for (size_t k = static_cast<size_t>(w); k < keys_.size(); k += lanes_.size()) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      changed_.wait(lock, [&] { return stopping_ || lane.ready.size() < static_cast<size_t>(opts_.prefetch_factor); });
      if (stopping_) return;
    }
    try {
      torch::Tensor batch = prepare(keys_[k]);
      std::lock_guard<std::mutex> lock(mu_);
      lane.ready.push_back(std::move(batch));
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      lane.error = std::current_exception();
      changed_.notify_all();
      return;
    }
    changed_.notify_all();
  }
}

torch::Tensor BatchLoader::next() {
  if (next_ >= keys_.size()) throw std::out_of_range("loader: no batch " + std::to_string(next_));
  const size_t k = next_++;
  if (lanes_.empty()) return prepare(keys_[k]);
  Lane& lane = lanes_[k % lanes_.size()];
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait(lock, [&] { return !lane.ready.empty() || lane.error; });
  if (lane.ready.empty()) std::rethrow_exception(lane.error);
  torch::Tensor batch = std::move(lane.ready.front());
  lane.ready.pop_front();
  lock.unlock();
  changed_.notify_all();
  return batch;
}

}  // namespace zrepro
