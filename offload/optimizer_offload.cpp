// See optimizer_offload.h.
#include "offload/optimizer_offload.h"

#include <stdexcept>

#include "device/device_memory.h"
#include "offload/host_memory.h"

namespace zrepro {

OptimizerOffload::OptimizerOffload(const std::vector<int64_t>& numels, const std::vector<bool>& offloaded, Options o,
                                   CopyEngine& copier)
    : offloaded_(offloaded), o_(o), copier_(copier) {
  HostMemory& host = HostMemory::instance();
  const size_t L = numels.size();
  pending_.resize(L);
  master_.resize(L), exp_avg_.resize(L), exp_avg_sq_.resize(L), grad_.resize(L), half_.resize(L), landing_.resize(L);
  // One host buffer per layer and kind: chunked allocations, never one huge pin.
  for (size_t l = 0; l < L; ++l) {
    if (!offloaded_[l]) continue;
    const std::string what = "offload_optimizer layer " + std::to_string(l);
    master_[l] = host.empty(numels[l], torch::kFloat, o_.pinned, what + " master");
    exp_avg_[l] = host.empty(numels[l], torch::kFloat, o_.pinned, what + " exp_avg");
    exp_avg_sq_[l] = host.empty(numels[l], torch::kFloat, o_.pinned, what + " exp_avg_sq");
    grad_[l] = host.empty(numels[l], torch::kFloat, o_.pinned, what + " gradient");
    landing_[l] = host.empty(numels[l], o_.grad_dtype, o_.pinned, what + " gradient landing");
    if (o_.param_dtype != torch::kFloat && !o_.param_offload) half_[l] = host.empty(numels[l], o_.param_dtype, o_.pinned, what + " 16-bit copy");
  }
}

void OptimizerOffload::load_master(int layer, const torch::Tensor& params) {
  torch::NoGradGuard no_grad;
  DeviceMemory::HostScope host;  // any temporary of the conversion is host memory
  master_[layer].copy_(params);
}

void OptimizerOffload::use_as_half(int layer, torch::Tensor host_shard) {
  half_[layer] = std::move(host_shard);
}

// [Note: the boundary gradient goes down as fp32] DeepSpeed 0.19.8 at stages 1-2 copies
// the boundary's gradient partition to the host as fp32, cast on the device first
// (stage_1_and_2.py async_inplace_copy_grad_to_fp32_buffer_from_gpu: 4 B per parameter
// over the link whatever the training dtype; measured by the conformance probe). When a
// step has a single gradient (stage 1's boundary reduce, or gas 1) zrepro does the same:
// the piece lands in the fp32 gradient directly, and the copy engine counts and times a
// widening device-to-host copy at the destination's width. With accumulation at stage 2
// DeepSpeed moves model-dtype accumulators up and down every micro-step instead, which
// zrepro does not do yet (docs/design/CONFORMANCE.md names the difference).
CopyEventPtr OptimizerOffload::add_grad(int layer, int64_t offset, const torch::Tensor& piece) {
  if (!offloaded_[layer]) throw std::logic_error("OptimizerOffload::add_grad: layer is not offloaded");
  // The CUDA copy engine moves raw bytes and cannot convert: there the piece goes down in
  // its own dtype as before.
  const bool convert_ok = !copier_.options().cuda || piece.scalar_type() == torch::kFloat;
  if (o_.boundary_fp32 && only_ && convert_ok) {
    return track(layer, copier_.copy(grad_[layer].narrow(0, offset, piece.numel()), piece, CopyDir::d2h, o_.pinned,
                                     {}, "grad layer " + std::to_string(layer) + " (fp32)"));
  }
  const bool first = micro_ == 0;
  const bool keep = first || !o_.drop_accumulated_grads;
  torch::Tensor land = landing_[layer].narrow(0, offset, piece.numel());
  torch::Tensor acc = grad_[layer].narrow(0, offset, piece.numel());
  CopyEventPtr e = copier_.copy(land, piece, CopyDir::d2h, o_.pinned, [land, acc, first, keep] {
    torch::NoGradGuard no_grad;
    DeviceMemory::HostScope host;
    if (first)
      acc.copy_(land);
    else if (keep)
      acc.add_(land);
  }, "grad layer " + std::to_string(layer));
  return track(layer, e);
}

CopyEventPtr OptimizerOffload::track(int layer, CopyEventPtr e) {
  std::lock_guard<std::mutex> lock(pending_mu_);
  pending_[layer].push_back(e);
  return e;
}

void OptimizerOffload::finish_grads(int layer) {
  std::vector<CopyEventPtr> pending;
  {
    std::lock_guard<std::mutex> lock(pending_mu_);
    pending.swap(pending_[layer]);
  }
  for (auto& e : pending) copier_.wait(e);
}

void OptimizerOffload::finish_grads() {
  for (size_t l = 0; l < pending_.size(); ++l) finish_grads(static_cast<int>(l));
}

void OptimizerOffload::step(int layer, const AdamHyper& h, int64_t step, double coef) {
  torch::NoGradGuard no_grad;
  DeviceMemory::HostScope host;
  grad_[layer].mul_(coef);
  // A 16-bit copy is written in the same pass; an fp32 one (fp32 training under
  // offload_param: the host shard) is copied after.
  const torch::Tensor& half = half_[layer];
  const bool fp32_copy = half.defined() && half.scalar_type() == torch::kFloat;
  cpu_adam_step(master_[layer], grad_[layer], exp_avg_[layer], exp_avg_sq_[layer], h, step,
                fp32_copy ? torch::Tensor() : half);
  if (fp32_copy) half_[layer].copy_(master_[layer]);
}

void OptimizerOffload::upload(int layer, const torch::Tensor& device_params) {
  const torch::Tensor& src = half_[layer].defined() ? half_[layer] : master_[layer];
  // [Note: the upload is synchronous, as DeepSpeed's] After CPU Adam on a group,
  // DeepSpeed copies the updated fp32 partition into the device's 16-bit partition
  // with a blocking copy_ (stage_1_and_2.py step(), stage3.py
  // _reassign_or_swap_out_partitioned_parameters) before the next group's Adam: the
  // upload is exposed, not overlapped with the next group's update. zrepro's groups
  // are layers, so waiting here keeps the exposed upload time DeepSpeed's.
  copier_.wait(copier_.copy(device_params, src, CopyDir::h2d, o_.pinned, {}, "params layer " + std::to_string(layer)));
}

int64_t OptimizerOffload::host_bytes() const {
  int64_t b = 0;
  for (const auto* v : {&master_, &exp_avg_, &exp_avg_sq_, &grad_})
    for (const auto& t : *v)
      if (t.defined()) b += t.numel() * 4;
  if (!o_.param_offload)
    for (const auto& t : half_)
      if (t.defined()) b += t.numel() * static_cast<int64_t>(t.element_size());
  for (const auto& t : landing_)
    if (t.defined()) b += t.numel() * static_cast<int64_t>(t.element_size());
  return b;
}

}  // namespace zrepro
