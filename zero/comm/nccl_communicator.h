// NCCL backend: one GPU per rank, the NCCL unique id broadcast over MPI,
// collectives on a dedicated CUDA stream. Ordering with compute: before each
// collective the comm stream waits on an event recorded on the legacy default
// stream (LibTorch's current stream unless a caller changed it); the worker thread
// then synchronises the comm stream, so Work::wait() returning means the result
// is in device memory. Needs only the CUDA runtime and NCCL (compiles in CI).
#pragma once
#include <string>

#include "zero/comm/communicator.h"

namespace zrepro {

// True when this build has the NCCL backend and this process sees a GPU for
// every rank on its node.
bool nccl_usable(int local_size);

class NcclCommunicator : public Communicator {
 public:
  // MPI must be initialised; picks GPU local_rank.
  explicit NcclCommunicator(int local_rank);
  ~NcclCommunicator() override;
  std::string backend() const override { return "nccl"; }

 protected:
  void execute(CollOp op, torch::Tensor& out, torch::Tensor& in, int root) override;

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace zrepro
