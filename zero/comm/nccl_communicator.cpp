// See nccl_communicator.h. Compiled only when CMake finds the CUDA toolkit and
// NCCL (ZREPRO_HAVE_NCCL); otherwise the backend reports itself unusable.
#include "zero/comm/nccl_communicator.h"

#include "zero/comm/mpi_communicator.h"

#ifdef ZREPRO_HAVE_NCCL
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#endif

namespace zrepro {

#ifdef ZREPRO_HAVE_NCCL

namespace {

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw CommError(std::string(what) + ": " + cudaGetErrorString(e));
}
void nccl_check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw CommError(std::string(what) + ": " + ncclGetErrorString(r));
}

ncclDataType_t nccl_type(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat: return ncclFloat32;
    case torch::kHalf: return ncclFloat16;
    case torch::kBFloat16: return ncclBfloat16;
    case torch::kDouble: return ncclFloat64;
    case torch::kLong: return ncclInt64;
    case torch::kInt: return ncclInt32;
    case torch::kByte: return ncclUint8;
    default: throw CommError(std::string("NCCL backend: unsupported dtype ") + c10::toString(t));
  }
}

}  // namespace

struct NcclCommunicator::Impl {
  int device = 0;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t ready = nullptr;
};

bool nccl_usable(int local_size) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return false;
  return n >= local_size;
}

NcclCommunicator::NcclCommunicator(int local_rank)
    : Communicator(mpi_world_rank(), mpi_world_size(), true), impl_(new Impl) {
  int n = 0;
  cuda_check(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
  impl_->device = local_rank % n;
  cuda_check(cudaSetDevice(impl_->device), "cudaSetDevice");
  ncclUniqueId id;
  if (rank() == 0) nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  nccl_check(ncclCommInitRank(&impl_->comm, world_size(), id, rank()), "ncclCommInitRank");
  cuda_check(cudaStreamCreateWithFlags(&impl_->stream, cudaStreamNonBlocking), "cudaStreamCreate");
  cuda_check(cudaEventCreateWithFlags(&impl_->ready, cudaEventDisableTiming), "cudaEventCreate");
}

NcclCommunicator::~NcclCommunicator() {
  stop_worker();
  if (impl_->comm) ncclCommDestroy(impl_->comm);
  if (impl_->ready) cudaEventDestroy(impl_->ready);
  if (impl_->stream) cudaStreamDestroy(impl_->stream);
  delete impl_;
}

void NcclCommunicator::execute(CollOp op, torch::Tensor& out, torch::Tensor& in, int root) {
  cuda_check(cudaSetDevice(impl_->device), "cudaSetDevice");
  // Order after the compute that produced the inputs.
  cuda_check(cudaEventRecord(impl_->ready, cudaStreamLegacy), "cudaEventRecord");
  cuda_check(cudaStreamWaitEvent(impl_->stream, impl_->ready, 0), "cudaStreamWaitEvent");
  cudaStream_t s = impl_->stream;
  ncclComm_t c = impl_->comm;
  switch (op) {
    case CollOp::all_reduce:
      nccl_check(ncclAllReduce(in.data_ptr(), in.data_ptr(), in.numel(), nccl_type(in.scalar_type()), ncclSum, c, s),
                 "ncclAllReduce");
      break;
    case CollOp::reduce_scatter:
      nccl_check(ncclReduceScatter(in.data_ptr(), out.data_ptr(), out.numel(), nccl_type(in.scalar_type()), ncclSum,
                                   c, s),
                 "ncclReduceScatter");
      break;
    case CollOp::all_gather:
      nccl_check(ncclAllGather(in.data_ptr(), out.data_ptr(), in.numel(), nccl_type(in.scalar_type()), c, s),
                 "ncclAllGather");
      break;
    case CollOp::broadcast:
      nccl_check(ncclBroadcast(in.data_ptr(), in.data_ptr(), in.numel(), nccl_type(in.scalar_type()), root, c, s),
                 "ncclBroadcast");
      break;
    case CollOp::barrier: {
      // NCCL has no barrier: a one-element all-reduce on the comm stream.
      void* one = nullptr;
      cuda_check(cudaMallocAsync(&one, sizeof(float), s), "cudaMallocAsync");
      nccl_check(ncclAllReduce(one, one, 1, ncclFloat32, ncclSum, c, s), "ncclAllReduce(barrier)");
      cuda_check(cudaFreeAsync(one, s), "cudaFreeAsync");
      break;
    }
  }
  cuda_check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
}

#else  // no NCCL in this build

struct NcclCommunicator::Impl {};

bool nccl_usable(int) { return false; }

NcclCommunicator::NcclCommunicator(int) : Communicator(0, 1, false), impl_(nullptr) {
  throw CommError("this zrepro was built without NCCL (CUDA toolkit or NCCL not found at configure time)");
}

NcclCommunicator::~NcclCommunicator() = default;

void NcclCommunicator::execute(CollOp, torch::Tensor&, torch::Tensor&, int) {}

#endif

}  // namespace zrepro
