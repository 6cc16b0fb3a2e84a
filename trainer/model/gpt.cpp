// See gpt.h.
#include "trainer/model/gpt.h"

#include <cmath>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/custom_function.h>

#include "device/device_memory.h"
#include "trainer/model/data.h"

namespace zrepro {

namespace {
// Parameter order inside a block group (ModelSpec::layer_shapes); the blocks index by these.
enum Gpt2Param { ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, fc2_w, fc2_b };
}  // namespace

torch::ScalarType compute_dtype(Precision p, const torch::Device& device) {
  if (p == Precision::bf16) return torch::kBFloat16;
  if (p == Precision::fp16) return device.is_cpu() ? torch::kFloat : torch::kHalf;
  return torch::kFloat;
}

std::vector<torch::Tensor> gpt_init(const ModelSpec& spec, uint64_t seed) {
  // Hugging Face's _init_weights: N(0, 0.02) weights and embeddings, zero biases,
  // unit norm gains; GPT-2 scales its residual projections by 1/sqrt(2L). Generated
  // in a fixed order from one seed.
  torch::NoGradGuard no_grad;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const double resid_std = 0.02 / std::sqrt(2.0 * spec.layers);
  const bool gpt2 = spec.family == Family::gpt2;
  auto has = [](const std::string& n, const char* part) { return n.find(part) != std::string::npos; };
  std::vector<torch::Tensor> out;
  for (const auto& layer : spec.layer_shapes()) {
    std::vector<torch::Tensor> parts;
    for (const auto& p : layer.params) {
      const std::string& n = p.name;
      const bool norm = gpt2 ? n.rfind("ln", 0) == 0 : has(n, "norm");
      torch::Tensor v;
      if (norm)
        v = has(n, "weight") ? torch::ones(p.shape) : torch::zeros(p.shape);
      else if (has(n, "bias"))
        v = torch::zeros(p.shape);
      else
        v = at::normal(0.0, gpt2 && has(n, "proj.weight") ? resid_std : 0.02, p.shape, gen);
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
  // layer: the block's index; group: its engine group (the tapes' marks name groups).
  static variable_list forward(AutogradContext* ctx, torch::Tensor x, int64_t layer, int64_t group, int64_t gpt,
                               int64_t engine) {
    auto* model = reinterpret_cast<Gpt*>(static_cast<intptr_t>(gpt));
    auto* eng = reinterpret_cast<ZeroEngine*>(static_cast<intptr_t>(engine));
    ctx->saved_data["layer"] = layer;
    ctx->saved_data["group"] = group;
    ctx->saved_data["gpt"] = gpt;
    ctx->saved_data["engine"] = engine;
    if (model->cpu_checkpointing()) {
      DeviceMemory::HostScope host;  // the checkpoint lives in host memory
      ctx->saved_data["x"] = x.clone();
    } else {
      ctx->save_for_backward({x});
    }
    // [Note: the router's aux loss]: a MoE block's router logits are a second output,
    // so the aux loss's gradient reaches the router through the recomputation.
    if (!model->keeps_router_logits()) return {model->run_block(layer, x, *eng)};
    torch::Tensor logits;
    torch::Tensor y = model->run_block(layer, x, *eng, &logits);
    return {y, logits};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto* model = reinterpret_cast<Gpt*>(static_cast<intptr_t>(ctx->saved_data["gpt"].toInt()));
    auto* eng = reinterpret_cast<ZeroEngine*>(static_cast<intptr_t>(ctx->saved_data["engine"].toInt()));
    torch::Tensor x = model->cpu_checkpointing() ? ctx->saved_data["x"].toTensor() : ctx->get_saved_variables()[0];
    torch::AutoGradMode enable(true);
    torch::Tensor xd = x.detach().requires_grad_(true);
    const int64_t b = ctx->saved_data["layer"].toInt();
    torch::Tensor logits;
    torch::Tensor y = model->run_block(b, xd, *eng, model->keeps_router_logits() ? &logits : nullptr);
    DeviceMemory::instance().mark("recomputed", ctx->saved_data["group"].toInt());
    if (logits.defined() && grads.size() > 1 && grads[1].defined())
      torch::autograd::backward({y, logits}, {grads[0], grads[1]});
    else
      torch::autograd::backward({y}, {grads[0]});
    return {xd.grad(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// Memory-efficient causal attention (what sdpa / flash attention keep): forward saves
// q, k, v, the output and the log-sum-exp of each score row; backward recomputes the
// probabilities from them. On LibTorch 2.x with CUDA the fused kernel runs instead.
// [Note: sdpa transient] Scores are formed one tile of query rows at a time
// (ModelSpec::attention_tile rows, 128 by default: flash attention's tiles are 64-128
// rows), in forward and in backward, so besides what it saves the attention needs
// B x heads x tile x S scores at a time, not S x S. Every temporary of a tile dies
// within its iteration (outputs go into preallocated tensors), so one tile's
// allocations are the pattern of all of them: the planner's tapes hold one per tile of
// the recording surrogate, and the peak does not depend on the tile count.
struct MemEfficientAttention : public torch::autograd::Function<MemEfficientAttention> {
  static torch::Tensor scores(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& mask) {
    const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
    return (torch::matmul(q, k.transpose(-2, -1)) * scale).masked_fill(mask, -INFINITY);
  }
  static variable_list forward(AutogradContext* ctx, torch::Tensor q, torch::Tensor k, torch::Tensor v,
                               torch::Tensor mask, int64_t tile) {
    const int64_t S = q.size(2);
    torch::Tensor out = torch::empty_like(q, at::MemoryFormat::Contiguous);
    torch::Tensor lse = torch::empty({q.size(0), q.size(1), S, 1}, q.options().dtype(torch::kFloat));
    for (int64_t i = 0; i < S; i += tile) {
      const int64_t rows = std::min(tile, S - i);
      torch::Tensor s = scores(q.narrow(2, i, rows), k, mask.narrow(0, i, rows)).to(torch::kFloat);
      torch::Tensor l = torch::logsumexp(s, -1, true);
      lse.narrow(2, i, rows).copy_(l);
      out.narrow(2, i, rows).copy_(torch::matmul(torch::exp(s - l).to(q.scalar_type()), v));
    }
    ctx->save_for_backward({q, k, v, out, lse, mask});
    ctx->saved_data["tile"] = tile;
    return {out};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    const torch::Tensor &mask = saved[5], dout = grads[0];
    const int64_t S = q.size(2), tile = ctx->saved_data["tile"].toInt();
    const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
    torch::Tensor delta = (dout.to(torch::kFloat) * out.to(torch::kFloat)).sum(-1, true);
    torch::Tensor dq = torch::empty_like(q, at::MemoryFormat::Contiguous);
    torch::Tensor dk = torch::zeros_like(k, at::MemoryFormat::Contiguous);
    torch::Tensor dv = torch::zeros_like(v, at::MemoryFormat::Contiguous);
    for (int64_t i = 0; i < S; i += tile) {
      const int64_t rows = std::min(tile, S - i);
      const torch::Tensor qi = q.narrow(2, i, rows), doi = dout.narrow(2, i, rows);
      torch::Tensor p = torch::exp(scores(qi, k, mask.narrow(0, i, rows)).to(torch::kFloat) - lse.narrow(2, i, rows));
      dv.add_(torch::matmul(p.to(q.scalar_type()).transpose(-2, -1), doi));
      torch::Tensor dp = torch::matmul(doi, v.transpose(-2, -1)).to(torch::kFloat);
      torch::Tensor ds = (p * (dp - delta.narrow(2, i, rows)) * scale).to(q.scalar_type());
      p = dp = torch::Tensor();
      dq.narrow(2, i, rows).copy_(torch::matmul(ds, k));
      dk.add_(torch::matmul(ds.transpose(-2, -1), qi));
    }
    return {dq, dk, dv, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor Gpt::run_block(int64_t b, const torch::Tensor& x, ZeroEngine& engine, torch::Tensor* router_logits) {
  const Params p = engine.acquire(spec_.block_group(b));
  return spec_.family == Family::llama ? llama_block(b, p, x, engine, router_logits) : gpt2_block(b, p, x);
}

Gpt::Gpt(const ModelSpec& spec, torch::ScalarType compute, torch::Device device, Checkpointing ckpt)
    : spec_(spec), compute_(compute), ckpt_(ckpt) {
  const int64_t S = spec.seq;
  causal_mask_ = torch::ones({S, S}, torch::TensorOptions().dtype(torch::kBool).device(device)).triu(1);
  if (spec.family == Family::llama) {
    // Hugging Face's default rotary tables: inv_freq = theta^(-2i/d), cos/sin of
    // position x inv_freq, each half repeated; computed in fp32 on the host, then
    // one device copy each in the compute dtype (as HF casts them to q's dtype).
    const int64_t d = spec.head_dim();
    torch::Tensor cos, sin;
    {
      DeviceMemory::HostScope host;
      torch::Tensor inv = 1.0 / torch::pow(spec.rope_theta, torch::arange(0, d, 2, torch::kFloat) / d);
      torch::Tensor freqs = torch::outer(torch::arange(S, torch::kFloat), inv);
      torch::Tensor emb = torch::cat({freqs, freqs}, -1);
      cos = emb.cos();
      sin = emb.sin();
    }
    auto opts = torch::TensorOptions().dtype(compute).device(device);
    cos_ = torch::empty({S, d}, opts).copy_(cos);
    sin_ = torch::empty({S, d}, opts).copy_(sin);
  }
}

torch::Tensor Gpt::embed(const Params& g, const torch::Tensor& inputs) {
  if (spec_.family == Family::llama) return torch::embedding(w(g, 0), inputs);
  const int64_t S = inputs.size(1);
  return torch::embedding(w(g, 0), inputs) + w(g, 1).narrow(0, 0, S).unsqueeze(0);
}

torch::Tensor Gpt::attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  const int64_t B = q.size(0), a = q.size(1), S = q.size(2), d = q.size(3);
  torch::Tensor mask = causal_mask_.narrow(0, 0, S).narrow(1, 0, S);
  torch::Tensor y;
  if (spec_.attention == Attention::sdpa) {
#if TORCH_VERSION_MAJOR >= 2
    if (q.is_cuda()) y = at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
#endif
    if (!y.defined()) y = MemEfficientAttention::apply(q, k, v, mask, spec_.attention_tile)[0];
  } else {
    torch::Tensor att = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(d)));
    att = att.masked_fill(mask, -INFINITY);
    // [Note: what Hugging Face's modules keep] (model_spec.h): the family's softmax dtype.
    att = spec_.softmax_fp32 ? torch::softmax(att, -1, torch::kFloat).to(q.scalar_type()) : torch::softmax(att, -1);
    y = torch::matmul(att, v);
  }
  return y.transpose(1, 2).reshape({B, S, a * d});
}

// [Note: a block's backward in two parts] The residual stream between a block's
// attention and its MLP (r) gets its gradient once the MLP's backward is done, before
// the attention's begins: a mark there splits the block's backward for the planner's
// tapes (tape_recorder.h), so what the MLP part saves until then (a MoE block's routing)
// can be freed at that point of the replay.
torch::Tensor Gpt::mark_mlp_backward(torch::Tensor r, int64_t b) const {
  const int64_t group = spec_.block_group(b);
  if (r.requires_grad())
    r.register_hook([group](torch::Tensor g) {
      DeviceMemory::instance().mark("mlp_backward", group);
      return g;
    });
  return r;
}

torch::Tensor Gpt::gpt2_block(int64_t b, const Params& g, const torch::Tensor& x) {
  const int64_t B = x.size(0), S = x.size(1), h = spec_.hidden, a = spec_.heads, hd = h / a;
  torch::Tensor y = torch::layer_norm(x, {h}, w(g, ln1_w), w(g, ln1_b), spec_.norm_eps);
  torch::Tensor qkv = torch::linear(y, w(g, qkv_w), w(g, qkv_b));
  auto parts = qkv.chunk(3, -1);
  auto heads = [&](const torch::Tensor& t) { return t.view({B, S, a, hd}).transpose(1, 2); };
  y = attend(heads(parts[0]), heads(parts[1]), heads(parts[2]));
  torch::Tensor r = mark_mlp_backward(x + torch::linear(y, w(g, proj_w), w(g, proj_b)), b);
  y = torch::layer_norm(r, {h}, w(g, ln2_w), w(g, ln2_b), spec_.norm_eps);
  y = torch::linear(activation(torch::linear(y, w(g, fc_w), w(g, fc_b))), w(g, fc2_w), w(g, fc2_b));
  return r + y;
}

torch::Tensor Gpt::activation(const torch::Tensor& x) const {
  switch (spec_.activation) {
    case Activation::gelu: return torch::gelu(x);
    case Activation::gelu_tanh: return torch::gelu(x, "tanh");
    case Activation::gelu_new:  // Hugging Face's NewGELUActivation, op for op (each keeps its input)
      return 0.5 * x * (1.0 + torch::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * torch::pow(x, 3.0))));
  }
  throw std::logic_error("Gpt::activation: unknown activation");
}

torch::Tensor Gpt::rms_norm(const torch::Tensor& x, const torch::Tensor& weight) const {
  // LlamaRMSNorm: in fp32, then back to the input dtype before the gain.
  torch::Tensor xf = x.to(torch::kFloat);
  xf = xf * torch::rsqrt(xf.pow(2).mean(-1, true) + spec_.norm_eps);
  return weight * xf.to(x.scalar_type());
}

torch::Tensor Gpt::rotate(const torch::Tensor& x, int64_t S) const {
  const int64_t half = x.size(-1) / 2;
  torch::Tensor rotated = torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * cos_.narrow(0, 0, S) + rotated * sin_.narrow(0, 0, S);
}

torch::Tensor Gpt::llama_block(int64_t b, const Params& g, const torch::Tensor& x, ZeroEngine& engine,
                               torch::Tensor* router_logits) {
  const int64_t B = x.size(0), S = x.size(1), a = spec_.heads, kvh = spec_.kv_head_count(), d = spec_.head_dim();
  // Parameter indices follow ModelSpec::layer_shapes: a bias follows its weight when present.
  size_t i = 0;
  auto next = [&] { return w(g, i++); };
  auto linear = [&](const torch::Tensor& in, bool bias) {
    torch::Tensor weight = next();
    return bias ? torch::linear(in, weight, next()) : torch::linear(in, weight);
  };
  torch::Tensor y = rms_norm(x, next());
  auto heads = [&](const torch::Tensor& t, int64_t n) { return t.view({B, S, n, d}).transpose(1, 2); };
  torch::Tensor q = rotate(heads(linear(y, spec_.qkv_bias), a), S);
  torch::Tensor k = rotate(heads(linear(y, spec_.qkv_bias), kvh), S);
  torch::Tensor v = heads(linear(y, spec_.qkv_bias), kvh);
  if (kvh != a) {  // repeat_kv: each key/value head serves a / kvh query heads
    auto repeat = [&](const torch::Tensor& t) {
      return t.unsqueeze(2).expand({B, kvh, a / kvh, S, d}).reshape({B, a, S, d});
    };
    k = repeat(k);
    v = repeat(v);
  }
  torch::Tensor r = mark_mlp_backward(x + linear(attend(q, k, v), spec_.o_bias), b);
  y = rms_norm(r, next());
  if (spec_.moe()) return r + moe_mlp(b, g, i, y, engine, router_logits);
  torch::Tensor gate = linear(y, spec_.mlp_bias);
  torch::Tensor up = linear(y, spec_.mlp_bias);
  return r + linear(torch::silu(gate) * up, spec_.mlp_bias);
}

torch::Tensor Gpt::swiglu(const torch::Tensor& x, const torch::Tensor& gate, const torch::Tensor& up,
                          const torch::Tensor& down) const {
  return torch::linear(torch::silu(torch::linear(x, gate)) * torch::linear(x, up), down);
}

torch::Tensor Gpt::moe_mlp(int64_t b, const Params& g, size_t i, const torch::Tensor& y, ZeroEngine& engine,
                           torch::Tensor* router_logits) {
  const int64_t B = y.size(0), S = y.size(1), h = spec_.hidden, E = spec_.experts;
  const torch::Tensor x = y.reshape({B * S, h});
  // The router: softmax in fp32, the top experts_per_tok, renormalised (Mixtral; Qwen2-MoE
  // when norm_topk_prob), back to the hidden dtype (MixtralSparseMoeBlock.forward).
  const torch::Tensor logits = torch::linear(x, w(g, i++));
  if (router_logits) *router_logits = logits;
  torch::Tensor probs = torch::softmax(logits, -1, torch::kFloat);
  auto [top_w, top_i] = probs.topk(spec_.experts_per_tok, -1);
  if (spec_.norm_topk_prob) top_w = top_w / top_w.sum(-1, true);
  top_w = top_w.to(x.scalar_type());
  torch::Tensor out = torch::zeros_like(x);
  if (spec_.shared_intermediate > 0) {
    const size_t s = i;
    i += 4;
    out = swiglu(x, w(g, s), w(g, s + 1), w(g, s + 2)) * torch::sigmoid(torch::linear(x, w(g, s + 3)));
  }
  // Which tokens picked which expert is decided on the host, as transformers' loop over
  // the experts a token hit is: an expert no token picked does not run, and (fetched
  // expert by expert) is not gathered ([Note: which experts a rank fetches]).
  const torch::Tensor picks = top_i.to(torch::kCPU);
  std::vector<int> skipped;
  for (int64_t e = 0; e < E; ++e) {
    const torch::Tensor hit = (picks == e).nonzero();  // [n, 2]: (token, slot)
    if (hit.size(0) == 0) {
      skipped.push_back(spec_.expert_group(b, e));
      continue;
    }
    const torch::Tensor token = hit.select(1, 0).to(x.device()), slot = hit.select(1, 1).to(x.device());
    const int group = spec_.expert_group(b, e);
    const Params ep = spec_.expert_groups ? engine.acquire(group) : Params();
    const Params& src = spec_.expert_groups ? ep : g;
    const size_t k = spec_.expert_groups ? 0 : i + 3 * static_cast<size_t>(e);
    torch::Tensor ye = swiglu(x.index_select(0, token), w(src, k), w(src, k + 1), w(src, k + 2)) *
                       top_w.index({token, slot}).unsqueeze(-1);
    if (spec_.expert_groups) ye = engine.after_forward(group, ye);
    out = out.index_add(0, token, ye);
  }
  // Each token picked an expert, so out carries a gradient: the skipped experts' zero
  // gradients are handed in when it passes back ([Note: a skipped layer], engine.cpp).
  if (spec_.expert_groups)
    for (int group : skipped) out = engine.skipped(group, out);
  return out.view({B, S, h});
}

torch::Tensor Gpt::head_logits(const Params& g, const torch::Tensor& lm_head, const torch::Tensor& x) {
  torch::Tensor y = spec_.family == Family::llama
                        ? rms_norm(x, w(g, 0))
                        : torch::layer_norm(x, {spec_.hidden}, w(g, 0), w(g, 1), spec_.norm_eps);
  return torch::linear(y, lm_head.to(compute_));
}

torch::Tensor Gpt::head_loss(const Params& g, const torch::Tensor& lm_head, const torch::Tensor& x,
                             const torch::Tensor& targets, bool sum) {
  torch::Tensor logits = head_logits(g, lm_head, x);
  return torch::cross_entropy_loss(logits.reshape({-1, spec_.vocab}).to(torch::kFloat), targets.reshape({-1}), {},
                                   sum ? at::Reduction::Sum : at::Reduction::Mean, kPadLabel);
}

torch::Tensor Gpt::trunk(const torch::Tensor& inputs, ZeroEngine& engine, std::vector<torch::Tensor>* router_logits) {
  torch::Tensor x = engine.after_forward(0, embed(engine.acquire(0), inputs));
  for (int64_t b = 0; b < spec_.layers; ++b) {
    const int group = spec_.block_group(b);
    torch::Tensor y, logits;
    if (ckpt_.enabled && torch::GradMode::is_enabled()) {
      variable_list out = CheckpointedBlock::apply(x, b, static_cast<int64_t>(group),
                                                   static_cast<int64_t>(reinterpret_cast<intptr_t>(this)),
                                                   static_cast<int64_t>(reinterpret_cast<intptr_t>(&engine)));
      y = out[0];
      if (out.size() > 1) logits = out[1];
    } else {
      y = run_block(b, x, engine, keeps_router_logits() ? &logits : nullptr);
    }
    if (router_logits && logits.defined()) router_logits->push_back(logits);
    x = engine.after_forward(group, y);
  }
  return x;
}

// [Note: the router's aux loss] Hugging Face's load_balancing_loss_func (transformers
// 5.x's layer-by-layer form; 4.x concatenates the layers first, the same sums): per
// layer, softmax of the router logits in their own dtype and its top-k; over all layers,
// the fraction f_e of rows that picked expert e (the f_e sum to k) and the mean
// probability P_e of e; aux = E * sum_e f_e * P_e: k when the routing is uniform, up to E
// when every row picks the same experts with all the probability.
// Padding rows (an input after a sample's last real token, the attention mask's zeros)
// are left out, as HF does when the collator gives an attention mask. MixtralForCausalLM
// adds router_aux_loss_coef * aux to the loss of each forward; a run checkpointing its
// blocks gets the logits as the checkpointed block's second output.
torch::Tensor real_input_rows(const torch::Tensor& targets) {
  if (!(targets == kPadLabel).any().item<bool>()) return {};
  const int64_t B = targets.size(0), S = targets.size(1);
  return torch::cat({torch::ones({B, 1}, targets.options().dtype(torch::kBool)),
                     (targets != kPadLabel).narrow(1, 0, S - 1)}, 1)
      .reshape({-1})
      .to(torch::kFloat);
}

torch::Tensor router_aux_loss(const std::vector<torch::Tensor>& router_logits, int64_t k, const torch::Tensor& mask) {
  const int64_t E = router_logits.front().size(-1);
  const auto f32 = router_logits.front().options().dtype(torch::kFloat);
  torch::Tensor count = torch::zeros({E}, f32), prob = torch::zeros({E}, f32), rows = torch::zeros({}, f32);
  for (const torch::Tensor& l : router_logits) {
    const torch::Tensor rw = torch::softmax(l, -1);
    const torch::Tensor picked = std::get<1>(rw.topk(k, -1)).reshape({-1});
    if (!mask.defined()) {
      count = count + torch::histc(picked.to(torch::kFloat), E, 0, E);
      prob = prob + rw.to(torch::kFloat).sum(0);
      rows = rows + rw.size(0);
    } else {
      count = count + torch::zeros({E}, f32).scatter_add_(0, picked, mask.repeat_interleave(k));
      prob = prob + (rw.to(torch::kFloat) * mask.unsqueeze(-1)).sum(0);
      rows = rows + mask.sum();
    }
  }
  return ((count / rows) * (prob / rows)).sum() * static_cast<double>(E);
}

torch::Tensor Gpt::next_token(const torch::Tensor& inputs, ZeroEngine& engine) {
  torch::NoGradGuard no_grad;
  const int last = spec_.head_group();
  const torch::Tensor x = trunk(inputs, engine).select(1, inputs.size(1) - 1).unsqueeze(1);
  // The tied embedding first, then the head: Gpt::loss's order, so a generation forward
  // follows the training trace under ZeRO-3.
  const torch::Tensor wte = spec_.tied ? engine.acquire(0)[0] : torch::Tensor();
  const Params head = engine.acquire(last);
  const torch::Tensor lm_head = spec_.tied ? wte : head.back();
  const torch::Tensor logits = head_logits(head, lm_head, x);
  if (spec_.tied) engine.after_forward(0, logits);
  engine.after_forward(last, logits);
  return logits.squeeze(1).argmax(-1);
}

torch::Tensor Gpt::loss(const torch::Tensor& inputs, const torch::Tensor& targets, ZeroEngine& engine, bool sum,
                        double aux_weight) {
  const int last = spec_.head_group();
  std::vector<torch::Tensor> router_logits;
  const torch::Tensor x = trunk(inputs, engine, keeps_router_logits() ? &router_logits : nullptr);
  torch::Tensor loss;
  if (!spec_.tied) {
    const Params head = engine.acquire(last);
    loss = engine.after_forward(last, head_loss(head, head.back(), x, targets, sum));
  } else {
    // Tied: the embed group again for the LM head (gathered again under ZeRO-3), then the head's own.
    const torch::Tensor wte = engine.acquire(0)[0];
    loss = head_loss(engine.acquire(last), wte, x, targets, sum);
    loss = engine.after_forward(last, engine.after_forward(0, loss));
  }
  if (router_logits.empty()) return loss;
  return loss + router_aux_loss(router_logits, spec_.experts_per_tok, real_input_rows(targets)) *
                    (spec_.router_aux_loss_coef * aux_weight);
}

}  // namespace zrepro
