// The toy decoder, in two families (ModelSpec::family): gpt2 (token + position
// embedding, pre-LN blocks with fused-qkv causal attention and a GELU MLP, final
// LayerNorm) and llama (token embedding, pre-RMSNorm blocks with rotary q/k,
// grouped-query attention and a SwiGLU MLP, final RMSNorm); the LM head is its own
// matrix or, tied, the token embedding. Written functionally: its parameters live
// in the ZeRO engine as one group per layer (embed, block.0..L-1, head, from
// ModelSpec::layer_shapes), and each layer asks the engine for them, so the engine
// can gather, release and reduce layer by layer. A tied head asks for the embed
// group a second time (see [Note: a group used twice] in zero/engine.cpp).
#pragma once
#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "trainer/config/model_spec.h"
#include "zero/engine.h"

namespace zrepro {

// Hugging Face initial values (GPT-2: residual projections scaled by 1/sqrt(2L)),, fp32 on the CPU, one flat tensor per layer; the same on
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

// [Note: the router's aux loss] (gpt.cpp): Hugging Face's load_balancing_loss_func of the
// layers' router logits ([rows, experts] each), top-k routing; row_mask [rows] (1 for a
// real token, 0 for padding) or undefined for every row. An fp32 scalar: k when routing
// is uniform, up to `experts` when every row picks the same experts.
torch::Tensor router_aux_loss(const std::vector<torch::Tensor>& router_logits, int64_t experts_per_tok,
                              const torch::Tensor& row_mask = {});

// The rows of inputs [B, S] that are real tokens, as the attention mask has them, from the
// targets (kPadLabel after each sample's last real target): a [B*S] float mask, or
// undefined when nothing is padding.
torch::Tensor real_input_rows(const torch::Tensor& targets);

class Gpt {
 public:
  Gpt(const ModelSpec& spec, torch::ScalarType compute, torch::Device device, Checkpointing ckpt = {});

  // Next-token cross-entropy (fp32 scalar) for inputs/targets [B, S] (int64): the mean
  // over the scored targets, or their sum; targets equal to kPadLabel (data.h) are not scored.
  // A MoE model with router_aux_loss adds router_aux_loss_coef x aux_weight x the routers'
  // load-balancing loss ([Note: the router's aux loss]); aux_weight undoes the divisor the
  // caller applies to a summed loss, so the aux term weighs as in the model's forward.
  torch::Tensor loss(const torch::Tensor& inputs, const torch::Tensor& targets, ZeroEngine& engine, bool sum = false,
                     double aux_weight = 1.0);

  // Greedy next token (argmax of the last position's logits, [B]) for inputs [B, S<=seq],
  // without gradients: a generation step (the engine in begin_eval_forward).
  torch::Tensor next_token(const torch::Tensor& inputs, ZeroEngine& engine);

  // Transformer block b (0-based) on the engine's parameters of its group (used by the
  // checkpointed path to recompute).
  // router_logits: where a MoE block puts its router's logits [B*S, experts] (nullptr: nowhere).
  torch::Tensor run_block(int64_t b, const torch::Tensor& x, ZeroEngine& engine,
                          torch::Tensor* router_logits = nullptr);
  bool cpu_checkpointing() const { return ckpt_.cpu; }
  // Whether the loss needs every MoE block's router logits (the router's aux loss).
  bool keeps_router_logits() const { return spec_.moe() && spec_.router_aux_loss; }

 private:
  using Params = std::vector<torch::Tensor>;
  torch::Tensor w(const Params& p, size_t i) const { return p[i].to(compute_); }
  torch::Tensor embed(const Params& p, const torch::Tensor& inputs);
  torch::Tensor gpt2_block(int64_t b, const Params& p, const torch::Tensor& x);
  // r, marked "mlp_backward" when its gradient arrives ([Note: a block's backward in two parts]).
  torch::Tensor mark_mlp_backward(torch::Tensor r, int64_t b) const;
  torch::Tensor llama_block(int64_t b, const Params& p, const torch::Tensor& x, ZeroEngine& engine,
                            torch::Tensor* router_logits);
  // [Note: MoE blocks] (model_spec.h): block b's routed experts on y [B, S, h]; p[i] is
  // the router, then the shared expert's parameters, then (in the block's group) the experts'.
  torch::Tensor moe_mlp(int64_t b, const Params& p, size_t i, const torch::Tensor& y, ZeroEngine& engine,
                        torch::Tensor* router_logits);

  torch::Tensor swiglu(const torch::Tensor& x, const torch::Tensor& gate, const torch::Tensor& up,
                       const torch::Tensor& down) const;
  // Attention of q [B,a,S,d] over k, v [B,a,S,d] (causal), as [B,S,a*d].
  torch::Tensor attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);
  torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight) const;
  torch::Tensor activation(const torch::Tensor& x) const;  // the gpt2 family's MLP activation
  torch::Tensor rotate(const torch::Tensor& x, int64_t S) const;  // rotary embedding of [B,a,S,d]
  // The embedding and every block (checkpointed when enabled and gradients are on);
  // router_logits, when given, receives each MoE block's router logits.
  torch::Tensor trunk(const torch::Tensor& inputs, ZeroEngine& engine,
                      std::vector<torch::Tensor>* router_logits = nullptr);
  // The final norm and the LM head: logits of x.
  torch::Tensor head_logits(const Params& p, const torch::Tensor& lm_head, const torch::Tensor& x);
  // lm_head: the head group's own matrix, or the embedding when tied.
  torch::Tensor head_loss(const Params& p, const torch::Tensor& lm_head, const torch::Tensor& x,
                          const torch::Tensor& targets, bool sum);

  ModelSpec spec_;
  torch::ScalarType compute_;
  torch::Tensor causal_mask_;  // [S, S] true above the diagonal
  torch::Tensor cos_, sin_;    // llama: rotary tables [S, d] in the compute dtype
  Checkpointing ckpt_;
};

}  // namespace zrepro
