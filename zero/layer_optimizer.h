// LayerOptimizer: the optimizer of one layer's owned partition, wherever its states
// live: DeviceAdam keeps the fp32 master and the Adam moments in device memory
// (ZeRO stages 0-3), HostAdam hands the layer to OptimizerOffload (ZeRO-Offload: CPU
// Adam on host states, the updated 16-bit partition copied back up). The engine's
// step treats every layer alike through this interface.
#pragma once
#include <cstdint>
#include <memory>

#include <torch/torch.h>

#include "offload/cpu_adam.h"
#include "offload/optimizer_offload.h"
#include "zero/param_group.h"

namespace zrepro {

// The fp32 states of what a rank owns of one layer, laid out as its owned parameters
// (ParamGroup::owned_params): views of the optimizer's own tensors, on the device or the host.
struct OptimizerTensors {
  torch::Tensor master, exp_avg, exp_avg_sq;
};

class LayerOptimizer {
 public:
  virtual ~LayerOptimizer() = default;
  virtual OptimizerTensors tensors() = 0;
  // L2 norm of this rank's share of the layer's gradient (inf or NaN anywhere make it
  // non-finite). device_share: that share where it is on the device.
  virtual double grad_norm(const torch::Tensor& device_share) = 0;
  // One Adam step with the gradients scaled by coef. device_grad: the owned gradient
  // on the device (ignored when the gradient is on the host). The updated partition
  // is on the device when it returns.
  virtual void update(const torch::Tensor& device_grad, const AdamHyper& h, int64_t step, double coef) = 0;
  // Device bytes of the optimizer states (fp32 master unless aliased, two moments).
  virtual int64_t device_bytes() const = 0;
};

// The step every rank's DeviceAdam takes on what it owns (also the stand-in peers' rows,
// zero/peer_shadow.h): the gradient scaled by coef in fp32 (in place when it is
// fp32), Adam on the fp32 master, the updated values written to `owned` unless the master
// is `owned` itself (aliased).
void adam_update(torch::Tensor& master, const torch::Tensor& grad, torch::Tensor& exp_avg, torch::Tensor& exp_avg_sq,
                 torch::Tensor owned, bool aliased, const AdamHyper& h, int64_t step, double coef);
// L2 norm of a rank's gradient share (inf or NaN anywhere: non-finite): with `pieces` (their
// sizes back to back, LayerLayout::norm_pieces) one fp64 norm of each, as DeepSpeed's ZeRO
// optimizers take them ([Note: the gradient norm's fp64 copies]); without, one norm of the
// share accumulated in fp32.
double grad_share_norm(const torch::Tensor& share, const std::vector<int64_t>& pieces = {});
// The norm of `rank`'s owned share of group g's gradient, as every rank takes its own (on
// the device, or offloaded on the host: DeepSpeed takes the same per-parameter fp64 norms,
// in the backward as each gradient lands, stage_1_and_2.py:1871).
double owned_grad_norm(const ParamGroup& g, const torch::Tensor& share, int rank);

// Master weights and moments on the device. With fp32 parameters and no partition
// of its own (stage 0) the master is the parameter buffer itself (a plain torch
// optimizer updates in place).
std::unique_ptr<LayerOptimizer> make_device_adam(ParamGroup& group);
// The layer's optimizer on the host (OptimizerOffload); loads its master weights.
std::unique_ptr<LayerOptimizer> make_host_adam(ParamGroup& group, OptimizerOffload& host);

}  // namespace zrepro
