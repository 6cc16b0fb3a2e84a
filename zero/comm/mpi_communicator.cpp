// See mpi_communicator.h.
#include "zero/comm/mpi_communicator.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "device/base/errors.h"

namespace zrepro {

namespace {

MPI_Comm as_comm(void* p) { return *static_cast<MPI_Comm*>(p); }

// Sum of 16-bit floats: widen to fp32, add, round back.
template <class Half>
void sum_half(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* a = static_cast<Half*>(in);
  auto* b = static_cast<Half*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = static_cast<Half>(static_cast<float>(a[i]) + static_cast<float>(b[i]));
}

struct MpiTypes {
  MPI_Op sum_fp16, sum_bf16;
  MpiTypes() {
    MPI_Op_create(&sum_half<c10::Half>, 1, &sum_fp16);
    MPI_Op_create(&sum_half<c10::BFloat16>, 1, &sum_bf16);
  }
};
MpiTypes& types() {
  static MpiTypes t;
  return t;
}

std::pair<MPI_Datatype, MPI_Op> mpi_type(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat: return {MPI_FLOAT, MPI_SUM};
    case torch::kDouble: return {MPI_DOUBLE, MPI_SUM};
    case torch::kLong: return {MPI_INT64_T, MPI_SUM};
    case torch::kInt: return {MPI_INT32_T, MPI_SUM};
    case torch::kHalf: return {MPI_UINT16_T, types().sum_fp16};
    case torch::kBFloat16: return {MPI_UINT16_T, types().sum_bf16};
    case torch::kByte: return {MPI_UINT8_T, MPI_SUM};
    default: throw CommError(std::string("MPI backend: unsupported dtype ") + c10::toString(t));
  }
}

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw CommError(std::string(what) + ": " + std::string(msg, len));
}

int env_int(const char* a, const char* b, int def) {
  for (const char* k : {a, b})
    if (const char* v = std::getenv(k)) return std::atoi(v);
  return def;
}

}  // namespace

bool launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK");
}

void mpi_init(int* argc, char*** argv) {
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  if (provided < MPI_THREAD_MULTIPLE)
    throw CommError("MPI library does not provide MPI_THREAD_MULTIPLE (got level " + std::to_string(provided) + ")");
  types();
}

void mpi_finalize() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

int mpi_world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int mpi_world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

int mpi_local_rank() { return env_int("OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", 0); }
int mpi_local_size() { return env_int("OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE", 1); }

MpiCommunicator::MpiCommunicator() : Communicator(mpi_world_rank(), mpi_world_size(), true), comm_(new MPI_Comm) {
  MPI_Comm_dup(MPI_COMM_WORLD, static_cast<MPI_Comm*>(comm_));
  MPI_Comm_set_errhandler(as_comm(comm_), MPI_ERRORS_RETURN);
}

MpiCommunicator::~MpiCommunicator() {
  stop_worker();
  MPI_Comm_free(static_cast<MPI_Comm*>(comm_));
  delete static_cast<MPI_Comm*>(comm_);
}

namespace {

// [Note: reduce-scatter over MPI] Open MPI 4.1's MPI_Reduce_scatter_block is slow on one
// node: a 16 MiB array took 1.9x an MPI_Allreduce of the same array on 2 ranks and
// 2.5-3x on 4 (bench/peers/comm.sh, docs/lab/PERFORMANCE.md; its four tuned algorithms
// forced one by one were no better), although an all-reduce moves twice the bytes. From
// kReduceScatterViaAllReduceBytes up, the comm layer's reduce-scatter is therefore an
// in-place all-reduce of `in` (the caller's scratch, communicator.h) followed by a copy
// of this rank's slice into `out`: the same result on every rank, no extra buffer, and
// counted as the reduce-scatter it stands for (bytes, busbw, flight recorder). Below
// it (the two agree at about 1 MiB here) MPI_Reduce_scatter_block is the faster.
constexpr int64_t kReduceScatterViaAllReduceBytes = 1 << 20;

enum class RsPath { mpi_reduce_scatter, all_reduce_then_slice };

// One blocking collective on communicator c; device tensors are staged through host.
void mpi_collective(MPI_Comm c, int rank, CollOp op, torch::Tensor& out, torch::Tensor& in, int root,
                    RsPath rs = RsPath::mpi_reduce_scatter) {
  torch::NoGradGuard no_grad;
  if (op == CollOp::barrier) return check(MPI_Barrier(c), "MPI_Barrier");
  // Ranks sharing a GPU: stage device tensors through host memory.
  const bool staged = !in.device().is_cpu();
  torch::Tensor hin = staged ? in.cpu() : in;
  torch::Tensor hout = staged ? (out.data_ptr() == in.data_ptr() ? hin : out.cpu()) : out;
  auto [dtype, sum] = mpi_type(hin.scalar_type());
  const int n = static_cast<int>(hin.numel());
  switch (op) {
    case CollOp::all_reduce:
      check(MPI_Allreduce(MPI_IN_PLACE, hin.data_ptr(), n, dtype, sum, c), "MPI_Allreduce");
      break;
    case CollOp::reduce_scatter:
      if (rs == RsPath::all_reduce_then_slice) {
        check(MPI_Allreduce(MPI_IN_PLACE, hin.data_ptr(), n, dtype, sum, c), "MPI_Allreduce (reduce-scatter)");
        hout.copy_(hin.narrow(0, rank * hout.numel(), hout.numel()));
        break;
      }
      check(MPI_Reduce_scatter_block(hin.data_ptr(), hout.data_ptr(), static_cast<int>(hout.numel()), dtype, sum, c),
            "MPI_Reduce_scatter_block");
      break;
    case CollOp::all_gather: {
      // In place when this rank's input already sits at its slot of the output.
      const bool in_place = static_cast<char*>(hin.data_ptr()) ==
                            static_cast<char*>(hout.data_ptr()) + rank * n * hin.element_size();
      check(MPI_Allgather(in_place ? MPI_IN_PLACE : hin.data_ptr(), n, dtype, hout.data_ptr(), n, dtype, c),
            "MPI_Allgather");
      break;
    }
    case CollOp::broadcast:
      check(MPI_Bcast(hin.data_ptr(), n, dtype, root, c), "MPI_Bcast");
      break;
    case CollOp::barrier: break;
  }
  if (staged) out.copy_(op == CollOp::all_reduce || op == CollOp::broadcast ? hin : hout);
}

}  // namespace

// [Note: collective signatures] MPI gives no guarantee when ranks call one
// collective with different counts or types: a 3-element all-reduce meeting a
// 118,528-element one corrupted the heap here (gloo aborts with "Received data
// size doesn't match expected size", NCCL hangs). Before moving data every rank
// therefore exchanges what it is about to run (op, dtype, element count); these
// fixed-size exchanges always pair up in issue order, so the first divergent
// collective is caught on every rank at once and fails as a CommError, which the
// run turns into its hang report (exit 4) naming each rank's collective.
//
// [Note: the signature exchange] Point-to-point, nonblocking and polled, so that on a
// caller's thread a peer that never arrives cannot hold the caller past an interrupt
// ([Note: a collective on the caller]). Not MPI_Allgather: a blocking collective never
// matches a nonblocking one, and one rank may run an op on its caller while another runs
// it on its stream. Not MPI_Iallgather: once Open MPI has run a nonblocking collective,
// its libnbc progress runs inside every later blocking one too. Bruck's all-gather:
// ceil(log2 n) rounds; in round d each rank sends the signatures it holds to rank - d and
// receives as many from rank + d, on a tag of its own (Open MPI's collectives use negative
// tags, so no collective can match these; MPI keeps one pair's messages on one tag in
// order, so op k's exchange never meets op k+1's). Slot j of held_ is rank (rank + j)
// mod n's signature. A caller posts round one before its bookkeeping (begin_on_caller).
class SignatureExchange {
 public:
  // label: what issued the collective; its hash travels with the signature and is compared
  // without failing ([Note: collectives that paired different parameters]).
  SignatureExchange(MPI_Comm c, int rank, int n, CollOp op, const torch::Tensor& in, const std::string& label)
      : c_(c), rank_(rank), n_(n),
        heap_(n > kInline ? new int64_t[kW * static_cast<size_t>(n)] : nullptr),
        held_(heap_ ? heap_.get() : inline_) {
    held_[0] = static_cast<int64_t>(op), held_[1] = static_cast<int64_t>(in.scalar_type()), held_[2] = in.numel();
    held_[3] = label_hash(label);
    post();
  }
  // After finish(): the ranks whose label differs from this rank's (the op, dtype and size agreed).
  const std::vector<int>& other_labels() const { return other_labels_; }
  SignatureExchange(const SignatureExchange&) = delete;
  SignatureExchange& operator=(const SignatureExchange&) = delete;

  // Completes the exchange, running `poll` (if any) about every 64 tests while waiting;
  // what poll throws abandons the exchange: the caller must then leak this object, whose
  // buffer the requests still point at. Throws CommError when the ranks disagree.
  void finish(const std::function<void()>& poll) {
    for (;;) {
      wait_round(poll);
      d_ *= 2;
      if (d_ >= n_) break;
      post();
    }
    check_agreement();
    for (int j = 1; j < n_; ++j)
      if (held_[kW * j + 3] != held_[3]) other_labels_.push_back((rank_ + j) % n_);
  }

 private:
  static constexpr int kTag = 0x5a5a;
  static constexpr int kW = 4;  // op, dtype, numel, label hash

  static int64_t label_hash(const std::string& label) {
    uint64_t h = 1469598103934665603ULL;  // FNV-1a
    for (unsigned char ch : label) h = (h ^ ch) * 1099511628211ULL;
    return static_cast<int64_t>(h);
  }

  void post() {
    const int cnt = std::min(d_, n_ - d_);
    check(MPI_Irecv(held_ + kW * d_, kW * cnt, MPI_INT64_T, (rank_ + d_) % n_, kTag, c_, &req_[0]),
          "MPI_Irecv (collective signature)");
    check(MPI_Isend(held_, kW * cnt, MPI_INT64_T, (rank_ - d_ + n_) % n_, kTag, c_, &req_[1]),
          "MPI_Isend (collective signature)");
  }

  void wait_round(const std::function<void()>& poll) {
    for (int done = 0, spins = 0;; ++spins) {
      check(MPI_Testall(2, req_, &done, MPI_STATUSES_IGNORE), "MPI_Testall (collective signature)");
      if (done) return;
      if (spins % 64 != 63) continue;  // a yield is a system call: not after every test
      if (poll) poll();  // what it throws abandons the exchange: its owner leaks it with the buffer
      std::this_thread::yield();
    }
  }

  void check_agreement() const {
    bool same = true;
    for (int j = 1; j < n_; ++j)
      for (int k = 0; k < 3; ++k) same = same && held_[kW * j + k] == held_[k];
    if (same) return;
    std::vector<int64_t> all(3 * static_cast<size_t>(n_));  // by rank
    for (int j = 0; j < n_; ++j)
      for (int k = 0; k < 3; ++k) all[3 * ((rank_ + j) % n_) + k] = held_[kW * j + k];
    std::string text = "ranks disagree on the next collective:";
    for (int r = 0; r < n_; ++r)
      text += " rank " + std::to_string(r) + " " + coll_op_name(static_cast<CollOp>(all[3 * r])) + "(" +
              c10::toString(static_cast<torch::ScalarType>(all[3 * r + 1])) + ", " + std::to_string(all[3 * r + 2]) +
              ")" + (r + 1 < n_ ? ";" : "");
    throw CommError(text);
  }

  static constexpr int kInline = 8;  // ranks whose signatures fit in the object itself
  MPI_Comm c_;
  int rank_, n_, d_ = 1;
  std::unique_ptr<int64_t[]> heap_;
  int64_t inline_[kW * kInline];
  int64_t* held_;
  MPI_Request req_[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  std::vector<int> other_labels_;
};

std::unique_ptr<SignatureExchange> MpiCommunicator::start_exchange(CollOp op, const torch::Tensor& in,
                                                                   const std::string& label) {
  if (op == CollOp::barrier || world_size() == 1) return nullptr;  // nothing to agree on
  return std::make_unique<SignatureExchange>(as_comm(comm_), rank(), world_size(), op, in, label);
}

void MpiCommunicator::begin_on_caller(CollOp op, const torch::Tensor& in, const std::string& label) {
  begun_ = start_exchange(op, in, label);
}

void MpiCommunicator::execute(CollOp op, torch::Tensor& out, torch::Tensor& in, int root) {
  // The stream runs only while no caller holds it, so begun_ is the caller's own here.
  std::unique_ptr<SignatureExchange> agree = begun_ ? std::move(begun_) : start_exchange(op, in, executing_label());
  if (agree) {
    std::function<void()> poll;
    if (on_caller()) poll = [this] { throw_if_interrupted(); };
    try {
      agree->finish(poll);
    } catch (const Interrupted&) {
      (void)agree.release();  // its requests are abandoned with the process
      throw;
    }
    if (!agree->other_labels().empty()) {  // [Note: collectives that paired different parameters]
      std::string ranks;
      for (int r : agree->other_labels()) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
      note_label_mismatch("collective #" + std::to_string(executing_seq()) + " " +
                          coll_op_name(op) + " of " + std::to_string(in.numel()) + " elements: rank " +
                          std::to_string(rank()) + " issued it for " + executing_label() + ", rank(s) " + ranks +
                          " for something else of the same size");
    }
  }
  const bool large = in.defined() && in.numel() * static_cast<int64_t>(in.element_size()) >= kReduceScatterViaAllReduceBytes;
  const RsPath rs = large ? RsPath::all_reduce_then_slice : RsPath::mpi_reduce_scatter;
  if (!on_caller()) return mpi_collective(as_comm(comm_), rank(), op, out, in, root, rs);
  begin_transfer();  // [Note: a caller stuck in a transfer]
  try {
    mpi_collective(as_comm(comm_), rank(), op, out, in, root, rs);
  } catch (...) {
    end_transfer();
    throw;
  }
  end_transfer();
}

void raw_mpi_collective(CollOp op, torch::Tensor& out, torch::Tensor& in, int root) {
  mpi_collective(MPI_COMM_WORLD, mpi_world_rank(), op, out, in, root);
}

std::vector<std::string> mpi_all_gather_text(const std::string& mine) {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const int len = static_cast<int>(mine.size());
  std::vector<int> lens(n), offsets(n);
  MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, MPI_COMM_WORLD);
  int total = 0;
  for (int k = 0; k < n; ++k) offsets[k] = total, total += lens[k];
  std::string all(static_cast<size_t>(total), '\0');
  MPI_Allgatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), offsets.data(), MPI_CHAR, MPI_COMM_WORLD);
  std::vector<std::string> out;
  for (int k = 0; k < n; ++k) out.push_back(all.substr(static_cast<size_t>(offsets[k]), static_cast<size_t>(lens[k])));
  return out;
}

double mpi_max(double v) {
  double m = v;
  MPI_Allreduce(&v, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return m;
}

double mpi_max_interruptible(double v, const std::function<void()>& poll) {
  // Both live until the request completes; an abandoned request (poll threw) keeps
  // pointing at them, hence static storage rather than this frame.
  static thread_local double in, out;
  in = v, out = v;
  MPI_Request req = MPI_REQUEST_NULL;
  MPI_Iallreduce(&in, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, &req);
  auto next_poll = std::chrono::steady_clock::now();
  for (int done = 0;;) {
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (done) return out;
    if (std::chrono::steady_clock::now() >= next_poll) {
      poll();
      next_poll = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
    }
    std::this_thread::yield();
  }
}

}  // namespace zrepro
