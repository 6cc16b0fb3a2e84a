// The toy GPT decoder: token + position embedding, pre-LN blocks (causal
// self-attention, 4h GELU MLP), final LayerNorm and an untied LM head. Written
// functionally over ParamGroups (one per layer: embed, block.0..L-1, head) so the
// ZeRO engine owns parameter storage and can gather/release it layer by layer.
#pragma once
#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "trainer/model_spec.h"
#include "zero/param_group.h"
#include "zero/zero_config.h"

namespace zrepro {

class Gpt {
 public:
  // Parameters initialised GPT-2 style from seed on the CPU in fp32 (identical on
  // every rank and world size), then stored in the precision's dtype on device.
  Gpt(const ModelSpec& spec, Precision precision, torch::Device device, uint64_t seed);

  const ModelSpec& spec() const { return spec_; }
  std::vector<ParamGroup>& groups() { return groups_; }
  // Dtype the matmuls run in: the storage dtype, except fp16 on the CPU (LibTorch
  // 1.13 has no CPU fp16 matmul), which keeps fp16 storage and computes in fp32.
  torch::ScalarType compute_dtype() const { return compute_; }

  // Mean next-token cross-entropy (fp32 scalar) for inputs/targets [B, S] (int64).
  torch::Tensor loss(const torch::Tensor& inputs, const torch::Tensor& targets);

 private:
  torch::Tensor w(const ParamGroup& g, size_t i) const { return g.param(i).to(compute_); }
  torch::Tensor embed(const torch::Tensor& inputs);
  torch::Tensor block(const ParamGroup& g, const torch::Tensor& x);
  torch::Tensor head_loss(const torch::Tensor& x, const torch::Tensor& targets);

  ModelSpec spec_;
  torch::ScalarType compute_;
  std::vector<ParamGroup> groups_;
  torch::Tensor causal_mask_;  // [S, S] true above the diagonal
};

torch::ScalarType storage_dtype(Precision p);

}  // namespace zrepro
