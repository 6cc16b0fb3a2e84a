// Where zrepro's parameters and optimizer states sit in DeepSpeed's checkpoint files:
// the module names DeepSpeed's model gives them, and DeepSpeed's flat partitions of the
// whole model at each ZeRO stage, against zrepro's per-layer owned pieces.
//
// [Note: two flat layouts] DeepSpeed's optimizer files hold each rank's partition of ONE
// flat of all trainable parameters, in the order the optimizer was given them (zrepro's
// order: layer_shapes, back to back). Stages 1-2: the flat is zero-padded to a multiple
// of 2 x world and cut into world equal parts (the padding falls in the last ranks'). Stage
// 3: each parameter is padded to a multiple of world and rank r keeps slice r of each,
// back to back. zrepro partitions per layer (zero/schedule/layer_layout.h): at stage 3 a
// rank's DeepSpeed partition is its layers' shards back to back, at stages 1-2 it is a
// range of the whole model no layer partition equals, so a save gathers each layer's
// pieces and cuts DeepSpeed's range from them, and a resume reads every rank's file.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "trainer/checkpoint/file_layout.h"
#include "trainer/config/model_spec.h"
#include "zero/schedule/layer_layout.h"

namespace zrepro {

// One trainable parameter as DeepSpeed's model names it, in flat order.
struct CheckpointParam {
  std::string name;            // model.layers.0.self_attn.q_proj.weight (llama family), blocks.0.qkv.weight (gpt2)
  std::vector<int64_t> shape;
  int64_t numel = 0;
  int group = 0;               // zrepro's layer group
};
// The names are Hugging Face's for the llama family (LlamaForCausalLM, MixtralForCausalLM
// and Qwen2MoeForCausalLM in transformers 4.x's one-module-per-expert layout) and the
// conformance toy's for the gpt2 family (conformance/ds_model.py ToyGpt: Hugging Face's
// GPT-2 stores Conv1D weights transposed, which no renaming makes the same tensor).
std::vector<CheckpointParam> checkpoint_params(const ModelSpec& m);
// A tied head's weight, as DeepSpeed's shared_params names it ("" when untied).
std::string tied_head_name(const ModelSpec& m);

// DeepSpeed's partition `rank` of the whole model's flat values `natural` (the parameters
// back to back in checkpoint_params order) in the layout's form; keep_padding: with the
// zeros that fall in it (the optimizer moments), else without (stage 1-2's fp32 partition).
torch::Tensor ds_partition(const torch::Tensor& natural, const std::vector<int64_t>& numels,
                           const CheckpointLayout& layout, int rank, bool keep_padding);
// The whole model's flat values from every rank's partition (padded or not), in rank order.
torch::Tensor natural_from_ds_partitions(const std::vector<torch::Tensor>& parts, const std::vector<int64_t>& numels,
                                         const CheckpointLayout& layout);

// zrepro's owned piece of a layer (ParamGroup::owned_params' layout, zeros where padding)
// from the layer's full values, and the layer's full values from every rank's owned piece
// ([world, owned numel], in rank order).
torch::Tensor owned_from_natural(const LayerLayout& l, int rank, const torch::Tensor& natural);
torch::Tensor natural_from_owned(const LayerLayout& l, const torch::Tensor& gathered);

}  // namespace zrepro
