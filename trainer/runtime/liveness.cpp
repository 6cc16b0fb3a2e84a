// See liveness.h.
#include "trainer/runtime/liveness.h"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <signal.h>
#include <string>
#include <unistd.h>

#include "device/base/errors.h"
#include "device/device.h"
#include "zero/comm/mpi_communicator.h"

namespace zrepro {

namespace {
// Gone: no such process, or a zombie its parent has not reaped yet.
bool process_gone(long pid) {
  if (::kill(static_cast<pid_t>(pid), 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string pid_field, comm, state;
  if (!(stat >> pid_field >> comm >> state)) return false;
  return state == "Z" || state == "X";
}

std::string this_host() {
  char name[256] = {0};
  if (::gethostname(name, sizeof name - 1) != 0) return "?";
  return name;
}
}  // namespace

std::vector<Peer> gather_peers() {
  std::vector<Peer> out;
  const std::vector<std::string> all = mpi_all_gather_text(this_host() + " " + std::to_string(::getpid()));
  for (size_t r = 0; r < all.size(); ++r) {
    Peer p;
    p.rank = static_cast<int>(r);
    const size_t sp = all[r].rfind(' ');
    p.host = all[r].substr(0, sp);
    p.pid = sp == std::string::npos ? 0 : std::atol(all[r].c_str() + sp + 1);
    out.push_back(p);
  }
  return out;
}

std::vector<Peer> vanished_peers(const std::vector<Peer>& peers, int self) {
  const std::string host = this_host();
  std::vector<Peer> gone;
  for (const auto& p : peers)
    if (p.rank != self && p.host == host && p.pid > 0 && process_gone(p.pid))
      gone.push_back(p);
  return gone;
}

std::string describe_peers(const std::vector<Peer>& peers) {
  std::string s;
  for (const auto& p : peers)
    s += (s.empty() ? "" : ", ") + std::string("rank ") + std::to_string(p.rank) + " (pid " + std::to_string(p.pid) +
         " on " + p.host + ")";
  return s;
}

// ---- stopping a run
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
  // [Note: a rank that vanished]: a peer may die while this rank already waits here; the
  // watcher's interrupt must reach this wait too, or the survivor is killed in it without
  // its view.
  return static_cast<int>(mpi_max_interruptible(mine, [comm] { comm->throw_if_interrupted(); }));
}

StopWatcher::StopWatcher(Communicator& comm, std::vector<Peer> peers, int self, WriteView write_view)
    : write_view_(std::move(write_view)),
      thread_([this, &comm, peers = std::move(peers), self] { watch(comm, peers, self); }) {}

StopWatcher::~StopWatcher() {
  done_.store(true);
  thread_.join();
}

// The interrupt for this moment (why the run must stop), or sig 0 while it goes on.
Interrupted StopWatcher::look(const std::vector<Peer>& peers, int self, double now) {
  const int sig = g_stop_signal.load();
  if (sig != 0 && signalled_at_ < 0) signalled_at_ = now;
  if (sig != 0 || now - checked_at_ > kPeerCheckS) {
    checked_at_ = now;
    const std::vector<Peer> gone = vanished_peers(peers, self);
    // No signal yet: mpirun's SIGTERM is on its way; the run ends as that would.
    if (!gone.empty())
      return Interrupted(sig != 0 ? sig : SIGTERM,
                         (sig != 0 ? std::string(signal_name(sig)) + ": " : std::string()) + vanished_text(gone));
  }
  if (signalled_at_ >= 0 && now - signalled_at_ > kGraceS) {
    char grace[16];
    std::snprintf(grace, sizeof grace, "%.1f", kGraceS);
    return Interrupted(sig, std::string(signal_name(sig)) + ": the ranks agreed on no step boundary within " + grace +
                                " s (a peer may have vanished on another host)");
  }
  return Interrupted(0, "");
}

void StopWatcher::watch(Communicator& comm, const std::vector<Peer>& peers, int self) {
  double interrupted_at = -1;
  std::optional<Interrupted> why;
  while (!done_.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const double now = wall_seconds();
    if (!why) {
      Interrupted seen = look(peers, self, now);
      if (seen.signal == 0) continue;
      comm.interrupt(seen.signal, seen.what());
      why.emplace(seen);
      interrupted_at = now;
      if (!write_view_) return;
      continue;
    }
    // [Note: a caller stuck in a transfer]: the training thread unwinds by itself unless
    // it sits in a transfer that will never end; then this thread writes its view.
    if (now - interrupted_at > kRescueS && comm.seize_stuck_caller()) {
      int code = 128 + why->signal;
      try {
        code = write_view_(*why);
      } catch (...) {
      }
      std::fflush(nullptr);
      std::_Exit(code);
    }
  }
}

}  // namespace zrepro
