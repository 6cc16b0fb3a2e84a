// See layer_optimizer.h.
#include "zero/layer_optimizer.h"

#include "device/device_memory.h"

namespace zrepro {

void adam_update(torch::Tensor& master, const torch::Tensor& grad, torch::Tensor& exp_avg, torch::Tensor& exp_avg_sq,
                 torch::Tensor owned, bool aliased, const AdamHyper& h, int64_t step, double coef) {
  // fp32 gradients are scaled in place (they are zeroed after the step); 16-bit
  // ones get the fp32 copy the optimizer needs.
  torch::Tensor g32 = grad.to(torch::kFloat);
  g32.mul_(coef);
  if (master.device().is_cpu()) {
    const bool half = owned.scalar_type() != torch::kFloat;
    cpu_adam_step(master, g32, exp_avg, exp_avg_sq, h, step, half ? owned : torch::Tensor());
    if (!half && !aliased) owned.copy_(master);
  } else {
    torch_adam_step(master, g32, exp_avg, exp_avg_sq, h, step);
    if (!aliased) owned.copy_(master);
  }
}

double grad_share_norm(const torch::Tensor& share, const std::vector<int64_t>& pieces) {
  if (pieces.empty()) return share.to(torch::kFloat).norm().item<double>();
  std::vector<torch::Tensor> norms;  // one fp64 copy alive at a time, as in DeepSpeed; one sync
  int64_t off = 0;
  for (int64_t n : pieces) {
    norms.push_back(share.narrow(0, off, n).to(torch::kDouble).norm());
    off += n;
  }
  return torch::stack(norms).norm().item<double>();
}

double owned_grad_norm(const ParamGroup& g, const torch::Tensor& share, int rank) {
  return grad_share_norm(share, g.layout().norm_pieces(rank));
}

namespace {

class DeviceAdam : public LayerOptimizer {
 public:
  explicit DeviceAdam(ParamGroup& g) : group_(g) {
    torch::Tensor owned = g.owned_params();
    const bool in_place = g.config().policy.owns_whole_flat() && owned.scalar_type() == torch::kFloat;
    master_ = in_place ? owned : owned.to(torch::kFloat, /*non_blocking=*/false, /*copy=*/true);
  }
  OptimizerTensors tensors() override {
    create_moments();  // a checkpoint saved before the first step, or loaded into a new engine
    return {master_, exp_avg_, exp_avg_sq_};
  }
  double grad_norm(const torch::Tensor& share) override { return owned_grad_norm(group_, share, group_.config().rank); }
  void update(const torch::Tensor& grad, const AdamHyper& h, int64_t step, double coef) override {
    create_moments();
    adam_update(master_, grad, exp_avg_, exp_avg_sq_, group_.owned_params(), aliased(), h, step, coef);
  }
  // What the layer holds from its first step on.
  int64_t device_bytes() const override { return (aliased() ? 2 : 3) * master_.numel() * 4; }

 private:
  // Adam's moments are created by the first step, as torch's AdamW and DeepSpeed's
  // FusedAdam do ([Note: DeepSpeed's optimizer-state and gradient lifetimes]).
  void create_moments() {
    if (exp_avg_.defined()) return;
    DeviceMemory::DeviceScope device;  // also when a checkpoint load (host work) asks for them
    DeviceMemory::CategoryScope tag(MemCategory::optimizer_states);
    exp_avg_ = torch::zeros_like(master_);
    exp_avg_sq_ = torch::zeros_like(master_);
  }
  bool aliased() const { return master_.data_ptr() == group_.owned_params().data_ptr(); }
  ParamGroup& group_;
  torch::Tensor master_, exp_avg_, exp_avg_sq_;
};

class HostAdam : public LayerOptimizer {
 public:
  HostAdam(ParamGroup& g, OptimizerOffload& host) : group_(g), host_(host), layer_(g.index()) {
    // DeepSpeed's ZeRO-Offload: fp32 master and moments only on the host.
    host_.load_master(layer_, g.owned_params());
    if (g.host_shard()) host_.use_as_half(layer_, g.owned_params());
  }
  OptimizerTensors tensors() override {
    return {host_.master(layer_), host_.exp_avg(layer_), host_.exp_avg_sq(layer_)};
  }
  double grad_norm(const torch::Tensor&) override {
    DeviceMemory::HostScope host;  // the host optimizer's norm runs on the host
    return owned_grad_norm(group_, host_.grad(layer_), group_.config().rank);
  }
  void update(const torch::Tensor&, const AdamHyper& h, int64_t step, double coef) override {
    // CPU Adam on the host partition, then the updated 16-bit partition goes up.
    host_.step(layer_, h, step, coef);
    if (host_.uploads()) host_.upload(layer_, group_.owned_params());
  }
  int64_t device_bytes() const override { return 0; }

 private:
  ParamGroup& group_;
  OptimizerOffload& host_;
  int layer_;
};

}  // namespace

std::unique_ptr<LayerOptimizer> make_device_adam(ParamGroup& group) { return std::make_unique<DeviceAdam>(group); }

std::unique_ptr<LayerOptimizer> make_host_adam(ParamGroup& group, OptimizerOffload& host) {
  return std::make_unique<HostAdam>(group, host);
}

}  // namespace zrepro
