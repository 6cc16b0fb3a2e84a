// PeerShadow: what the N-1 peers of a stood-in rank hold (--peers stand-in), so that one
// rank of an N-rank job trains with the values its peers would send it. Per parameter
// group, one row per rank of what that rank owns and updates: its 16-bit (or fp32)
// partition, fp32 master, Adam moments and reduced gradient ([world, owned] tensors on the
// host, nobody's device memory). It is the engine's observer ([Note: one hook for what
// watches the engine], zero/engine_observer.h), fed by the one rank that runs:
//   its groups as they are built (stage 0's peers hold what this rank holds: no rows);
//   the reduced gradient of every rank (GradReducer hands each reduced bucket's rows);
//   every rank's gradient statistics before their all-reduce (the communicator sums them);
//   the optimizer step (the same adam_update each rank's DeviceAdam runs, on all rows);
// and StandInCommunicator reads it: every rank's slice of a parameter all-gather. Memory
// and time are O(model), not O(N x model).
//
// [Note: the stand-in checks itself] The rank that runs is one of the rows: at every
// gather its row must equal the partition it really sends, and at every step its row's
// norm share the norm it really computed. PeerShadow counts both comparisons and keeps
// the first difference, so a run says whether its peers' values were exact (bit for bit
// what N ranks would hold under the same-data rule) or where the model left them.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "offload/cpu_adam.h"
#include "zero/comm/stand_in_communicator.h"
#include "zero/engine_observer.h"
#include "zero/param_group.h"

namespace zrepro {

struct StandInChecks {
  bool values_modelled = true;             // false: --peer-values initial (the peers never step)
  int64_t gathers = 0, gathers_equal = 0;  // this rank's row against the partition it sent
  int64_t norms = 0, norms_equal = 0;      // its row's norm share against the one it computed
  std::string first_difference;            // empty: every comparison was equal
  bool exact() const { return values_modelled && gathers == gathers_equal && norms == norms_equal; }
};

class PeerShadow : public PeerValues, public EngineObserver {
 public:
  // The peers of comm's rank, in comm's world; comm's --peer-values mode: initial keeps the
  // peers' initial partitions only, which never step, their gradient-norm shares taken as
  // this rank's own. Hands itself to comm as its peers' values until destroyed.
  explicit PeerShadow(StandInCommunicator& comm);
  ~PeerShadow() override;
  PeerShadow(const PeerShadow&) = delete;
  PeerShadow& operator=(const PeerShadow&) = delete;
  bool modelled() const { return checks_.values_modelled; }

  // Group g (built in index order): every rank's part of the layer's initial values (fp32,
  // parameters back to back), as ParamGroup::load takes this rank's; its gradient rows in
  // grad_dtype (the dtype of the owned gradient the engine accumulates into).
  void group_built(ParamGroup& g, const torch::Tensor& init_fp32, torch::ScalarType grad_dtype) override;
  ReducedPieces reduced_pieces() override;
  // Every rank's [loss, squared norm, non-finite count] for the communicator to sum, this
  // rank's norm shares checked against its row.
  void stats_reducing(const torch::Tensor& own, const RankStatsParts& parts) override;
  // Every rank's Adam step, as each rank's LayerOptimizer takes it.
  void stepped(const AdamHyper& h, int64_t step, double coef) override;
  void grads_zeroed() override;
  // Rank k's owned gradient of group g (a row).
  torch::Tensor grad(int group, int k) const { return rows_[group].grads[k]; }

  bool fill_gather(const torch::Tensor& mine, torch::Tensor out) override;
  StandInChecks checks() const;

 private:
  // Every rank's reduced piece of group g's owned gradient at owned_offset: [world, numel].
  void add_reduced(int group, int64_t owned_offset, const torch::Tensor& rows);
  // This rank's norm share of group g: `own` computed by its engine, `modelled` from its row.
  void check_norm(int group, double own, double modelled);
  struct Rows {
    ParamGroup* group = nullptr;
    torch::Tensor params, master, exp_avg, exp_avg_sq, grads;  // [world, owned]
  };
  void differ(const std::string& what);  // under mu_

  StandInCommunicator& comm_;
  int world_, rank_;
  bool whole_flat_ = false;  // stage 0: every rank holds the whole gradient, no rows
  std::vector<Rows> rows_;
  mutable std::mutex mu_;  // checks_ (gathers run on the comm stream)
  StandInChecks checks_;
};

}  // namespace zrepro
