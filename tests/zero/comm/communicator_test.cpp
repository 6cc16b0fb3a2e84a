// The comm stream and the blocking forms ([Note: a collective on the caller] in
// zero/comm/communicator.cpp): where a blocking form runs, that issue order holds when the
// stream is busy, that an interrupt reaches a caller still waiting for its peers, and that a
// caller held in a transfer can be seized ([Note: a caller stuck in a transfer]).
#include <gtest/gtest.h>

#include <csignal>
#include <thread>
#include <vector>

#include "device/base/errors.h"
#include "zero/comm/communicator.h"

using namespace zrepro;

namespace {

// Two "ranks" in one process: execute() records which thread ran which op (by its
// element count), may be held shut (ops on the stream wait for open()), and on a caller
// it waits for its peer the way the MPI backend does, polling for an interrupt.
class RecordingCommunicator : public Communicator {
 public:
  RecordingCommunicator() : Communicator(0, 2, true) {}
  ~RecordingCommunicator() override {
    open();
    stop_worker();
  }
  std::string backend() const override { return "recording"; }
  void open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  void shut() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = false;
  }
  void peer_never_arrives() { peer_absent_ = true; }
  // On a caller, execute() enters its data transfer (marked as the MPI backend marks it)
  // and stays there until end_transfers().
  void hold_transfers() { hold_transfer_ = true; }
  void end_transfers() { hold_transfer_ = false; }
  struct Ran {
    int64_t numel;
    std::thread::id thread;
  };
  std::vector<Ran> ran() {
    std::lock_guard<std::mutex> lock(mu_);
    return ran_;
  }
  std::atomic<bool> waiting_for_peer{false};
  std::atomic<bool> in_transfer{false};

 protected:
  bool caller_may_execute() const override { return true; }
  void execute(CollOp, torch::Tensor&, torch::Tensor& in, int) override {
    if (on_caller() && peer_absent_) {
      waiting_for_peer = true;
      for (;;) {
        throw_if_interrupted();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    if (on_caller() && hold_transfer_) {
      begin_transfer();  // agreed; no interrupt is polled from here on
      in_transfer = true;
      while (hold_transfer_) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      end_transfer();
    }
    std::unique_lock<std::mutex> lock(mu_);
    if (!on_caller()) cv_.wait(lock, [&] { return open_; });
    ran_.push_back({in.numel(), std::this_thread::get_id()});
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;
  std::atomic<bool> peer_absent_{false};
  std::atomic<bool> hold_transfer_{false};
  std::vector<Ran> ran_;
};

}  // namespace

TEST(Communicator, ABlockingFormRunsOnItsCallerWhenTheStreamIsIdle) {
  RecordingCommunicator comm;
  comm.all_reduce_wait(torch::zeros({3}), "blocking");
  comm.all_reduce(torch::zeros({5}), "stream")->wait();
  const auto ran = comm.ran();
  ASSERT_EQ(ran.size(), 2u);
  EXPECT_EQ(ran[0].numel, 3);
  EXPECT_EQ(ran[0].thread, std::this_thread::get_id());
  EXPECT_EQ(ran[1].numel, 5);
  EXPECT_NE(ran[1].thread, std::this_thread::get_id());
  // Counted and recorded alike.
  EXPECT_EQ(comm.stats()[CollOp::all_reduce].calls, 2);
  for (const FlightEntry& e : comm.recorder().snapshot()) EXPECT_EQ(e.state, FlightEntry::completed) << e.label;
}

TEST(Communicator, ABlockingFormQueuesBehindOpsIssuedBeforeIt) {
  RecordingCommunicator comm;
  comm.shut();
  WorkPtr first = comm.all_reduce(torch::zeros({1}), "first, held on the stream");
  std::thread caller([&] { comm.all_gather_wait(torch::zeros({4}), torch::zeros({2}), "second"); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_TRUE(comm.ran().empty()) << "the blocking form ran before the op issued ahead of it";
  comm.open();
  caller.join();
  first->wait();
  const auto ran = comm.ran();
  ASSERT_EQ(ran.size(), 2u);
  EXPECT_EQ(ran[0].numel, 1);
  EXPECT_EQ(ran[1].numel, 2);
  EXPECT_EQ(ran[0].thread, ran[1].thread);  // both on the stream
}

TEST(Communicator, AnInterruptReachesACallerWaitingForItsPeers) {
  RecordingCommunicator comm;
  comm.peer_never_arrives();
  std::string caught;
  std::thread caller([&] {
    try {
      comm.broadcast_wait(torch::zeros({8}), 0, "peer gone");
    } catch (const Interrupted& e) {
      caught = e.what();
    }
  });
  while (!comm.waiting_for_peer) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  comm.interrupt(SIGTERM, "rank 1 vanished");
  caller.join();
  EXPECT_EQ(caught, "rank 1 vanished");
  // The hang report sees the op that never finished.
  const auto oldest = comm.recorder().oldest_incomplete();
  ASSERT_TRUE(oldest.has_value());
  EXPECT_EQ(oldest->label, "peer gone");
  EXPECT_EQ(oldest->state, FlightEntry::started);
}

// [Note: a caller stuck in a transfer]: an interrupt cannot reach a caller inside the data
// transfer; the watcher seizes it instead, and the caller never comes back out, even when
// the transfer completes after all (the watcher is then writing the view from its state).
TEST(Communicator, ACallerHeldInATransferIsSeizedAndNeverComesBack) {
  auto* comm = new RecordingCommunicator;  // leaked: the seized caller keeps pointing at it
  EXPECT_FALSE(comm->seize_stuck_caller()) << "nothing to seize while no caller transfers";
  comm->hold_transfers();
  std::atomic<bool> returned{false};
  std::thread caller([comm, &returned] {
    try {
      comm->all_reduce_wait(torch::zeros({8}), "transfer to a dead peer");
    } catch (...) {
    }
    returned = true;
  });
  while (!comm->in_transfer) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  comm->interrupt(SIGTERM, "rank 1 vanished");
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(returned) << "an interrupt cannot reach a caller inside its transfer";
  EXPECT_TRUE(comm->seize_stuck_caller());
  EXPECT_FALSE(comm->seize_stuck_caller()) << "seized once";
  comm->end_transfers();  // the transfer completes after all
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(returned) << "a seized caller came back while its view was being written";
  caller.detach();
}

TEST(Communicator, ATransferThatEndsLeavesNothingToSeize) {
  RecordingCommunicator comm;
  comm.hold_transfers();
  std::thread caller([&] { comm.all_reduce_wait(torch::zeros({8}), "ordinary transfer"); });
  while (!comm.in_transfer) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  comm.end_transfers();
  caller.join();
  EXPECT_FALSE(comm.seize_stuck_caller());
  EXPECT_EQ(comm.ran().size(), 1u);
}
