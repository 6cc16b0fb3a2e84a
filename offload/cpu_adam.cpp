// See cpu_adam.h. The kernel is compiled for AVX-512, AVX2 and baseline x86-64
// (GCC target_clones picks one at load time), so one binary runs everywhere;
// [Note: vectorised Adam] says what keeps it vectorised and exact.
#include "offload/cpu_adam.h"

#include <cmath>
#include <cstring>
#include <stdexcept>

namespace zrepro {
namespace {

constexpr int64_t kTile = 8192;  // elements per tile: p, g, m, v tiles stay in L2

struct Coeffs {
  float beta1, beta2, one_minus_beta1, one_minus_beta2, step_size, inv_bc2_sqrt, eps, decay, l2;
};

// [Note: vectorised Adam] One pass per tile reads p, g, m, v and writes p, m, v and,
// for bf16, the rounded copy (round to nearest even, NaN -> 0x7FC0, as c10::BFloat16),
// so the bf16 copy costs 2 bytes per parameter, not another pass. The file is built
// with -fno-math-errno (else std::sqrt keeps its errno branch and the loop stays
// scalar) and -ffp-contract=off (no FMA contraction): every ISA clone and the scalar
// reference perform the same IEEE operations in the same order, so their results are
// bit-identical on every machine (CpuAdam.VectorisedEqualsTheScalarReferenceExactly).
template <bool kBf16>
inline __attribute__((always_inline)) void adam_body(float* __restrict p, const float* __restrict g,
                                                     float* __restrict m, float* __restrict v,
                                                     uint16_t* __restrict half, int64_t n, const Coeffs& c) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float grad = g[i] + c.l2 * p[i];
    const float mi = c.beta1 * m[i] + c.one_minus_beta1 * grad;
    const float vi = c.beta2 * v[i] + c.one_minus_beta2 * grad * grad;
    m[i] = mi;
    v[i] = vi;
    const float denom = std::sqrt(vi) * c.inv_bc2_sqrt + c.eps;
    const float pi = p[i] * c.decay - c.step_size * mi / denom;
    p[i] = pi;
    if constexpr (kBf16) {
      uint32_t bits;
      std::memcpy(&bits, &pi, sizeof bits);
      const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
      half[i] = pi != pi ? uint16_t{0x7FC0} : static_cast<uint16_t>(rounded);
    }
  }
}

// GCC target_clones: one binary, the widest ISA this CPU has picked at load time.
__attribute__((target_clones("avx512f", "avx2", "default")))
void adam_tile(float* p, const float* g, float* m, float* v, int64_t n, Coeffs c) {
  adam_body<false>(p, g, m, v, nullptr, n, c);
}
__attribute__((target_clones("avx512f", "avx2", "default")))
void adam_tile_bf16(float* p, const float* g, float* m, float* v, uint16_t* half, int64_t n, Coeffs c) {
  adam_body<true>(p, g, m, v, half, n, c);
}
// The scalar reference: the same body one element per (not inlined) call, so the
// loop around it cannot be vectorised.
template <bool kBf16>
__attribute__((noinline)) void adam_one(float* p, const float* g, float* m, float* v, uint16_t* half, const Coeffs& c) {
  adam_body<kBf16>(p, g, m, v, half, 1, c);
}
void adam_tile_scalar(float* p, const float* g, float* m, float* v, uint16_t* half, int64_t n, Coeffs c) {
  for (int64_t i = 0; i < n; ++i) {
    if (half) adam_one<true>(p + i, g + i, m + i, v + i, half + i, c);
    else adam_one<false>(p + i, g + i, m + i, v + i, nullptr, c);
  }
}

// Adam's access pattern with next to no arithmetic, built like adam_tile.
__attribute__((target_clones("avx512f", "avx2", "default")))
void probe_tile(float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    p[i] = p[i] + 0.5f * g[i];
    m[i] = m[i] + g[i];
    v[i] = v[i] + g[i] * g[i];
  }
}

void write_fp16(const float* p, c10::Half* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<c10::Half>(p[i]);
}

// f(lo, len) over the tiles of [0, n), split over OpenMP threads (static: each thread one
// contiguous range).
template <typename F>
void for_each_tile(int64_t n, F f) {
  const int64_t tiles = (n + kTile - 1) / kTile;
#pragma omp parallel for schedule(static) if (tiles > 1)
  for (int64_t t = 0; t < tiles; ++t) f(t * kTile, std::min(kTile, n - t * kTile));
}

void check_args(const torch::Tensor& p, const torch::Tensor& g, const torch::Tensor& m, const torch::Tensor& v,
                const torch::Tensor& half_out) {
  for (const torch::Tensor* t : std::initializer_list<const torch::Tensor*>{&p, &g, &m, &v})
    if (!t->device().is_cpu() || t->scalar_type() != torch::kFloat || !t->is_contiguous() ||
        t->numel() != p.numel())
      throw std::invalid_argument("cpu_adam_step: p, g, m, v must be contiguous fp32 CPU tensors of equal size");
  if (half_out.defined() && (half_out.numel() != p.numel() || !half_out.is_contiguous() ||
                             (half_out.scalar_type() != torch::kBFloat16 && half_out.scalar_type() != torch::kHalf)))
    throw std::invalid_argument("cpu_adam_step: half_out must be a contiguous bf16/fp16 tensor of p's size");
}

Coeffs coeffs(const AdamHyper& h, int64_t step) {
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
  return c;
}

void adam_run(torch::Tensor& p, const torch::Tensor& g, torch::Tensor& m, torch::Tensor& v, const Coeffs& c,
              const torch::Tensor& half_out, bool scalar) {
  float* pp = p.data_ptr<float>();
  const float* gp = g.data_ptr<float>();
  float* mp = m.data_ptr<float>();
  float* vp = v.data_ptr<float>();
  const bool bf16 = half_out.defined() && half_out.scalar_type() == torch::kBFloat16;
  const bool fp16 = half_out.defined() && !bf16;
  uint16_t* hb = bf16 ? reinterpret_cast<uint16_t*>(half_out.data_ptr<c10::BFloat16>()) : nullptr;
  c10::Half* hf = fp16 ? half_out.data_ptr<c10::Half>() : nullptr;
  for_each_tile(p.numel(), [&](int64_t lo, int64_t len) {
    if (scalar) adam_tile_scalar(pp + lo, gp + lo, mp + lo, vp + lo, hb ? hb + lo : nullptr, len, c);
    else if (hb) adam_tile_bf16(pp + lo, gp + lo, mp + lo, vp + lo, hb + lo, len, c);
    else adam_tile(pp + lo, gp + lo, mp + lo, vp + lo, len, c);
    if (hf) write_fp16(pp + lo, hf + lo, len);  // fp16 stays a second, cache-hot loop per tile
  });
}
}  // namespace

void cpu_adam_step(torch::Tensor& p, const torch::Tensor& g, torch::Tensor& m, torch::Tensor& v,
                   const AdamHyper& h, int64_t step, torch::Tensor half_out) {
  check_args(p, g, m, v, half_out);
  adam_run(p, g, m, v, coeffs(h, step), half_out, /*scalar=*/false);
}

void cpu_adam_step_reference(torch::Tensor& p, const torch::Tensor& g, torch::Tensor& m, torch::Tensor& v,
                             const AdamHyper& h, int64_t step, torch::Tensor half_out) {
  check_args(p, g, m, v, half_out);
  adam_run(p, g, m, v, coeffs(h, step), half_out, /*scalar=*/true);
}

void adam_access_probe(torch::Tensor& p, const torch::Tensor& g, torch::Tensor& m, torch::Tensor& v) {
  check_args(p, g, m, v, {});
  float* pp = p.data_ptr<float>();
  const float* gp = g.data_ptr<float>();
  float* mp = m.data_ptr<float>();
  float* vp = v.data_ptr<float>();
  for_each_tile(p.numel(), [&](int64_t lo, int64_t len) { probe_tile(pp + lo, gp + lo, mp + lo, vp + lo, len); });
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
