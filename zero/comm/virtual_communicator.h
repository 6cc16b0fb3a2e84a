// In-process collectives among the N virtual ranks of one process (--world-size N):
// each virtual rank's engine runs on its own thread with a VirtualCommunicator; a
// collective blocks until every virtual rank has issued it, then the last to arrive
// computes every rank's output exactly as an N-rank job's collective would (sums in
// rank order; 16-bit payloads summed in fp32 and cast back, as MpiCommunicator does). Bytes, times and the flight recorder
// are the base Communicator's, per virtual rank, as for MPI and NCCL.
#pragma once
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "zero/comm/communicator.h"

namespace zrepro {

// [Note: a virtual round] Rank k's comm stream posts its op and blocks. The last rank to
// post checks that every rank issued the same collective (op, sizes, dtype, root: the
// signature MpiCommunicator exchanges), writes every rank's output while all others
// are blocked (so in-place all_reduce and all_gather outputs that view their input are
// safe), drops the tensors and opens the next round. A mismatch, an abort (another
// virtual rank failed) or a timeout throws CommError on every waiting rank.
class VirtualGroup {
 public:
  // timeout_s <= 0: wait forever.
  VirtualGroup(int world, double timeout_s);
  int world() const { return world_; }
  // Every waiting and later collective throws CommError(why). The first reason stays.
  void abort(const std::string& why);
  std::string aborted() const;
  // Blocks rank `rank`'s comm stream until the round completes (see the Note).
  // label: what issued it (the flight recorder's), named in a mismatch.
  void run(int rank, CollOp op, torch::Tensor& out, torch::Tensor& in, int root, const std::string& label = "");

 private:
  struct Post {
    CollOp op = CollOp::barrier;
    torch::Tensor out, in;
    int root = 0;
    bool posted = false;
    std::string label;
  };
  // Under mu_; throws CommError on a mismatch; counts same-sized ones issued for
  // different labels ([Note: collectives that paired different parameters]).
  void check_signatures();
  void combine();                 // under mu_: every rank's output

  const int world_;
  const double timeout_s_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Post> posts_;
  int arrived_ = 0;
  int64_t round_ = 0;
  std::string aborted_;
  Communicator::LabelMismatches label_mismatches_;

 public:
  // Every pairing of different labels in this group (each rank's view is the group's).
  Communicator::LabelMismatches label_mismatches() const;
};

class VirtualCommunicator : public Communicator {
 public:
  VirtualCommunicator(std::shared_ptr<VirtualGroup> group, int rank);
  ~VirtualCommunicator() override;
  std::string backend() const override { return "virtual"; }
  VirtualGroup& group() { return *group_; }
  LabelMismatches label_mismatches() const override { return group_->label_mismatches(); }
  bool compares_labels() const override { return true; }

 protected:
  void execute(CollOp op, torch::Tensor& out, torch::Tensor& in, int root) override;

 private:
  std::shared_ptr<VirtualGroup> group_;
};

}  // namespace zrepro
