// Fused AdamW over fp32 host buffers: one pass reads p, g, m, v and writes p, m, v
// (and optionally the 16-bit copy of p for the device), vectorised per ISA at run
// time and split over OpenMP threads in cache-sized tiles. Adam is memory bound
// (~28 bytes per parameter), so one pass is what makes it fast.
#pragma once
#include <cstdint>

#include <torch/torch.h>

namespace zrepro {

struct AdamHyper {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  bool adam_w_mode = true;       // decoupled weight decay (AdamW) vs L2 added to the gradient
  bool bias_correction = true;
};

// In place on contiguous fp32 CPU tensors of equal numel. step is 1-based.
// If half_out is defined (bf16 or fp16, same numel) the updated p is also
// written there, rounded to nearest even.
void cpu_adam_step(torch::Tensor& p, const torch::Tensor& g, torch::Tensor& m, torch::Tensor& v,
                   const AdamHyper& h, int64_t step, torch::Tensor half_out = {});

// The same update, scalar (vectorisation off): the reference cpu_adam_step equals bit
// for bit ([Note: vectorised Adam] in cpu_adam.cpp).
void cpu_adam_step_reference(torch::Tensor& p, const torch::Tensor& g, torch::Tensor& m, torch::Tensor& v,
                             const AdamHyper& h, int64_t step, torch::Tensor half_out = {});

// Adam's memory traffic without its arithmetic (read p g m v, write p m v), tiled and
// threaded like cpu_adam_step: the bandwidth bound `zrepro bench adam` compares with.
void adam_access_probe(torch::Tensor& p, const torch::Tensor& g, torch::Tensor& m, torch::Tensor& v);

// The same update with LibTorch ops, for tensors on a CUDA device.
void torch_adam_step(torch::Tensor& p, const torch::Tensor& g, torch::Tensor& m, torch::Tensor& v,
                     const AdamHyper& h, int64_t step);

}  // namespace zrepro
