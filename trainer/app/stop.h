// Stopping a run: on SIGINT / SIGTERM ([Note: stopping on a signal]) and, with several
// processes, when a peer vanishes ([Note: a rank that vanished], trainer/app/peers.h).
#pragma once
#include <atomic>
#include <thread>
#include <vector>

#include "trainer/app/peers.h"
#include "zero/comm/communicator.h"

namespace zrepro {

// [Note: stopping on a signal] SIGINT and SIGTERM only set a flag; the training loop asks
// for it at every step boundary (TrainOptions::stop_signal), all processes agree on it
// with one tiny all-reduce, and the run ends through the failure table: summary.json
// with status "interrupted" and the steps done, report.html, exit 128 + signal. A second
// signal takes the default action (the process ends at once).
void install_stop_signals();
int stop_signal_received();  // 0, or the first SIGINT / SIGTERM
const char* signal_name(int sig);  // "SIGINT" / "SIGTERM"

// The check at a step boundary. comm null (one process, or virtual ranks in one): the
// flag. Several processes: the highest signal any rank saw (mpi_max), unless a peer on
// this host is gone or comm was interrupted (throws Interrupted: no agreement is possible).
int stop_at_boundary(Communicator* comm, const std::vector<Peer>& peers, int self);

// Several processes: interrupts comm ([Note: interrupting a wait]) when a peer on this
// host is gone (it looks every 0.25 s, so a survivor usually knows before mpirun's
// SIGTERM), or when a stop signal came and no step boundary was agreed within 0.7 s.
// Stops with its owner (or with the process).
class StopWatcher {
 public:
  static constexpr double kGraceS = 0.7;  // under Open MPI's default 1 s between SIGTERM and SIGKILL
  static constexpr double kPeerCheckS = 0.25;
  StopWatcher(Communicator& comm, std::vector<Peer> peers, int self);
  ~StopWatcher();
  StopWatcher(const StopWatcher&) = delete;
  StopWatcher& operator=(const StopWatcher&) = delete;

 private:
  void watch(Communicator& comm, const std::vector<Peer>& peers, int self);
  std::atomic<bool> done_{false};
  std::thread thread_;
};

}  // namespace zrepro
