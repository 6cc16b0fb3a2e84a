// OptimizerOffload: the host side of ZeRO-Offload (offload_optimizer) on one rank.
// Per offloaded layer: the fp32 master partition, the Adam moments and the fp32
// gradient accumulator live in host memory (pinned or pageable), with a 16-bit host
// copy of the updated partition that goes back up (under offload_param that copy is
// the layer's host parameter shard itself, so nothing goes up). Reduced gradient
// pieces come down through the copy engine into the layer's landing buffer (the
// reduced gradient dtype, like DeepSpeed's 16-bit pinned accumulators), and the host
// adds them into the fp32 accumulator: micro-step 0 copies, later micro-steps add,
// so gradient accumulation with offload accumulates on the host as DeepSpeed does.
// The compute thread never waits for this: the copy engine runs copies and their
// host adds in submission order, so a landing range is rewritten (by the next
// micro-step's piece) only after the previous add read it.
#pragma once
#include <cstdint>
#include <mutex>
#include <vector>

#include <torch/torch.h>

#include "offload/copy_engine.h"
#include "offload/cpu_adam.h"

namespace zrepro {

class OptimizerOffload {
 public:
  struct Options {
    bool pinned = true;
    torch::ScalarType grad_dtype = torch::kFloat;   // dtype of the reduced gradients on the device
    torch::ScalarType param_dtype = torch::kFloat;  // device parameter dtype
    bool drop_accumulated_grads = false;  // fault injection: micro-steps after the first are lost
    bool param_offload = false;           // the 16-bit copy is the host shard (use_as_half)
    // Stages 1-2: a step's only gradient (stage 1's boundary reduce, or one micro-step per
    // step) goes down as fp32 straight into the fp32 gradient ([Note: the boundary
    // gradient goes down as fp32]).
    bool boundary_fp32 = false;
    // Stages 1-2 with accumulation: the elements of whole parameters beyond this rank's
    // partitions that DeepSpeed moves with the accumulator (offload_grad_overhang_numel).
    int64_t overhang_numel = 0;
  };

  // numels: per layer, the partition this rank updates; offloaded[l] false keeps the
  // layer's optimizer on the device (partial offload, ratio < 1).
  OptimizerOffload(const std::vector<int64_t>& numels, const std::vector<bool>& offloaded, Options o,
                   CopyEngine& copier);

  bool offloaded(int layer) const { return offloaded_[layer]; }
  // Master weights from the layer's parameter partition (device or host shard).
  void load_master(int layer, const torch::Tensor& params);
  // Under offload_param (Options::param_offload): the host shard the optimizer writes into.
  void use_as_half(int layer, torch::Tensor host_shard);
  // Stages 1-2: the device buffer (model dtype, the largest parameter) the accumulator
  // comes up into (offload_grad_temp_numel).
  void use_device_temp(torch::Tensor temp) { device_temp_ = std::move(temp); }

  // only: this micro-step's gradient is the step's only one (it is both first and last);
  // last: the step's last micro-step (the accumulation boundary).
  void begin_micro_step(int64_t micro, bool only = false, bool last = false) {
    std::lock_guard<std::mutex> lock(pending_mu_);
    micro_ = micro;
    only_ = only;
    last_ = only || last;
    overhang_moved_ = false;
  }
  // A reduced gradient piece (device) for [offset, offset + numel) of the layer's
  // partition. Returns the copy's event (the piece must not change until it completes).
  CopyEventPtr add_grad(int layer, int64_t offset, const torch::Tensor& device_piece);
  void finish_grads();           // every gradient copy and host add done (an exposed wait)
  void finish_grads(int layer);  // the layer's copies and host adds done
  torch::Tensor& grad(int layer) { return grad_[layer]; }

  // CPU Adam on the host partition with the gradients scaled by coef; writes the
  // 16-bit copy in the same pass. Then upload() copies it to the device and waits
  // ([Note: the upload is synchronous, as DeepSpeed's]).
  void step(int layer, const AdamHyper& h, int64_t step, double coef);
  void upload(int layer, const torch::Tensor& device_params);
  bool uploads() const { return !o_.param_offload; }  // under offload_param the host shard is the parameter

  int64_t host_bytes() const;
  // The layer's host fp32 master and Adam moments (a checkpoint reads and writes them).
  torch::Tensor& master(int layer) { return master_[layer]; }
  torch::Tensor& exp_avg(int layer) { return exp_avg_[layer]; }
  torch::Tensor& exp_avg_sq(int layer) { return exp_avg_sq_[layer]; }

 private:
  CopyEventPtr track(int layer, CopyEventPtr e);  // a gradient copy finish_grads waits for
  // Stages 1-2 with accumulation: DeepSpeed's up, add, down ([Note: DeepSpeed's
  // offloaded accumulation moves whole parameters]).
  CopyEventPtr accumulate_via_device(int layer, int64_t offset, const torch::Tensor& piece);
  // The overhang's share of it, once per micro-step.
  void move_overhang(int layer);
  // host[0, n) -> device_temp_[0, n), waited for (the add reads it at once).
  void bring_up(const torch::Tensor& host);

  std::vector<bool> offloaded_;
  Options o_;
  CopyEngine& copier_;
  std::vector<torch::Tensor> master_, exp_avg_, exp_avg_sq_, grad_, half_, landing_;
  torch::Tensor device_temp_, overhang_;  // stages 1-2: DeepSpeed's accumulation path
  std::mutex pending_mu_;  // add_grad may run on the comm stream ([Note: offloaded pieces go down at once])
  std::vector<std::vector<CopyEventPtr>> pending_;  // per layer
  int64_t micro_ = 0;
  bool only_ = false, last_ = false, overhang_moved_ = false;
};

}  // namespace zrepro
