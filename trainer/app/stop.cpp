// See stop.h.
#include "trainer/app/stop.h"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>

#include "device/base/errors.h"
#include "device/device.h"
#include "zero/comm/mpi_communicator.h"

namespace zrepro {

namespace {

std::atomic<int> g_stop_signal{0};

void on_stop_signal(int sig) {
  g_stop_signal.store(sig);
  std::signal(sig, SIG_DFL);
}

std::string vanished_text(const std::vector<Peer>& gone) {
  return describe_peers(gone) + " vanished (mpirun ends every rank once one ends)";
}

}  // namespace

void install_stop_signals() {
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
}

int stop_signal_received() { return g_stop_signal.load(); }

const char* signal_name(int sig) { return sig == SIGTERM ? "SIGTERM" : "SIGINT"; }

int stop_at_boundary(Communicator* comm, const std::vector<Peer>& peers, int self) {
  const int mine = g_stop_signal.load();
  if (!comm) return mine;
  comm->throw_if_interrupted();
  if (mine) {
    const std::vector<Peer> gone = vanished_peers(peers, self);
    if (!gone.empty()) throw Interrupted(mine, std::string(signal_name(mine)) + ": " + vanished_text(gone));
  }
  return static_cast<int>(mpi_max(mine));
}

StopWatcher::StopWatcher(Communicator& comm, std::vector<Peer> peers, int self)
    : thread_([this, &comm, peers = std::move(peers), self] { watch(comm, peers, self); }) {}

StopWatcher::~StopWatcher() {
  done_.store(true);
  thread_.join();
}

void StopWatcher::watch(Communicator& comm, const std::vector<Peer>& peers, int self) {
  double signalled_at = -1, checked_at = 0;
  while (!done_.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const int sig = g_stop_signal.load();
    const double now = wall_seconds();
    if (sig != 0 && signalled_at < 0) signalled_at = now;
    if (sig != 0 || now - checked_at > kPeerCheckS) {
      checked_at = now;
      const std::vector<Peer> gone = vanished_peers(peers, self);
      if (!gone.empty()) {
        // No signal yet: mpirun's SIGTERM is on its way; the run ends as that would.
        comm.interrupt(sig != 0 ? sig : SIGTERM,
                       (sig != 0 ? std::string(signal_name(sig)) + ": " : std::string()) + vanished_text(gone));
        return;
      }
    }
    if (signalled_at >= 0 && now - signalled_at > kGraceS) {
      char grace[16];
      std::snprintf(grace, sizeof grace, "%.1f", kGraceS);
      comm.interrupt(sig, std::string(signal_name(sig)) + ": the ranks agreed on no step boundary within " + grace +
                              " s (a peer may have vanished on another host)");
      return;
    }
  }
}

}  // namespace zrepro
