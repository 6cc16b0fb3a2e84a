// See peers.h.
#include "trainer/app/peers.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>

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

}  // namespace zrepro
