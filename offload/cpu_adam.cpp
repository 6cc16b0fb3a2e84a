// See cpu_adam.h. The kernel is compiled for AVX-512, AVX2 and baseline x86-64
// (GCC target_clones picks one at load time), so one binary runs everywhere.
#include "offload/cpu_adam.h"

#include <cmath>
#include <stdexcept>

namespace zrepro {
namespace {

constexpr int64_t kTile = 8192;  // elements per tile: p, g, m, v tiles stay in L2

struct Coeffs {
  float beta1, beta2, one_minus_beta1, one_minus_beta2, step_size, inv_bc2_sqrt, eps, decay, l2;
};

__attribute__((target_clones("avx512f", "avx2", "default")))
void adam_tile(float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v,
               int64_t n, Coeffs c) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    float grad = g[i] + c.l2 * p[i];
    float mi = c.beta1 * m[i] + c.one_minus_beta1 * grad;
    float vi = c.beta2 * v[i] + c.one_minus_beta2 * grad * grad;
    m[i] = mi;
    v[i] = vi;
    float denom = std::sqrt(vi) * c.inv_bc2_sqrt + c.eps;
    p[i] = p[i] * c.decay - c.step_size * mi / denom;
  }
}

template <class Half>
void write_half(const float* p, Half* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<Half>(p[i]);
}

}  // namespace

void cpu_adam_step(torch::Tensor& p, const torch::Tensor& g, torch::Tensor& m, torch::Tensor& v,
                   const AdamHyper& h, int64_t step, torch::Tensor half_out) {
  for (const torch::Tensor* t : std::initializer_list<const torch::Tensor*>{&p, &g, &m, &v})
    if (!t->device().is_cpu() || t->scalar_type() != torch::kFloat || !t->is_contiguous() ||
        t->numel() != p.numel())
      throw std::invalid_argument("cpu_adam_step: p, g, m, v must be contiguous fp32 CPU tensors of equal size");
  const bool half = half_out.defined();
  if (half && (half_out.numel() != p.numel() || !half_out.is_contiguous() ||
               (half_out.scalar_type() != torch::kBFloat16 && half_out.scalar_type() != torch::kHalf)))
    throw std::invalid_argument("cpu_adam_step: half_out must be a contiguous bf16/fp16 tensor of p's size");

  const double bc1 = h.bias_correction ? 1.0 - std::pow(h.beta1, step) : 1.0;
  const double bc2 = h.bias_correction ? 1.0 - std::pow(h.beta2, step) : 1.0;
  Coeffs c;
  c.beta1 = static_cast<float>(h.beta1);
  c.beta2 = static_cast<float>(h.beta2);
  c.one_minus_beta1 = static_cast<float>(1.0 - h.beta1);
  c.one_minus_beta2 = static_cast<float>(1.0 - h.beta2);
  c.step_size = static_cast<float>(h.lr / bc1);
  c.inv_bc2_sqrt = static_cast<float>(1.0 / std::sqrt(bc2));
  c.eps = static_cast<float>(h.eps);
  c.decay = h.adam_w_mode ? static_cast<float>(1.0 - h.lr * h.weight_decay) : 1.0f;
  c.l2 = h.adam_w_mode ? 0.0f : static_cast<float>(h.weight_decay);

  float* pp = p.data_ptr<float>();
  const float* gp = g.data_ptr<float>();
  float* mp = m.data_ptr<float>();
  float* vp = v.data_ptr<float>();
  const int64_t n = p.numel();
  const int64_t tiles = (n + kTile - 1) / kTile;
#pragma omp parallel for schedule(static) if (tiles > 1)
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t lo = t * kTile, len = std::min(kTile, n - lo);
    adam_tile(pp + lo, gp + lo, mp + lo, vp + lo, len, c);
    if (half) {
      if (half_out.scalar_type() == torch::kBFloat16)
        write_half(pp + lo, half_out.data_ptr<c10::BFloat16>() + lo, len);
      else
        write_half(pp + lo, half_out.data_ptr<c10::Half>() + lo, len);
    }
  }
}

void torch_adam_step(torch::Tensor& p, const torch::Tensor& g, torch::Tensor& m, torch::Tensor& v,
                     const AdamHyper& h, int64_t step) {
  torch::NoGradGuard no_grad;
  const double bc1 = h.bias_correction ? 1.0 - std::pow(h.beta1, step) : 1.0;
  const double bc2 = h.bias_correction ? 1.0 - std::pow(h.beta2, step) : 1.0;
  torch::Tensor grad = h.adam_w_mode || h.weight_decay == 0 ? g : g.add(p, h.weight_decay);
  if (h.adam_w_mode && h.weight_decay != 0) p.mul_(1.0 - h.lr * h.weight_decay);
  m.mul_(h.beta1).add_(grad, 1.0 - h.beta1);
  v.mul_(h.beta2).addcmul_(grad, grad, 1.0 - h.beta2);
  torch::Tensor denom = (v.sqrt() / std::sqrt(bc2)).add_(h.eps);
  p.addcdiv_(m, denom, -h.lr / bc1);
}

}  // namespace zrepro
