// The one interface every collective goes through. Ops are asynchronous and run in
// issue order on the communicator's own "stream" (a worker thread for MPI, a CUDA
// stream for NCCL), so compute can overlap them; wait() on the returned Work
// joins. Every op is counted (bytes by the ZeRO convention, time, nccl-tests
// algbw/busbw) and recorded in the flight recorder that the watchdog reads.
#pragma once
#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include <torch/torch.h>

#include "zero/comm/flight_recorder.h"

namespace zrepro {

// A collective that failed (backend error); ends the run like a hang.
struct CommError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct OpStats {
  int64_t calls = 0;
  int64_t bytes = 0;        // ZeRO convention: payload this rank contributes/receives
  int64_t array_bytes = 0;  // nccl-tests S: the whole array (per-rank count * ranks for RS/AG)
  double seconds = 0;       // execution time on the comm stream
};
struct CommStats {
  std::array<OpStats, kNumCollOps> ops;
  double wait_seconds = 0;  // time callers were blocked in Work::wait()
  OpStats& operator[](CollOp op) { return ops[static_cast<int>(op)]; }
  const OpStats& operator[](CollOp op) const { return ops[static_cast<int>(op)]; }
  CommStats minus(const CommStats& earlier) const;
};
// nccl-tests bus-bandwidth factor for an op on n ranks.
double busbw_factor(CollOp op, int n);

class Work {
 public:
  void wait();
  bool done() const;

 private:
  friend class Communicator;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
  class Communicator* comm_ = nullptr;
};
using WorkPtr = std::shared_ptr<Work>;

class Communicator {
 public:
  Communicator(int rank, int world_size, bool threaded);
  virtual ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  virtual std::string backend() const = 0;

  // Sum reductions. reduce_scatter: in.numel == out.numel * world_size, rank r
  // receives slice r; `in` is scratch until the work completes (a backend may reduce in
  // place in it: [Note: reduce-scatter over MPI]). all_gather: out.numel == in.numel *
  // world_size, rank-major.
  // `then` (optional) runs on the comm stream right after the collective succeeded and
  // before the work completes: what must follow the result at once, without waiting for
  // the issuing thread to come back for it (GradReducer sends offloaded pieces down).
  // It must not allocate device memory; what it throws fails the work.
  WorkPtr all_reduce(torch::Tensor t, const std::string& label, std::function<void()> then = {});
  WorkPtr reduce_scatter(torch::Tensor out, torch::Tensor in, const std::string& label,
                         std::function<void()> then = {});
  WorkPtr all_gather(torch::Tensor out, torch::Tensor in, const std::string& label);
  WorkPtr broadcast(torch::Tensor t, int root, const std::string& label);
  void barrier(const std::string& label);

  // Blocking forms (torch.distributed's async_op=False), for a caller that would wait at
  // once: the same collective, counted and recorded the same, but run on the calling
  // thread when the comm stream is idle ([Note: a collective on the caller]).
  void all_reduce_wait(torch::Tensor t, const std::string& label);
  void reduce_scatter_wait(torch::Tensor out, torch::Tensor in, const std::string& label);
  void all_gather_wait(torch::Tensor out, torch::Tensor in, const std::string& label);
  void broadcast_wait(torch::Tensor t, int root, const std::string& label);

  // [Note: modelled interconnect] A collective takes at least S x busbw_factor / busbw
  // (nccl-tests' relation between the array size S and the bus bandwidth): the comm
  // stream sleeps out the rest after the real transfer, so later collectives queue and
  // Work::wait() blocks as on an interconnect of that bandwidth. 0: as fast as this
  // machine moves the bytes. One rank never waits (busbw_factor is 0).
  void model_busbw(double gbps) { modelled_busbw_gbps_ = gbps; }
  double modelled_busbw_gbps() const { return modelled_busbw_gbps_; }

  // Training position stamped on the flight-recorder entries of later ops.
  void set_position(int64_t step, int64_t micro_step) { step_ = step, micro_step_ = micro_step; }

  CommStats stats() const;
  FlightRecorder& recorder() { return recorder_; }

  // [Note: collectives that paired different parameters] Ranks agree on a collective by
  // its op, dtype and size, as NCCL and gloo do (they check nothing else). When two
  // ranks issue same-sized collectives for different parameters (a MoE rank gathering
  // expert 5's w1 while another gathers expert 4's), the collective completes and each
  // rank assembles a mix: no backend notices. zrepro's MPI and virtual backends also
  // compare what issued it (the label) and count such pairings without failing the
  // collective; NCCL's does not (compares_labels false: the summary leaves the count out).
  struct LabelMismatches {
    int64_t count = 0;
    std::string first;  // the first one, with what this rank issued
  };
  virtual LabelMismatches label_mismatches() const;
  // Whether this backend compares labels at all (MPI, virtual ranks; NCCL does not).
  virtual bool compares_labels() const { return false; }
  // Called once, from the thread that notices, when a collective fails.
  void on_failure(std::function<void(const std::string&)> f) { failure_handler_ = std::move(f); }

  // [Note: interrupting a wait] From any thread: every Work::wait() from now on, and any
  // one blocked now (it polls every 50 ms), throws Interrupted(sig, why) instead of
  // waiting on a collective that may never complete (a peer that vanished). The comm
  // stream is abandoned, not joined: the process is about to end.
  void interrupt(int sig, const std::string& why);
  bool interrupted() const { return interrupt_sig_.load() != 0; }
  void throw_if_interrupted() const;  // Interrupted(sig, why) once interrupt() was called

  // [Note: a caller stuck in a transfer] The signature exchange lets a rank know its peers'
  // signatures, not that they know its own: rank 1 may post its signature, wait for rank 0's
  // and die there (kill -9 while it waits), while rank 0 receives it, agrees and enters the
  // blocking data transfer of a collective on its caller ([Note: a collective on the
  // caller]), which then never returns and never polls an interrupt. Under load (ranks
  // waiting on each other at every collective) this took the survivor's view in about 1
  // run in 12. Such a thread can still be told apart: a backend marks the part of an
  // on-caller collective that cannot poll (begin_transfer / end_transfer), and a watcher
  // that interrupted the run and still sees the caller there after a while seizes it
  // (seize_stuck_caller): from then on the caller never leaves the transfer (end_transfer
  // parks it for good even if the transfer does complete), so the watcher may write the
  // rank's view from the state the caller left and end the process
  // ([Note: a rank that vanished], trainer/runtime/liveness.h).
  // From the watcher: true when a caller is inside a transfer now and is held there.
  bool seize_stuck_caller();

 protected:
  // Around the blocking data transfer of a collective run on its caller (backends only).
  void begin_transfer();
  void end_transfer();  // parks the calling thread for good when the watcher seized it
  // Runs one collective to completion (blocking) on the comm stream, or on the caller's
  // thread for a blocking form when the backend allows it (caller_may_execute()).
  virtual void execute(CollOp op, torch::Tensor& out, torch::Tensor& in, int root) = 0;
  // Whether a blocking form may run execute() on the calling thread (false: always the
  // comm stream). A backend that says yes must keep such a call interruptible until the
  // ranks have agreed on the collective: it polls throw_if_interrupted() while
  // on_caller() says it runs there.
  virtual bool caller_may_execute() const { return false; }
  // A blocking form that will run on its caller calls this first, before its bookkeeping:
  // a backend may start agreeing on the op with the other ranks here, so that the
  // message latency overlaps that work; its execute() then completes the agreement.
  virtual void begin_on_caller(CollOp /*op*/, const torch::Tensor& /*in*/, const std::string& /*label*/) {}
  // What issued the collective execute() is running (its label), and recording a pairing
  // with another rank's different one ([Note: collectives that paired different parameters]).
  const std::string& executing_label() const { return executing_label_; }
  int64_t executing_seq() const { return executing_seq_; }
  void note_label_mismatch(const std::string& text);
  bool on_caller() const { return threaded_ && std::this_thread::get_id() != worker_.get_id(); }
  // Worker threads must be joined before a derived backend is destroyed.
  void stop_worker();

 private:
  friend class Work;
  struct Task {
    CollOp op;
    torch::Tensor out, in;
    int root;
    int64_t seq;
    int64_t array_bytes;  // nccl-tests S
    std::string label;
    WorkPtr work;  // null for a blocking form run by its caller
    std::function<void()> then;
  };
  Task make_task(CollOp op, torch::Tensor out, torch::Tensor in, int root, const std::string& label,
                 std::function<void()> then, bool with_work);
  WorkPtr submit(CollOp op, torch::Tensor out, torch::Tensor in, int root, const std::string& label,
                 std::function<void()> then = {});
  void submit_and_wait(CollOp op, torch::Tensor out, torch::Tensor in, int root, const std::string& label);
  void enqueue(Task task);  // onto the comm stream
  // Runs t, signals its Work (if any) and returns what failed (null: nothing).
  std::exception_ptr run_task(Task& t);
  void worker_loop();

  int rank_, world_size_;
  bool threaded_;
  double modelled_busbw_gbps_ = 0;
  int64_t step_ = -1, micro_step_ = -1;
  FlightRecorder recorder_;
  mutable std::mutex stats_mu_;
  CommStats stats_;
  std::function<void(const std::string&)> failure_handler_;
  std::atomic<int> interrupt_sig_{0};
  enum CallerTransfer : int { kNoTransfer, kInTransfer, kSeized };
  std::atomic<int> caller_transfer_{kNoTransfer};  // [Note: a caller stuck in a transfer]
  mutable std::mutex interrupt_mu_;
  std::string interrupt_why_;
  std::string executing_label_;  // set by run_task before execute
  int64_t executing_seq_ = -1;
  LabelMismatches label_mismatches_;  // under stats_mu_

  std::mutex q_mu_;
  std::condition_variable q_cv_;
  std::deque<Task> queue_;
  bool running_ = false;  // a task is executing, on the comm stream or on a caller
  bool stopping_ = false;
  std::thread worker_;
};

// World size 1: collectives are local copies, executed inline.
class SelfCommunicator : public Communicator {
 public:
  SelfCommunicator() : Communicator(0, 1, false) {}
  std::string backend() const override { return "self"; }

 protected:
  void execute(CollOp op, torch::Tensor& out, torch::Tensor& in, int root) override;
};

}  // namespace zrepro
