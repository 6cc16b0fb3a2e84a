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

// Replaces this process with `mpirun -np N <this binary> <subcommand> <args without --ranks>`.
[[noreturn]] void relaunch_under_mpirun(int ranks, const std::vector<std::string>& subcommand, int argc, char** argv);

}  // namespace zrepro
