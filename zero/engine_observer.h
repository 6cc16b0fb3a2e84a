// EngineObserver: the one hook for what runs beside a ZeroEngine and follows its state: the
// stood-in peers of --peers stand-in (zero/peer_shadow.h) today. The engine calls every
// hook at its point, always; the default observer does nothing.
//
// [Note: one hook for what watches the engine] Whether the engine's peers are stood in for
// is decided once, where the StandInCommunicator is made (trainer/loop/virtual_ranks.cpp):
// that code makes the observer, hands it to the communicator and to the engine. The engine
// knows nothing of stand-ins (no cast of its communicator, no branch on whether peers are
// modelled): it tells the observer what it built, reduced, summed, stepped and zeroed, and
// offers what a rank's statistics are made of, and the observer decides what to do with it.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include <torch/torch.h>

#include "offload/cpu_adam.h"
#include "zero/param_group.h"

namespace zrepro {

// What a rank's gradient statistics (the all-reduced [loss, squared norm, non-finite
// count]) are made of, as the engine takes them for its own rank.
struct RankStatsParts {
  double local_loss = 0;
  std::vector<double> own_norms;  // this rank's norm share of each layer
  // Rank k's norm share of layer `layer`, taken as rank k takes it: of `share`, rank k's
  // owned gradient; undefined at stage 0, where every rank holds the whole reduced gradient
  // and the engine takes rank k's partition of its own.
  std::function<double(size_t layer, int k, const torch::Tensor& share)> norm;
  // The squared norm and non-finite count of per-layer norms, summed in the engine's order.
  std::function<std::pair<double, double>(const std::vector<double>& norms)> sum;
};

// Every rank's reduced piece of group g's owned gradient at owned_offset: [world, numel].
using ReducedPieces = std::function<void(int group, int64_t owned_offset, const torch::Tensor& rows)>;

class EngineObserver {
 public:
  virtual ~EngineObserver() = default;
  // Group g (built in index order) from its initial values (fp32, parameters back to back);
  // grad_dtype: the dtype its owned gradient accumulates in.
  virtual void group_built(ParamGroup& g, const torch::Tensor& init_fp32, torch::ScalarType grad_dtype) {}
  // Where the gradient reducer hands every rank's reduced pieces (empty: nowhere).
  virtual ReducedPieces reduced_pieces() { return {}; }
  // Before the all-reduce of this rank's statistics `own` ([loss, squared norm, non-finite]).
  virtual void stats_reducing(const torch::Tensor& own, const RankStatsParts& parts) {}
  // The optimizer stepped (Adam's step count and the gradients' scale).
  virtual void stepped(const AdamHyper& h, int64_t step, double coef) {}
  // The step's gradients were zeroed (after a step, or a skipped one).
  virtual void grads_zeroed() {}
};

// The observer of an engine nothing watches.
inline EngineObserver& no_engine_observer() {
  static EngineObserver none;
  return none;
}

}  // namespace zrepro
