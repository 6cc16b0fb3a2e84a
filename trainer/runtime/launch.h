// Process start-up shared by the multi-rank subcommands: MPI when an MPI launcher
// started us (one communicator per process, finalised last), and --ranks N, which
// re-executes the same command line under mpirun on this node.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "zero/comm/communicator.h"

namespace zrepro {

// cuda: ranks train on GPUs; NCCL is used when every rank of the node has its own
// GPU, MPI with host staging otherwise (ranks sharing a GPU).
struct Ranks {
  bool mpi = false;
  std::unique_ptr<Communicator> comm;
  Ranks(int* argc, char*** argv, bool cuda = false);
  ~Ranks();
};

// [Note: oversubscribed ranks] --ranks N above the cores this process may use (slots)
// makes ranks share cores: memory and losses stay exact, but every step time, overlap
// and timing verdict (straggler, scaling) measures the sharing. So it is refused (exit 2,
// naming --oversubscribe and --world-size) unless asked for: --oversubscribe, or Open
// MPI's own OMPI_MCA_rmaps_base_oversubscribe set true. An asked-for run says so in its
// header.
void check_ranks_fit_slots(int ranks, bool oversubscribe, int slots);
// OMPI_MCA_rmaps_base_oversubscribe is 1 / true / yes / on.
bool oversubscribe_from_env();

// Runs `mpirun -np N <this binary> <subcommand> <args without --ranks>` and exits with
// its exit code. [Note: the --ranks launcher] This process stays mpirun's parent:
// SIGINT / SIGTERM sent to it are forwarded to mpirun (in its own process group, so a
// terminal's Ctrl-C reaches it once, through us; no stdin), which forwards them to the
// ranks; the ranks stop at a step boundary with their summary, and this process then
// exits 128 + the signal, as a one-process run does (mpirun itself says 1). mpirun gets
// SIGTERM if this process dies. mpirun waits kSigkillTimeoutS before its SIGTERM and
// again before its SIGKILL to the ranks (OMPI_MCA_odls_base_sigkill_timeout, unless set):
// twice Open MPI's default 1 s, so a survivor of a dead rank has about 4 s to write its
// view on a loaded machine; a stop by signal then takes about 2.2 s (measured; 1.25 s at 1 s,
// 8.4 s at 5 s: mpirun sleeps out the timeout even when the ranks have already exited).
inline constexpr int kSigkillTimeoutS = 2;
[[noreturn]] void relaunch_under_mpirun(int ranks, const std::vector<std::string>& subcommand, int argc, char** argv);

}  // namespace zrepro
