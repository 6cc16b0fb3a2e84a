// The toy GPT decoder: token + position embedding, pre-LN blocks (causal
// self-attention, 4h GELU MLP), final LayerNorm and an untied LM head. Written
// functionally: its parameters live in the ZeRO engine as one group per layer
// (embed, block.0..L-1, head), and each layer asks the engine for them, so the
// engine can gather, release and reduce layer by layer.
#pragma once
#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "trainer/config/model_spec.h"
#include "zero/engine.h"

namespace zrepro {

// Parameter layout per layer (the groups ZeRO shards).
std::vector<LayerSpec> gpt_layers(const ModelSpec& spec);
// GPT-2 initial values, fp32 on the CPU, one flat tensor per layer; the same on
// every rank and world size for a given seed.
std::vector<torch::Tensor> gpt_init(const ModelSpec& spec, uint64_t seed);

// Dtype the matmuls run in: the storage dtype, except fp16 on the CPU (LibTorch
// 1.13 has no CPU fp16 matmul), which keeps fp16 storage and computes in fp32.
torch::ScalarType compute_dtype(Precision p, const torch::Device& device);

// Activation checkpointing (HF's gradient_checkpointing; DeepSpeed's
// activation_checkpointing section shapes it): each block keeps only its input and
// is recomputed in backward. cpu_checkpointing keeps that input in host memory.
struct Checkpointing {
  bool enabled = false;
  bool cpu = false;
};

class Gpt {
 public:
  Gpt(const ModelSpec& spec, torch::ScalarType compute, torch::Device device, Checkpointing ckpt = {});

  // Mean next-token cross-entropy (fp32 scalar) for inputs/targets [B, S] (int64).
  torch::Tensor loss(const torch::Tensor& inputs, const torch::Tensor& targets, ZeroEngine& engine);

  // One transformer block on the engine's parameters of `layer` (used by the
  // checkpointed path to recompute).
  torch::Tensor run_block(int layer, const torch::Tensor& x, ZeroEngine& engine);
  bool cpu_checkpointing() const { return ckpt_.cpu; }

 private:
  using Params = std::vector<torch::Tensor>;
  torch::Tensor w(const Params& p, size_t i) const { return p[i].to(compute_); }
  torch::Tensor embed(const Params& p, const torch::Tensor& inputs);
  torch::Tensor block(const Params& p, const torch::Tensor& x);
  torch::Tensor head_loss(const Params& p, const torch::Tensor& x, const torch::Tensor& targets);

  ModelSpec spec_;
  torch::ScalarType compute_;
  torch::Tensor causal_mask_;  // [S, S] true above the diagonal
  Checkpointing ckpt_;
};

}  // namespace zrepro
