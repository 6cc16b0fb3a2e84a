// StandInCommunicator: one rank of an N-rank job (--world-size N --peers stand-in) whose
// N-1 peers are not run. What each peer would contribute to a collective comes from the
// job's symmetry or from a model of the peers' state (PeerValues), so the one rank's
// engine, buffers, bytes and numerics are those of the N-rank job at a cost that does
// not grow with N (trainer/loop/virtual_ranks.h).
//
// [Note: what a stood-in peer contributes] Under the same-data rule every rank draws the
// same batches from the same parameters, so every rank's gradient is this rank's:
//   all_reduce / reduce_scatter: the sum of N copies of this rank's input, computed as N
//     ranks' rank-order sum is (sum_of_copies: exact, fp32 accumulation of 16-bit
//     payloads, in O(log N) per element), unless the caller gave every rank's input
//     (set_rank_inputs: the loss, gradient-norm share and overflow count of each rank);
//   all_gather: rank j's slice is what rank j holds, which PeerValues keeps (the peers'
//     partitions, updated by their optimizer steps: zero/peer_shadow.h);
//   broadcast: the root's tensor is this rank's (every rank holds the same replica);
//   barrier: nothing to wait for.
// With PeerValuesMode::model a reduce_scatter leaves the full sum in its input (scratch by
// the Communicator's contract), so that the caller can hand every rank's slice to its
// peer model; otherwise it sums this rank's slice alone.
#pragma once
#include <map>
#include <mutex>

#include "zero/comm/communicator.h"

namespace zrepro {

// What n ranks' rank-order sum of n copies of x gives: ((x + x) + x) + ... in x's type
// (fp32 for fp16/bf16 payloads, as VirtualGroup and MpiCommunicator sum them). Returns the
// sum in that accumulation type. Exact (bit for bit the n-1 additions), O(log n) per
// element: within a binade the increment of each addition is constant, so runs of
// additions are taken at once ([Note: a run of equal increments] in the .cpp).
torch::Tensor sum_of_copies(const torch::Tensor& x, int64_t n);

// The peers' state a stand-in all_gather reads.
class PeerValues {
 public:
  virtual ~PeerValues() = default;
  // `mine`: this rank's input to an all_gather (a view of what it owns); `out`: the
  // gather's output, world x mine.numel() elements. Writes every rank's slice into out:
  // the peers' from the model, this rank's from `mine` (which it first compares with the
  // model's row of this rank). false: `mine` is not a buffer the model holds.
  virtual bool fill_gather(const torch::Tensor& mine, torch::Tensor out) = 0;
};

// What the peers' model keeps (--peer-values): their partitions updated step by step
// (exact under the same-data rule, 16 bytes per parameter of host memory), or their
// initial values only (2 bytes per parameter; memory and sizes exact, values not).
enum class PeerValuesMode { model, initial };

class StandInCommunicator : public Communicator {
 public:
  StandInCommunicator(int rank, int world, PeerValuesMode mode = PeerValuesMode::model);
  PeerValuesMode mode() const { return mode_; }
  ~StandInCommunicator() override;
  std::string backend() const override { return "stand-in"; }

  void set_peer_values(PeerValues* p) { peers_ = p; }
  // The next all_reduce of `t` sums these rows ([world, t.numel()], in t's dtype, row r
  // rank r's input; this rank's row must be t itself) instead of copies of t.
  void set_rank_inputs(const torch::Tensor& t, torch::Tensor rows);

 protected:
  void execute(CollOp op, torch::Tensor& out, torch::Tensor& in, int root) override;

 private:
  void gather_from_peers(torch::Tensor& out, const torch::Tensor& in);
  PeerValuesMode mode_;
  PeerValues* peers_ = nullptr;
  std::mutex mu_;
  std::map<const void*, torch::Tensor> rank_inputs_;  // by the data pointer of the reduced tensor
};

}  // namespace zrepro
