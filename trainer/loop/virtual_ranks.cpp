// See virtual_ranks.h.
#include "trainer/loop/virtual_ranks.h"

#include <mutex>
#include <optional>
#include <thread>

#include "device/cuda_memory.h"
#include "device/device_memory.h"
#include "offload/host_memory.h"

namespace zrepro {

VirtualRanks::VirtualRanks(int world, int subject, double timeout_s, Peers peers, PeerValuesMode values)
    : world_(world), subject_(subject), peers_(peers) {
  if (stand_in()) {  // one rank, this process's own ledger and host memory
    auto c = std::make_unique<StandInCommunicator>(subject, world, values);
    stand_in_comm_ = c.get();
    comms_.push_back(std::move(c));
    return;
  }
  group_ = std::make_shared<VirtualGroup>(world, timeout_s);
  DeviceMemory::instance().set_ledgers(world);
  HostMemory::instance().set_virtual_ranks(world, subject);
  for (int k = 0; k < world; ++k) comms_.push_back(std::make_unique<VirtualCommunicator>(group_, k));
}

VirtualRanks::~VirtualRanks() {
  if (group_) group_->abort("the virtual ranks are shutting down");
  comms_.clear();
}

void VirtualRanks::model_busbw(double gbps) {
  for (auto& c : comms_) c->model_busbw(gbps);
}

std::vector<int> VirtualRanks::running() const {
  if (stand_in()) return {subject_};
  std::vector<int> all(world_);
  for (int k = 0; k < world_; ++k) all[k] = k;
  return all;
}

VirtualRanks::Outcome VirtualRanks::train_all(const JobSpec& job, const TrainOptions& opts,
                                              const StepCallback& on_step, bool keep_final_params) {
  Outcome out;
  out.results.resize(world_);
  // Stood-in peers: their model follows the subject's engine ([Note: one hook for what
  // watches the engine]); its self-checks go with the subject's result, also after a failure.
  std::optional<PeerShadow> shadow;
  if (stand_in_comm_) shadow.emplace(*stand_in_comm_);
  std::mutex mu;
  std::exception_ptr first_comm_error;
  int first_comm_rank = -1;
  auto run_rank = [&](int k) {
    std::optional<DeviceMemory::OwnerScope> owner;
    if (!stand_in()) owner.emplace(k);
    TrainOptions o = opts;
    o.comm = &comm(k);
    if (k == subject_ && shadow) o.engine_observer = &*shadow;
    if (k != subject_) {
      o.trace = nullptr;
      o.device = torch::kCPU;  // on CUDA only the subject holds the GPU
    } else if (o.device.is_cuda()) {
      cuda_watch_phases(o.device.index(), k);  // the GPU's phases are the subject's
    }
    try {
      train(job, o, out.results[k], k == subject_ ? on_step : StepCallback{}, keep_final_params);
    } catch (const CommError& e) {
      std::lock_guard<std::mutex> lock(mu);
      if (!first_comm_error) first_comm_error = std::current_exception(), first_comm_rank = k;
      if (group_) group_->abort(e.what());
    } catch (const std::exception& e) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (!out.error) out.error = std::current_exception(), out.failed_rank = k;
      }
      if (group_) group_->abort("virtual rank " + std::to_string(k) + " failed: " + e.what());
    }
  };
  std::vector<std::thread> threads;
  for (int k : running())
    if (k != subject_) threads.emplace_back(run_rank, k);
  run_rank(subject_);  // on this thread: its progress line and logs come first
  for (auto& t : threads) t.join();
  if (!out.error && first_comm_error) out.error = first_comm_error, out.failed_rank = first_comm_rank;
  if (shadow) out.results[subject_].stand_in = shadow->checks();
  return out;
}

}  // namespace zrepro
