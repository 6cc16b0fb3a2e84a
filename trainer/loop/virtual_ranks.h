// VirtualRanks: one process stands in for every rank of an N-rank job (--world-size N).
// Each virtual rank runs the ordinary training loop (train.h) on its own thread, with
// its own engine, its own device-memory ledger ([Note: one ledger per virtual rank] in
// device/device_memory.h) and a VirtualCommunicator (zero/comm/virtual_communicator.h),
// so every rank's partitions, buffers, collectives and memory by category are exactly
// those of the real job. The subject rank (--as-rank) is the one this process reports
// as its own, the one whose host buffers are really page-locked and, on CUDA, the one
// on the GPU (the others compute on the CPU).
//
// With --peers stand-in only the subject runs: its StandInCommunicator
// (zero/comm/stand_in_communicator.h) supplies what the N-1 peers would contribute, from
// the same-data rule and the engine's model of their partitions (zero/peer_shadow.h), so
// time and memory do not grow with N ([Note: what a stood-in peer contributes]).
//
// [Note: what virtual ranks reproduce] Memory and numerics, exactly: the same engine
// code runs per rank and the collectives compute what N processes would. Not time: the
// ranks share this process's cores (N forwards and backwards per step), so step times,
// stragglers and hangs need real processes (--ranks N), and the injections that make
// ranks diverge in time or in their collective sequence are refused here.
#pragma once
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "trainer/loop/train.h"
#include "zero/comm/stand_in_communicator.h"
#include "zero/comm/virtual_communicator.h"
#include "zero/peer_shadow.h"

namespace zrepro {

// A virtual rank is a thread with its own engine: a bound that keeps a typo from
// starting thousands.
constexpr int kMaxVirtualRanks = 512;

// With stood-in peers the rank and world are ints, as torch.distributed's are; what a
// huge world costs is its layout's padding (stage 3 pads every parameter to a multiple
// of N), which the emulated device counts.
constexpr int kMaxStandInRanks = 1 << 30;

// --peers: every rank runs (a thread each), or the subject alone with stood-in peers.
enum class Peers { run, stand_in };


class VirtualRanks {
 public:
  // timeout_s: how long a virtual rank waits for the others in a collective (a bug, or
  // a rank that failed without aborting the group, ends as a CommError).
  // values: what stood-in peers' model keeps (ignored with Peers::run).
  VirtualRanks(int world, int subject, double timeout_s, Peers peers = Peers::run,
               PeerValuesMode values = PeerValuesMode::model);
  ~VirtualRanks();
  int world() const { return world_; }
  int subject() const { return subject_; }
  bool stand_in() const { return peers_ == Peers::stand_in; }
  // The ranks that run: all of them, or the subject alone.
  std::vector<int> running() const;
  Communicator& comm(int rank) { return stand_in() ? *comms_.front() : *comms_[rank]; }
  // Applies to every virtual rank's communicator (--interconnect-gbps).
  void model_busbw(double gbps);

  struct Outcome {
    std::vector<TrainResult> results;  // per virtual rank (steps completed before a failure)
    int failed_rank = -1;              // the first rank whose own error ended the run
    std::exception_ptr error;          // that error (OOM, numerical, ...), rethrowable
  };
  // Trains every virtual rank to the end or to the first failure (which aborts the
  // others' collectives so that every thread ends). opts.comm is set per rank; on_step,
  // opts.trace and the data loader's pinned batches belong to the subject alone.
  Outcome train_all(const JobSpec& job, const TrainOptions& opts, const StepCallback& on_step,
                    bool keep_final_params = false);

 private:
  int world_, subject_;
  Peers peers_;
  std::shared_ptr<VirtualGroup> group_;
  std::vector<std::unique_ptr<Communicator>> comms_;
  StandInCommunicator* stand_in_comm_ = nullptr;  // the subject's, with stood-in peers
};

}  // namespace zrepro
