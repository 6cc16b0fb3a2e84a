// See communicator.h.
#include "zero/comm/communicator.h"

#include "device/base/errors.h"

#include <chrono>

namespace zrepro {

CommStats CommStats::minus(const CommStats& e) const {
  CommStats d;
  for (int i = 0; i < kNumCollOps; ++i) {
    d.ops[i].calls = ops[i].calls - e.ops[i].calls;
    d.ops[i].bytes = ops[i].bytes - e.ops[i].bytes;
    d.ops[i].array_bytes = ops[i].array_bytes - e.ops[i].array_bytes;
    d.ops[i].seconds = ops[i].seconds - e.ops[i].seconds;
  }
  d.wait_seconds = wait_seconds - e.wait_seconds;
  return d;
}

double busbw_factor(CollOp op, int n) {
  switch (op) {
    case CollOp::all_reduce: return 2.0 * (n - 1) / n;
    case CollOp::reduce_scatter:
    case CollOp::all_gather: return static_cast<double>(n - 1) / n;
    case CollOp::broadcast: return 1.0;
    case CollOp::barrier: return 0.0;
  }
  return 0.0;
}

void Work::wait() {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  if (comm_) {
    while (!cv_.wait_for(lock, std::chrono::milliseconds(50), [&] { return done_; })) comm_->throw_if_interrupted();
  } else {
    cv_.wait(lock, [&] { return done_; });
  }
  if (comm_) {
    std::lock_guard<std::mutex> s(comm_->stats_mu_);
    comm_->stats_.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  if (error_) std::rethrow_exception(error_);
}

bool Work::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

void Communicator::interrupt(int sig, const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(interrupt_mu_);
    interrupt_why_ = why;
  }
  interrupt_sig_.store(sig);
}

void Communicator::throw_if_interrupted() const {
  const int sig = interrupt_sig_.load();
  if (sig == 0) return;
  std::lock_guard<std::mutex> lock(interrupt_mu_);
  throw Interrupted(sig, interrupt_why_);
}

// [Note: a caller stuck in a transfer]
bool Communicator::seize_stuck_caller() {
  int expected = kInTransfer;
  return caller_transfer_.compare_exchange_strong(expected, kSeized);
}

void Communicator::begin_transfer() { caller_transfer_.store(kInTransfer); }

void Communicator::end_transfer() {
  int expected = kInTransfer;
  if (caller_transfer_.compare_exchange_strong(expected, kNoTransfer)) return;
  // Seized: the watcher is writing this rank's view from the state this thread left, and
  // ends the process; nothing here may touch that state again.
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

Communicator::Communicator(int rank, int world_size, bool threaded)
    : rank_(rank), world_size_(world_size), threaded_(threaded) {
  if (threaded_) worker_ = std::thread([this] { worker_loop(); });
}

Communicator::~Communicator() { stop_worker(); }

void Communicator::stop_worker() {
  if (!worker_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(q_mu_);
    stopping_ = true;
  }
  q_cv_.notify_all();
  worker_.join();
}

CommStats Communicator::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

WorkPtr Communicator::all_reduce(torch::Tensor t, const std::string& label, std::function<void()> then) {
  return submit(CollOp::all_reduce, t, t, 0, label, std::move(then));
}
WorkPtr Communicator::reduce_scatter(torch::Tensor out, torch::Tensor in, const std::string& label,
                                     std::function<void()> then) {
  return submit(CollOp::reduce_scatter, out, in, 0, label, std::move(then));
}
WorkPtr Communicator::all_gather(torch::Tensor out, torch::Tensor in, const std::string& label) {
  return submit(CollOp::all_gather, out, in, 0, label);
}
WorkPtr Communicator::broadcast(torch::Tensor t, int root, const std::string& label) {
  return submit(CollOp::broadcast, t, t, root, label);
}
void Communicator::barrier(const std::string& label) { submit_and_wait(CollOp::barrier, {}, {}, 0, label); }

namespace {

// What every collective asks of its tensors, in both forms.
void check_args(CollOp op, const torch::Tensor& out, const torch::Tensor& in, const std::string& label, int world) {
  for (const torch::Tensor* t : {&out, &in})
    TORCH_CHECK(!t->defined() || t->is_contiguous(), "collective ", coll_op_name(op), " (", label,
                "): tensors must be contiguous");
  if (op == CollOp::reduce_scatter)
    TORCH_CHECK(in.numel() == out.numel() * world, "reduce_scatter: in must be world_size x out");
  if (op == CollOp::all_gather) TORCH_CHECK(out.numel() == in.numel() * world, "all_gather: out must be world_size x in");
}

// nccl-tests' S: the whole array (the gathered output for an all-gather).
int64_t array_bytes(CollOp op, const torch::Tensor& out, const torch::Tensor& in) {
  if (!in.defined()) return 0;
  return (op == CollOp::all_gather ? out.numel() : in.numel()) * static_cast<int64_t>(in.element_size());
}

}  // namespace

Communicator::Task Communicator::make_task(CollOp op, torch::Tensor out, torch::Tensor in, int root,
                                           const std::string& label, std::function<void()> then, bool with_work) {
  FlightEntry e;
  e.op = op;
  e.dtype = in.defined() ? std::string(c10::toString(in.scalar_type())) : "none";
  e.in_numel = in.defined() ? in.numel() : 0;
  e.out_numel = out.defined() ? out.numel() : 0;
  e.step = step_;
  e.micro_step = micro_step_;
  e.label = label;
  const int64_t seq = recorder_.record(e);
  // Bytes: all-reduce moves the array out and back (2S, the ZeRO paper's
  // reduce-scatter + all-gather); the others the whole array S once.
  const int64_t array = array_bytes(op, out, in);
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    OpStats& s = stats_[op];
    s.calls += 1;
    s.bytes += op == CollOp::all_reduce ? 2 * array : array;
    s.array_bytes += array;
  }
  WorkPtr work;
  if (with_work) {
    work = std::make_shared<Work>();
    work->comm_ = this;
  }
  return Task{op, std::move(out), std::move(in), root, seq, array, label, work, std::move(then)};
}

WorkPtr Communicator::submit(CollOp op, torch::Tensor out, torch::Tensor in, int root, const std::string& label,
                             std::function<void()> then) {
  check_args(op, out, in, label, world_size_);
  Task task = make_task(op, std::move(out), std::move(in), root, label, std::move(then), /*with_work=*/true);
  WorkPtr work = task.work;
  if (!threaded_) {
    run_task(task);
    return work;
  }
  enqueue(std::move(task));
  return work;
}

void Communicator::enqueue(Task task) {
  {
    std::lock_guard<std::mutex> lock(q_mu_);
    queue_.push_back(std::move(task));
  }
  q_cv_.notify_one();
}

// [Note: a collective on the caller] Handing a collective to the comm stream and waiting
// for it costs two thread wake-ups; a 64 KiB all-gather on 2 ranks sharing 2 cores took
// about twice the raw MPI call that way (docs/lab/PERFORMANCE.md). A blocking form whose
// caller would wait at once therefore runs the collective itself, on its own thread, when
// the stream is idle (nothing queued, nothing running): issue order is kept, because the
// stream stays claimed (running_) until the caller is done, so an op another thread
// issues meanwhile queues behind it. Otherwise (the stream busy, a backend that says no,
// a barrier, or an array above kCallerMaxBytes) it waits on the stream as before. What the stream
// gave besides speed stays: the wait is interruptible up to the point where every rank
// has agreed on the collective (the backend polls while it exchanges the signature);
// only a peer that dies inside the data transfer itself, after that agreement, can
// leave the caller blocked, which is why large arrays (milliseconds of transfer) keep
// the stream.
constexpr int64_t kCallerMaxBytes = 4 << 20;

void Communicator::submit_and_wait(CollOp op, torch::Tensor out, torch::Tensor in, int root, const std::string& label) {
  check_args(op, out, in, label, world_size_);
  bool claimed = false;
  if (threaded_ && caller_may_execute() && op != CollOp::barrier && array_bytes(op, out, in) <= kCallerMaxBytes) {
    std::lock_guard<std::mutex> lock(q_mu_);
    if (queue_.empty() && !running_) claimed = running_ = true;
  }
  if (claimed) begin_on_caller(op, in, label);  // its latency overlaps the bookkeeping below
  const bool here = !threaded_ || claimed;  // no Work to signal: the caller is the waiter
  Task task = make_task(op, std::move(out), std::move(in), root, label, {}, /*with_work=*/!here);
  if (here) {
    const auto t0 = std::chrono::steady_clock::now();
    // Releases the stream; Interrupted leaves it claimed: the process is ending.
    const std::exception_ptr err = run_task(task);
    {
      std::lock_guard<std::mutex> s(stats_mu_);
      stats_.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    if (err) std::rethrow_exception(err);
    return;
  }
  WorkPtr work = task.work;
  enqueue(std::move(task));
  work->wait();
}

void Communicator::all_reduce_wait(torch::Tensor t, const std::string& label) {
  submit_and_wait(CollOp::all_reduce, t, t, 0, label);
}
void Communicator::reduce_scatter_wait(torch::Tensor out, torch::Tensor in, const std::string& label) {
  submit_and_wait(CollOp::reduce_scatter, out, in, 0, label);
}
void Communicator::all_gather_wait(torch::Tensor out, torch::Tensor in, const std::string& label) {
  submit_and_wait(CollOp::all_gather, out, in, 0, label);
}
void Communicator::broadcast_wait(torch::Tensor t, int root, const std::string& label) {
  submit_and_wait(CollOp::broadcast, t, t, root, label);
}

Communicator::LabelMismatches Communicator::label_mismatches() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return label_mismatches_;
}

void Communicator::note_label_mismatch(const std::string& text) {
  std::lock_guard<std::mutex> lock(stats_mu_);
  if (label_mismatches_.count++ == 0) label_mismatches_.first = text;
}

std::exception_ptr Communicator::run_task(Task& t) {
  recorder_.set_state(t.seq, FlightEntry::started);
  executing_label_ = t.label;
  executing_seq_ = t.seq;
  const auto t0 = std::chrono::steady_clock::now();
  std::exception_ptr err;
  try {
    execute(t.op, t.out, t.in, t.root);
  } catch (const Interrupted&) {
    // Only a caller polls ([Note: a collective on the caller]). Its request is abandoned
    // with the process, so the buffers it may still write stay allocated: the task is
    // leaked on purpose.
    new Task(std::move(t));
    throw;
  } catch (const std::exception& e) {
    err = std::make_exception_ptr(CommError(std::string(coll_op_name(t.op)) + " #" + std::to_string(t.seq) +
                                            " failed: " + e.what()));
  }
  if (!err && modelled_busbw_gbps_ > 0) {
    const double modelled = static_cast<double>(t.array_bytes) * busbw_factor(t.op, world_size_) / (modelled_busbw_gbps_ * 1e9);
    std::this_thread::sleep_until(t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                           std::chrono::duration<double>(modelled)));
  }
  if (!err && t.then) {
    try {
      t.then();
    } catch (const std::exception& e) {
      err = std::make_exception_ptr(CommError(std::string(coll_op_name(t.op)) + " #" + std::to_string(t.seq) +
                                              " (after the collective): " + e.what()));
    }
  }
  t.then = nullptr;
  recorder_.set_state(t.seq, err ? FlightEntry::failed : FlightEntry::completed);
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_[t.op].seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  if (err && failure_handler_) {
    try {
      std::rethrow_exception(err);
    } catch (const std::exception& e) {
      failure_handler_(e.what());
    }
  }
  // Drop the tensors before signalling: a waiter that frees its buffer must really
  // free it (device memory accounting would otherwise see it outlive the wait).
  t.out = torch::Tensor();
  t.in = torch::Tensor();
  // The stream is free before the work completes: a waiter that issues its next blocking
  // form at once finds it idle. Ops queued while a caller ran one go to the stream now.
  bool queued = false;
  {
    std::lock_guard<std::mutex> lock(q_mu_);
    running_ = false;
    queued = !queue_.empty();
  }
  if (queued && on_caller()) q_cv_.notify_one();
  if (t.work) {
    {
      std::lock_guard<std::mutex> lock(t.work->mu_);
      t.work->done_ = true;
      t.work->error_ = err;
    }
    t.work->cv_.notify_all();
  }
  return err;
}

void Communicator::worker_loop() {
  for (;;) {
    Task t;
    {
      std::unique_lock<std::mutex> lock(q_mu_);
      q_cv_.wait(lock, [&] { return stopping_ || (!queue_.empty() && !running_); });
      if (queue_.empty() || running_) return;  // stopping
      t = std::move(queue_.front());
      queue_.pop_front();
      running_ = true;
    }
    run_task(t);
  }
}

void SelfCommunicator::execute(CollOp op, torch::Tensor& out, torch::Tensor& in, int) {
  torch::NoGradGuard no_grad;
  if ((op == CollOp::reduce_scatter || op == CollOp::all_gather) && out.data_ptr() != in.data_ptr())
    out.copy_(in);
}

}  // namespace zrepro
