// See optimizer_offload.h.
#include "offload/optimizer_offload.h"

#include <algorithm>
#include <functional>
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
  if (o_.overhang_numel > 0)
    overhang_ = host.empty(o_.overhang_numel, o_.grad_dtype, o_.pinned, "offload_optimizer whole-parameter gradient overhang");
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
// the boundary's sum goes down the same way after DeepSpeed's model-dtype accumulation
// (accumulate_via_device).
CopyEventPtr OptimizerOffload::add_grad(int layer, int64_t offset, const torch::Tensor& piece) {
  if (!offloaded_[layer]) throw std::logic_error("OptimizerOffload::add_grad: layer is not offloaded");
  // The CUDA copy engine moves raw bytes and cannot convert: there the piece goes down in
  // its own dtype as before.
  const bool convert_ok = !copier_.options().cuda || piece.scalar_type() == torch::kFloat;
  if (o_.boundary_fp32 && only_ && convert_ok) {
    return track(layer, copier_.copy(grad_[layer].narrow(0, offset, piece.numel()), piece, CopyDir::d2h, o_.pinned,
                                     {}, "grad layer " + std::to_string(layer) + " (fp32)"));
  }
  // DeepSpeed accumulates in the model dtype; a reduction in another dtype (an explicit
  // communication_data_type) takes the host path below.
  if (o_.boundary_fp32 && !only_ && device_temp_.defined() && piece.scalar_type() == device_temp_.scalar_type())
    return accumulate_via_device(layer, offset, piece);
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

// Runs where add_grad runs (the comm stream, as DeepSpeed's copies run on its reduction
// stream): the waits for the accumulator to come up hold that stream, not the compute
// thread, so they are not counted as exposed.
CopyEventPtr OptimizerOffload::accumulate_via_device(int layer, int64_t offset, const torch::Tensor& piece) {
  bool move = false;
  {
    std::lock_guard<std::mutex> lock(pending_mu_);
    move = !overhang_moved_;
    overhang_moved_ = true;
  }
  if (move) move_overhang(layer);
  torch::NoGradGuard no_grad;
  const std::string what = "grad layer " + std::to_string(layer);
  torch::Tensor acc = landing_[layer].narrow(0, offset, piece.numel());
  if (micro_ > 0) {
    const int64_t chunk = device_temp_.numel();
    for (int64_t i = 0; i < piece.numel(); i += chunk) {
      const int64_t n = std::min(chunk, piece.numel() - i);
      bring_up(acc.narrow(0, i, n));
      const torch::Tensor up = device_temp_.narrow(0, 0, n);
      torch::Tensor sum = piece.narrow(0, i, n);
      if (o_.drop_accumulated_grads)
        sum.copy_(up);  // the fault: this micro-step's gradient is lost
      else
        sum.add_(up);  // in the model dtype, as DeepSpeed adds on the device
    }
  }
  torch::Tensor grad = grad_[layer].narrow(0, offset, piece.numel());
  // CUDA cannot widen in the copy: the host widens the landed sum (the link carries the
  // model dtype there, not fp32: docs/design/CONFORMANCE.md).
  const bool host_widens = last_ && copier_.options().cuda;
  std::function<void()> widen;
  if (host_widens)
    widen = [acc, grad] {
      torch::NoGradGuard no_grad;
      DeviceMemory::HostScope host;
      grad.copy_(acc);
    };
  CopyEventPtr e = track(layer, copier_.copy(acc, piece, CopyDir::d2h, o_.pinned, widen, what + " (accumulator)"));
  if (!last_ || host_widens) return e;
  return track(layer, copier_.copy(grad, piece, CopyDir::d2h, o_.pinned, {}, what + " (fp32)"));
}

void OptimizerOffload::move_overhang(int layer) {
  if (!overhang_.defined()) return;
  const int64_t chunk = device_temp_.numel();
  for (int64_t i = 0; i < overhang_.numel(); i += chunk) {
    const int64_t n = std::min(chunk, overhang_.numel() - i);
    const torch::Tensor host = overhang_.narrow(0, i, n);
    if (micro_ > 0) bring_up(host);
    track(layer, copier_.copy(host, device_temp_.narrow(0, 0, n), CopyDir::d2h, o_.pinned, {}, "grad overhang"));
  }
}

void OptimizerOffload::bring_up(const torch::Tensor& host) {
  // Pinned copies run in submission order, so this lands after every earlier copy that
  // wrote `host` or read the device buffer.
  copier_.copy(device_temp_.narrow(0, 0, host.numel()), host, CopyDir::h2d, o_.pinned, {}, "grad accumulator up")
      ->wait();
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
  if (overhang_.defined()) b += overhang_.numel() * static_cast<int64_t>(overhang_.element_size());
  return b;
}

}  // namespace zrepro
