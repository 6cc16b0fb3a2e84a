// Dimensions and family of the toy decoder: from a preset (tiny, small, GPT-2 / GPT-3
// shapes, Llama-family models), from a Hugging Face config.json (dispatched on its
// model_type), then adjusted by explicit flags. Also the model's size table: every
// ZeRO parameter group with its parameters' shapes (layer_shapes), from which the
// parameter count, the largest module (DeepSpeed's estimator) and the engine's
// groups (trainer/model/gpt.cpp) all come: one table serves bytes and allocation.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainer/config/recorded_model.h"
#include "zero/schedule/param_spec.h"

namespace zrepro {

// gpt2: LayerNorm, fused qkv, GELU MLP, learned positions, biases everywhere.
// llama (llama, mistral, qwen2 configs): RMSNorm, separate q/k/v/o projections with
// grouped-query attention, rotary positions, SwiGLU MLP (gate, up, down), biases as
// the config says (qwen2: q/k/v only). The mixture-of-experts types (mixtral,
// qwen2_moe) are llama blocks whose MLP is a routed set of experts ([Note: MoE blocks]).
enum class Family { gpt2, llama };
const char* family_name(Family f);

// How attention keeps what backward needs. eager: the s x s probabilities are saved
// (HF's "eager"); sdpa: only q, k, v, the output and the log-sum-exp, the
// probabilities recomputed in backward (memory-efficient / flash attention).
enum class Attention { eager, sdpa };
const char* attention_name(Attention a);

// The gpt2 family's MLP activation (the llama family's is SiLU in SwiGLU). gelu: the exact
// (erf) GELU, one op (zrepro's toys, as conformance/ds_model.py mirrors them);
// gelu_new: Hugging Face's NewGELUActivation, the tanh approximation written as separate
// ops, each keeping its input for backward (GPT-2's "activation_function" default);
// gelu_tanh: torch's fused tanh approximation ("gelu_pytorch_tanh"), one op.
enum class Activation { gelu, gelu_new, gelu_tanh };
const char* activation_name(Activation a);


struct ModelSpec {
  std::string name;
  int64_t vocab = 128, seq = 32, hidden = 64, layers = 2, heads = 4, intermediate = 256;
  Family family = Family::gpt2;
  std::string model_type = "gpt2";  // as a config.json names it (llama, mistral, qwen2, ...)
  int64_t kv_heads = 0;             // grouped-query attention; 0: one per query head
  bool tied = false;                // tie_word_embeddings: the LM head is the token embedding
  bool qkv_bias = true, o_bias = true, mlp_bias = true;
  double norm_eps = 1e-5;
  double rope_theta = 10000;
  Attention attention = Attention::eager;
  // [Note: what Hugging Face's modules keep] The two places where Hugging Face's modules
  // save other tensors for backward than a plain implementation would, measured with
  // torch.autograd.graph.saved_tensors_hooks on transformers 5.25's own modules
  // (conformance/hf_activations.py): the gpt2 family's activation (above), and eager
  // attention's softmax: GPT2Attention takes it in the compute dtype and keeps only its
  // output (2 bytes per score in bf16); the Llama family's eager_attention_forward takes
  // it in fp32 and casts, keeping the fp32 output and the 16-bit copy (6 bytes per score).
  Activation activation = Activation::gelu;
  bool softmax_fp32 = true;
  int64_t attention_tile = 128;  // sdpa: query rows per tile ([Note: sdpa transient] in gpt.cpp)
  // gpt2 family: rows of the learned position table (Hugging Face's n_positions), a size
  // of the model that a shorter training sequence does not shrink; 0: seq (the toys,
  // whose table is as long as their sequence). A sequence past it is refused
  // (validate_model): Hugging Face would fail there with an index error.
  int64_t positions = 0;
  int64_t position_rows() const { return positions > 0 ? positions : seq; }
  // Where the attention and the sequence length came from (a config.json key, a flag,
  // transformers' default, the preset): every header and the summary say it, so an
  // assumption is never silent.
  std::string attention_from = "the preset", seq_from = "the preset";

  // [Note: MoE blocks] Hugging Face's MixtralSparseMoeBlock / Qwen2MoeSparseMoeBlock in
  // transformers 4.x's layout (one module per expert, each with its own ZeRO-3 hooks):
  // a router (mlp.gate, [experts, hidden], no bias) scores each token; softmax in fp32,
  // the top experts_per_tok, renormalised when norm_topk_prob (Mixtral always); each
  // expert is a SwiGLU MLP of moe_intermediate (w1, w3, w2 / gate_proj, up_proj,
  // down_proj, no bias) run on the tokens that picked it, and an expert no token picked
  // does not run. qwen2_moe adds a shared expert every token runs (shared_intermediate),
  // scaled by sigmoid(shared_expert_gate). With output_router_logits (router_aux_loss:
  // the config.json key, or --output-router-logits as LLaMA-Factory and axolotl set it for
  // MoE training) the loss adds router_aux_loss_coef x the Switch Transformer
  // load-balancing loss of every layer's router logits ([Note: the router's aux loss],
  // gpt.cpp). experts == 0: a dense MLP of `intermediate`.
  int64_t experts = 0, experts_per_tok = 0, moe_intermediate = 0, shared_intermediate = 0;
  bool norm_topk_prob = true;
  bool router_aux_loss = false;          // output_router_logits
  double router_aux_loss_coef = 0.001;   // MixtralConfig / Qwen2MoeConfig default
  // How a run's ZeRO-3 fetches the experts (not a property of the model: set by
  // with_expert_fetch from the DeepSpeed config, [Note: which experts a rank fetches]):
  // each expert its own group, gathered only when a token picks it (DeepSpeed's
  // per-module hooks), or inside its block's group (a z3 leaf module: the block fetched
  // as one unit). The planner keeps them in the block.
  bool expert_groups = false;
  bool moe() const { return experts > 0; }
  // [Note: a recorded architecture] (recorded_model.h): a model_type zrepro has no model of,
  // planned from a recording of transformers' own modules; never trained. Its groups are the
  // recording's, the dimensions above its config.json's.
  std::shared_ptr<const RecordedModel> recorded = nullptr;

  // Group indices (layer_shapes' order): embed 0, then each block b's group followed,
  // with expert_groups, by its experts' groups; the head last.
  int64_t groups_per_block() const { return 1 + (moe() && expert_groups ? experts : 0); }
  int block_group(int64_t b) const { return static_cast<int>(1 + b * groups_per_block()); }
  int expert_group(int64_t b, int64_t e) const { return block_group(b) + 1 + static_cast<int>(e); }
  int head_group() const { return block_group(layers); }

  int64_t head_dim() const { return hidden / heads; }
  int64_t kv_head_count() const { return kv_heads > 0 ? kv_heads : heads; }

  // Groups: embed (token embedding, + positions for gpt2), block.0..L-1 (each followed
  // by block.<l>.mlp.experts.<e> with expert_groups), head (final norm, + the LM head unless
  // tied). An expert's parameters come last in its block either way, so the parameters
  // are in one order (and gpt_init draws the same values) however the experts are grouped. Parameter order inside a group is the order the
  // model indexes them by.
  std::vector<LayerSpec> layer_shapes() const;
  int64_t param_count() const;
  int64_t block_params() const;  // one block with its experts
  // Parameters one token runs through (the router, experts_per_tok experts, the shared
  // expert): Hugging Face's "active" count. param_count() for a dense model.
  int64_t active_param_count() const;
  // DeepSpeed's model_to_params "largest layer": the most parameters one module owns
  // itself (an nn.Embedding or nn.Linear: the word embedding or the LM head for GPT
  // shapes), not a whole block.
  int64_t largest_module_params() const;
  nlohmann::json to_json() const;
  // "attention sdpa (transformers' default ...), seq 4096 (max_position_embeddings)"
  std::string assumptions() const;
};

struct ModelOverrides {
  std::optional<int64_t> vocab, seq, hidden, layers, heads, intermediate;
  std::optional<std::string> attention;  // --attn eager|sdpa
  std::optional<bool> output_router_logits;     // --output-router-logits
  std::optional<double> router_aux_loss_coef;   // --router-aux-loss-coef
  std::string seq_from = "--seq";        // what set seq (the Trainer's max_seq_length, ...)
};

std::vector<std::string> model_preset_names();
// The model_type values load_hf_config accepts.
std::vector<std::string> supported_model_types();
// arg: a preset name, or the path of a Hugging Face config.json. Throws ConfigError.
ModelSpec resolve_model(const std::string& arg, const ModelOverrides& overrides = {});
ModelSpec load_hf_config(const std::string& path);
// Checks dimensions against the family's constraints (heads divide hidden, kv heads
// divide heads, an even rotary head dimension). Throws ConfigError naming `where`.
// The largest vocabulary (token ids are int32 in the synthetic data's tables; real
// vocabularies are below a million).
constexpr int64_t kMaxVocab = 2147483647;
// validate_model's bounds on the other dimensions (a model file can set any of them).
constexpr int64_t kMaxLayers = 10000;
constexpr int64_t kMaxHidden = 1 << 20;
constexpr int64_t kMaxHeads = 4096;
constexpr int64_t kMaxIntermediate = 1 << 24;
constexpr int64_t kMaxSeq = 1 << 22;
void validate_model(const ModelSpec& m, const std::string& where);

}  // namespace zrepro
