// MPI backend (OpenMPI): collectives on a worker thread (or a blocking form's caller:
// [Note: a collective on the caller]) over a private duplicate
// of MPI_COMM_WORLD, with errors returned instead of aborting so that a failed
// collective becomes a diagnosed hang. CPU tensors go straight to MPI; GPU tensors
// (ranks sharing a GPU) are staged through host memory. 16-bit floats are summed
// in fp32 by a user-defined MPI reduction.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "zero/comm/communicator.h"

namespace zrepro {

// True when this process was started by an MPI launcher (mpirun, srun with PMI).
bool launched_by_mpi();

class SignatureExchange;  // mpi_communicator.cpp: [Note: the signature exchange]

class MpiCommunicator : public Communicator {
 public:
  // MPI must already be initialised with MPI_THREAD_MULTIPLE (see mpi_init()).
  MpiCommunicator();
  ~MpiCommunicator() override;
  std::string backend() const override { return "mpi"; }

 protected:
  void execute(CollOp op, torch::Tensor& out, torch::Tensor& in, int root) override;
  bool caller_may_execute() const override { return true; }
  bool compares_labels() const override { return true; }
  void begin_on_caller(CollOp op, const torch::Tensor& in, const std::string& label) override;

 private:
  // The signature exchange of op (null when there is nothing to agree on), its first round posted.
  std::unique_ptr<SignatureExchange> start_exchange(CollOp op, const torch::Tensor& in, const std::string& label);

  void* comm_;  // MPI_Comm, kept opaque so that mpi.h stays out of the header
  std::unique_ptr<SignatureExchange> begun_;  // posted by a caller, completed by execute
};

// The plain MPI call for the collective (MPI_Reduce_scatter_block for a reduce-scatter
// of any size: [Note: reduce-scatter over MPI]), called directly on this thread on
// MPI_COMM_WORLD: the baseline `zrepro bench comm` compares the comm layer with.
void raw_mpi_collective(CollOp op, torch::Tensor& out, torch::Tensor& in, int root);
// Maximum of a value over all ranks (for timing reports).
double mpi_max(double v);
// The same, for a wait that may never end (a peer that vanished): the all-reduce is
// nonblocking and `poll` runs about every 50 ms while it is outstanding; `poll` ends the
// wait by throwing (Communicator::throw_if_interrupted). The request is then abandoned
// with the process, as an interrupted Work is ([Note: interrupting a wait]).
double mpi_max_interruptible(double v, const std::function<void()>& poll);
// Every rank's text, in rank order (on MPI_COMM_WORLD, outside any Communicator: no
// flight-recorder entry, no collective counted).
std::vector<std::string> mpi_all_gather_text(const std::string& mine);

// MPI_Init_thread(MPI_THREAD_MULTIPLE); throws if the library cannot provide it.
void mpi_init(int* argc, char*** argv);
void mpi_finalize();
int mpi_world_rank();
int mpi_world_size();
// Ranks on this node (for picking a GPU and sizing threads).
int mpi_local_rank();
int mpi_local_size();

}  // namespace zrepro
