// Peer liveness: the other processes of a multi-process run (every rank's host and pid,
// gathered at set-up, so a rank that outlives a peer can say which one vanished) and
// stopping a run on SIGINT / SIGTERM or when a peer vanishes.
//
// [Note: a rank that vanished] When one rank dies (kill -9, the kernel's OOM killer, a
// crash), mpirun sends the others SIGTERM after Open MPI's odls_base_sigkill_timeout and
// SIGKILL after another (1 s by default; 2 s under `zrepro run --ranks`, launch.h). A
// survivor is then usually blocked in a collective the dead rank will never join, so it
// cannot stop at an agreed step boundary. On the signal, the StopWatcher below checks
// the peers on this host (kill(pid, 0)); if one is gone, or no boundary was agreed within
// 0.7 s, it interrupts the communicator ([Note: interrupting a wait]): the training
// thread unwinds as `interrupted`, and each survivor writes its own view (which rank
// vanished, the collective it waited in) into summary.json ([Note: every rank's view])
// before mpirun's SIGKILL. A training thread held in the data transfer of a collective
// the dead rank had agreed to but never joined cannot unwind: 0.3 s after the interrupt
// the watcher seizes it and writes the view itself ([Note: a caller stuck in a transfer],
// zero/comm/communicator.h).
#pragma once
#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "device/base/errors.h"
#include "zero/comm/communicator.h"

namespace zrepro {

struct Peer {
  int rank = 0;
  std::string host;
  long pid = 0;
};

// Collective over MPI: every rank calls it. Index r holds rank r.
std::vector<Peer> gather_peers();
// The peers on this host (other than self) whose process no longer exists. Peers on
// other hosts cannot be checked from here and are never listed.
std::vector<Peer> vanished_peers(const std::vector<Peer>& peers, int self);
// "rank 1 (pid 1234 on node7), rank 3 (pid 1240 on node7)"
std::string describe_peers(const std::vector<Peer>& peers);

// ---- stopping a run
// [Note: stopping on a signal] SIGINT and SIGTERM only set a flag; the training loop asks
// for it at every step boundary (TrainOptions::stop_signal), all processes agree on it
// with one tiny all-reduce, and the run ends through the failure table: summary.json
// with status "interrupted" and the steps done, report.html, exit 128 + signal. A wait the
// run itself put inside a step (an injected straggler's delay) ends at the signal, with the
// same summary (TrainOptions::signal_seen). A second signal takes the default action (the
// process ends at once).
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
  // A transfer of a caller's collective (at most 4 MiB) takes milliseconds; one still
  // running this long after the interrupt waits for a peer that is gone.
  static constexpr double kRescueS = 0.3;
  // Writes this rank's view of the interruption (summary.json, report) and returns the
  // exit code: called from the watcher's thread only when the training thread is held in
  // a transfer that will never end ([Note: a caller stuck in a transfer]).
  using WriteView = std::function<int(const Interrupted&)>;
  StopWatcher(Communicator& comm, std::vector<Peer> peers, int self, WriteView write_view = {});
  ~StopWatcher();
  StopWatcher(const StopWatcher&) = delete;
  StopWatcher& operator=(const StopWatcher&) = delete;

 private:
  Interrupted look(const std::vector<Peer>& peers, int self, double now);
  void watch(Communicator& comm, const std::vector<Peer>& peers, int self);
  double signalled_at_ = -1, checked_at_ = 0;
  std::atomic<bool> done_{false};
  WriteView write_view_;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace zrepro
