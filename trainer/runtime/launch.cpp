// See launch.h.
#include "trainer/runtime/launch.h"

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "device/base/errors.h"
#include "zero/comm/mpi_communicator.h"
#include "zero/comm/nccl_communicator.h"

namespace zrepro {

Ranks::Ranks(int* argc, char*** argv, bool cuda) {
  if (launched_by_mpi()) {
    mpi_init(argc, argv);
    mpi = true;
    if (cuda && nccl_usable(mpi_local_size()))
      comm = std::make_unique<NcclCommunicator>(mpi_local_rank());
    else
      comm = std::make_unique<MpiCommunicator>();
  } else {
    comm = std::make_unique<SelfCommunicator>();
  }
}

Ranks::~Ranks() {
  comm.reset();
  if (mpi) mpi_finalize();
}

bool oversubscribe_from_env() {
  const char* v = std::getenv("OMPI_MCA_rmaps_base_oversubscribe");
  if (!v) return false;
  std::string t(v);
  for (auto& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return t == "1" || t == "true" || t == "yes" || t == "on";
}

void check_ranks_fit_slots(int ranks, bool oversubscribe, int slots) {
  if (ranks <= slots || oversubscribe || oversubscribe_from_env()) return;
  throw ConfigError("--ranks " + std::to_string(ranks) + ": this machine gives this process " + std::to_string(slots) +
                    " core(s), so the ranks would share cores and every step time and timing verdict would measure "
                    "the sharing (memory and losses stay exact). Add --oversubscribe to run them anyway, use --ranks " +
                    std::to_string(slots) + " or fewer, or --world-size " + std::to_string(ranks) +
                    " to run the ranks in one process (exact memory and numerics)");
}

namespace {

std::atomic<pid_t> g_mpirun{0};
std::atomic<int> g_forwarded{0};
std::atomic<int> g_signals{0};

void say(const char* text) { (void)!::write(STDERR_FILENO, text, std::strlen(text)); }  // async-signal-safe

// [Note: the --ranks launcher] Signals: the first is forwarded (the ranks stop at their step
// boundary and write their summaries); a second is not (mpirun would kill the ranks before
// they wrote anything): it says so; a third ends the job now, saying what is lost.
void forward_to_mpirun(int sig) {
  const int n = ++g_signals;
  const pid_t child = g_mpirun.load();
  if (n == 1) {
    g_forwarded.store(sig);
    if (child > 0) ::kill(child, sig);
  } else if (n == 2) {
    say("\n[zrepro] the ranks are stopping at their step boundary and writing their summaries; a third signal "
        "kills them now, without summaries\n");
  } else {
    say("\n[zrepro] killing the ranks: no summary.json, report.html or last metrics will be written for this run\n");
    if (child > 0) ::kill(child, sig);  // mpirun, signalled again, ends its ranks at once
  }
}

}  // namespace

void relaunch_under_mpirun(int ranks, const std::vector<std::string>& subcommand, int argc, char** argv) {
  // Oversubscription and no core binding: ranks share the cores of one machine.
  std::vector<std::string> args = {"mpirun", "-np", std::to_string(ranks), "--oversubscribe", "--bind-to", "none",
                                   "--stdin", "none"};
  if (::geteuid() == 0) args.push_back("--allow-run-as-root");
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  args.push_back(n > 0 ? std::string(exe, n) : "zrepro");
  args.insert(args.end(), subcommand.begin(), subcommand.end());
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--ranks") { ++i; continue; }
    if (a.rfind("--ranks=", 0) == 0) continue;
    args.push_back(a);
  }
  ::setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
  // [Note: a rank that vanished]: the survivors write their views between mpirun's SIGTERM
  // and its SIGKILL; Open MPI's 1 s is short on a loaded machine (launch.h).
  ::setenv("OMPI_MCA_odls_base_sigkill_timeout", std::to_string(kSigkillTimeoutS).c_str(), 0);
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  std::fflush(nullptr);
  // Signals that arrive before mpirun exists are remembered and forwarded once it does.
  std::signal(SIGINT, forward_to_mpirun);
  std::signal(SIGTERM, forward_to_mpirun);
  const pid_t parent = ::getpid();
  const pid_t child = ::fork();
  if (child < 0) {
    std::fprintf(stderr, "[zrepro] error: --ranks: cannot fork for mpirun (%s)\n", std::strerror(errno));
    std::_Exit(kExitBadInput);
  }
  if (child == 0) {
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) std::_Exit(kExitInterrupted);  // the launcher is already gone
    ::execvp("mpirun", cargs.data());
    std::fprintf(stderr, "[zrepro] error: --ranks: cannot start mpirun (%s). Install openmpi-bin or launch with "
                 "mpirun -np N yourself\n", std::strerror(errno));
    std::_Exit(kExitBadInput);
  }
  g_mpirun.store(child);
  if (const int early = g_forwarded.load()) ::kill(child, early);
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  const int sig = g_forwarded.load();
  // Stopped by a signal sent to us: the ranks wrote their summaries; say so as one process does.
  std::_Exit(sig != 0 && code != 0 ? 128 + sig : code);
}

}  // namespace zrepro
