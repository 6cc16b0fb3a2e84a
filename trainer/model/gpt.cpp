// See gpt.h.
#include "trainer/model/gpt.h"

#include <cmath>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/custom_function.h>

#include "device/device_memory.h"

namespace zrepro {

namespace {
// Parameter order inside a block group; block() indexes by these.
enum BlockParam { ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, fc2_w, fc2_b };
}  // namespace

torch::ScalarType compute_dtype(Precision p, const torch::Device& device) {
  if (p == Precision::bf16) return torch::kBFloat16;
  if (p == Precision::fp16) return device.is_cpu() ? torch::kFloat : torch::kHalf;
  return torch::kFloat;
}

std::vector<LayerSpec> gpt_layers(const ModelSpec& spec) {
  const int64_t V = spec.vocab, S = spec.seq, h = spec.hidden, I = spec.intermediate;
  std::vector<LayerSpec> layers;
  layers.push_back({"embed", {{"wte", {V, h}}, {"wpe", {S, h}}}});
  for (int64_t l = 0; l < spec.layers; ++l)
    layers.push_back({"block." + std::to_string(l),
                      {{"ln1.weight", {h}},
                       {"ln1.bias", {h}},
                       {"attn.qkv.weight", {3 * h, h}},
                       {"attn.qkv.bias", {3 * h}},
                       {"attn.proj.weight", {h, h}},
                       {"attn.proj.bias", {h}},
                       {"ln2.weight", {h}},
                       {"ln2.bias", {h}},
                       {"mlp.fc.weight", {I, h}},
                       {"mlp.fc.bias", {I}},
                       {"mlp.proj.weight", {h, I}},
                       {"mlp.proj.bias", {h}}}});
  layers.push_back({"head", {{"ln_f.weight", {h}}, {"ln_f.bias", {h}}, {"lm_head.weight", {V, h}}}});
  return layers;
}

std::vector<torch::Tensor> gpt_init(const ModelSpec& spec, uint64_t seed) {
  // GPT-2 init: N(0, 0.02) weights, residual projections scaled by 1/sqrt(2L),
  // zero biases, unit LayerNorm gains. Generated in a fixed order from one seed.
  torch::NoGradGuard no_grad;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const double resid_std = 0.02 / std::sqrt(2.0 * spec.layers);
  std::vector<torch::Tensor> out;
  for (const auto& layer : gpt_layers(spec)) {
    std::vector<torch::Tensor> parts;
    for (const auto& p : layer.params) {
      const std::string& n = p.name;
      torch::Tensor v;
      if (n.rfind("ln", 0) == 0)
        v = n.find("weight") != std::string::npos ? torch::ones(p.shape) : torch::zeros(p.shape);
      else if (n.find("bias") != std::string::npos)
        v = torch::zeros(p.shape);
      else
        v = at::normal(0.0, n.find("proj.weight") != std::string::npos ? resid_std : 0.02, p.shape, gen);
      parts.push_back(v.reshape({-1}));
    }
    out.push_back(torch::cat(parts));
  }
  return out;
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// A block that saves only its input and recomputes itself in backward; the
// recomputation asks the engine for the parameters again, so under ZeRO-3 the
// layer is gathered for it and its gradients are reduced from it.
struct CheckpointedBlock : public torch::autograd::Function<CheckpointedBlock> {
  static variable_list forward(AutogradContext* ctx, torch::Tensor x, int64_t layer, int64_t gpt, int64_t engine) {
    auto* model = reinterpret_cast<Gpt*>(static_cast<intptr_t>(gpt));
    auto* eng = reinterpret_cast<ZeroEngine*>(static_cast<intptr_t>(engine));
    ctx->saved_data["layer"] = layer;
    ctx->saved_data["gpt"] = gpt;
    ctx->saved_data["engine"] = engine;
    if (model->cpu_checkpointing()) {
      DeviceMemory::HostScope host;  // the checkpoint lives in host memory
      ctx->saved_data["x"] = x.clone();
    } else {
      ctx->save_for_backward({x});
    }
    return {model->run_block(static_cast<int>(layer), x, *eng)};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto* model = reinterpret_cast<Gpt*>(static_cast<intptr_t>(ctx->saved_data["gpt"].toInt()));
    auto* eng = reinterpret_cast<ZeroEngine*>(static_cast<intptr_t>(ctx->saved_data["engine"].toInt()));
    torch::Tensor x = model->cpu_checkpointing() ? ctx->saved_data["x"].toTensor() : ctx->get_saved_variables()[0];
    torch::AutoGradMode enable(true);
    torch::Tensor xd = x.detach().requires_grad_(true);
    torch::Tensor y = model->run_block(static_cast<int>(ctx->saved_data["layer"].toInt()), xd, *eng);
    torch::autograd::backward({y}, {grads[0]});
    return {xd.grad(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor Gpt::run_block(int layer, const torch::Tensor& x, ZeroEngine& engine) {
  return block(engine.acquire(layer), x);
}

Gpt::Gpt(const ModelSpec& spec, torch::ScalarType compute, torch::Device device, Checkpointing ckpt)
    : spec_(spec), compute_(compute), ckpt_(ckpt) {
  const int64_t S = spec.seq;
  causal_mask_ = torch::ones({S, S}, torch::TensorOptions().dtype(torch::kBool).device(device)).triu(1);
}

torch::Tensor Gpt::embed(const Params& g, const torch::Tensor& inputs) {
  const int64_t S = inputs.size(1);
  return torch::embedding(w(g, 0), inputs) + w(g, 1).narrow(0, 0, S).unsqueeze(0);
}

torch::Tensor Gpt::block(const Params& g, const torch::Tensor& x) {
  const int64_t B = x.size(0), S = x.size(1), h = spec_.hidden, a = spec_.heads, hd = h / a;
  torch::Tensor y = torch::layer_norm(x, {h}, w(g, ln1_w), w(g, ln1_b), 1e-5);
  torch::Tensor qkv = torch::linear(y, w(g, qkv_w), w(g, qkv_b));
  auto parts = qkv.chunk(3, -1);
  auto heads = [&](const torch::Tensor& t) { return t.view({B, S, a, hd}).transpose(1, 2); };
  torch::Tensor q = heads(parts[0]), k = heads(parts[1]), v = heads(parts[2]);
  torch::Tensor att = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(hd)));
  att = att.masked_fill(causal_mask_.narrow(0, 0, S).narrow(1, 0, S), -INFINITY);
  att = torch::softmax(att, -1, torch::kFloat).to(x.scalar_type());
  y = torch::matmul(att, v).transpose(1, 2).reshape({B, S, h});
  torch::Tensor r = x + torch::linear(y, w(g, proj_w), w(g, proj_b));
  y = torch::layer_norm(r, {h}, w(g, ln2_w), w(g, ln2_b), 1e-5);
  y = torch::linear(torch::gelu(torch::linear(y, w(g, fc_w), w(g, fc_b))), w(g, fc2_w), w(g, fc2_b));
  return r + y;
}

torch::Tensor Gpt::head_loss(const Params& g, const torch::Tensor& x, const torch::Tensor& targets) {
  torch::Tensor y = torch::layer_norm(x, {spec_.hidden}, w(g, 0), w(g, 1), 1e-5);
  torch::Tensor logits = torch::linear(y, w(g, 2));
  return torch::cross_entropy_loss(logits.reshape({-1, spec_.vocab}).to(torch::kFloat), targets.reshape({-1}));
}

torch::Tensor Gpt::loss(const torch::Tensor& inputs, const torch::Tensor& targets, ZeroEngine& engine) {
  const int last = static_cast<int>(spec_.layers) + 1;
  torch::Tensor x = engine.after_forward(0, embed(engine.acquire(0), inputs));
  for (int l = 1; l < last; ++l) {
    torch::Tensor y = ckpt_.enabled ? CheckpointedBlock::apply(x, static_cast<int64_t>(l),
                                                               static_cast<int64_t>(reinterpret_cast<intptr_t>(this)),
                                                               static_cast<int64_t>(reinterpret_cast<intptr_t>(&engine)))[0]
                                    : run_block(l, x, engine);
    x = engine.after_forward(l, y);
  }
  return engine.after_forward(last, head_loss(engine.acquire(last), x, targets));
}

}  // namespace zrepro
