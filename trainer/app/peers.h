// The other processes of a multi-process run: every rank's host and pid, gathered at
// set-up, so a rank that outlives a peer can say which one vanished.
//
// [Note: a rank that vanished] When one rank dies (kill -9, the kernel's OOM killer, a
// crash), mpirun sends the others SIGTERM after Open MPI's odls_base_sigkill_timeout and
// SIGKILL after another (1 s by default; 2 s under `zrepro run --ranks`, launch.h). A
// survivor is then usually blocked in a collective the dead rank will never join, so it
// cannot stop at an agreed step boundary. On the signal, run.cpp's stop watcher checks
// the peers on this host (kill(pid, 0)); if one is gone, or no boundary was agreed within
// 0.7 s, it interrupts the communicator ([Note: interrupting a wait]): the training
// thread unwinds as `interrupted`, and each survivor writes its own view (which rank
// vanished, the collective it waited in) into summary.json ([Note: every rank's view])
// before mpirun's SIGKILL.
#pragma once
#include <string>
#include <vector>

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

}  // namespace zrepro
