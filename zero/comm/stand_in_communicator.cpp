// See stand_in_communicator.h.
#include "zero/comm/stand_in_communicator.h"

#include <cfloat>
#include <cmath>

#include <ATen/Parallel.h>

#include "device/device_memory.h"

namespace zrepro {

namespace {

// [Note: a run of equal increments] s_k = fl(s_{k-1} + g). While s stays in one binade
// (ulp u) and the last increment d = s_k - s_{k-1} is a multiple of u with |g - d| < u/2,
// the next addition rounds s + g to s + d again (a tie, |g - d| = u/2, also gives s + d
// when s/u and d/u are both even: ties round to even). So the additions up to the top of
// the binade are t exact steps of d, taken at once; at most two real additions per binade
// crossed, about log2(n) of them.
float sum_of_copies_f32(float g, int64_t n) {
  if (n <= 1 || g == 0.0f || !std::isfinite(g)) return g;  // 0, inf and NaN are their own sums
  float s = g;
  int64_t k = 1;
  while (k < n) {
    const float next = s + g;  // one real addition
    ++k;
    if (!std::isfinite(next)) return next;
    const double d = static_cast<double>(next) - static_cast<double>(s);  // exact
    s = next;
    if (k == n) break;
    const double as = std::fabs(static_cast<double>(s));
    int e = 0;
    std::frexp(as, &e);  // as in [2^(e-1), 2^e)
    const bool sub = as < FLT_MIN;
    const double u = sub ? std::ldexp(1.0, -149) : std::ldexp(1.0, e - 24);
    const double top = sub ? static_cast<double>(FLT_MIN) : std::ldexp(1.0, e);
    // In units of u (exact: powers of two apart, integers below 2^25).
    const double ad = std::fabs(d) / u, off = std::fabs(static_cast<double>(g) - d) / u;
    if (ad != std::floor(ad)) continue;  // d from the binade below: one more real addition
    const auto step = static_cast<int64_t>(ad);
    bool constant = off < 0.5;
    if (!constant && off == 0.5) constant = (static_cast<int64_t>(as / u) % 2 == 0) && step % 2 == 0;
    if (!constant) continue;
    if (step == 0) return s;  // g is below half an ulp of s: every later addition gives s
    const auto room = static_cast<int64_t>((top - as) / u);
    const int64_t t = std::min((room - 1) / step, n - k);
    if (t <= 0) continue;
    s = static_cast<float>(static_cast<double>(s) + std::copysign(static_cast<double>(t * step) * u, d));
    k += t;
  }
  return s;
}

torch::ScalarType accumulation_type(torch::ScalarType t) {
  return t == torch::kHalf || t == torch::kBFloat16 ? torch::kFloat : t;
}

}  // namespace

torch::Tensor sum_of_copies(const torch::Tensor& x, int64_t n) {
  torch::NoGradGuard no_grad;
  DeviceMemory::HostScope host;  // the peers' arithmetic is nobody's device memory
  torch::Tensor acc = x.to(torch::kCPU, accumulation_type(x.scalar_type()), false, /*copy=*/true).contiguous();
  if (n <= 1) return acc;
  if (acc.scalar_type() == torch::kFloat) {
    float* p = acc.data_ptr<float>();
    at::parallel_for(0, acc.numel(), 1 << 14, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) p[i] = sum_of_copies_f32(p[i], n);
    });
    return acc;
  }
  // Other types (doubles, integers: small statistics) add n copies one by one.
  const torch::Tensor one = acc.clone();
  for (int64_t k = 1; k < n; ++k) acc.add_(one);
  return acc;
}

StandInCommunicator::StandInCommunicator(int rank, int world, PeerValuesMode mode)
    : Communicator(rank, world, /*threaded=*/true), mode_(mode) {}

StandInCommunicator::~StandInCommunicator() { stop_worker(); }

void StandInCommunicator::set_rank_inputs(const torch::Tensor& t, torch::Tensor rows) {
  TORCH_CHECK(rows.dim() == 2 && rows.size(0) == world_size() && rows.size(1) == t.numel(),
              "set_rank_inputs: expected [", world_size(), ", ", t.numel(), "] rows");
  std::lock_guard<std::mutex> lock(mu_);
  rank_inputs_[t.data_ptr()] = std::move(rows);
}

void StandInCommunicator::gather_from_peers(torch::Tensor& out, const torch::Tensor& in) {
  if (!peers_ || !peers_->fill_gather(in, out))
    throw CommError("stand-in peers: all_gather of " + std::to_string(in.numel()) +
                    " elements from a buffer the peers' model does not hold (only parameter partitions are "
                    "modelled); run the ranks (--peers run)");
}

void StandInCommunicator::execute(CollOp op, torch::Tensor& out, torch::Tensor& in, int root) {
  (void)root;  // a broadcast's root holds what this rank holds
  torch::NoGradGuard no_grad;
  DeviceMemory::HostScope host;
  const int n = world_size();
  switch (op) {
    case CollOp::all_reduce: {
      torch::Tensor rows;
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = rank_inputs_.find(in.data_ptr());
        if (it != rank_inputs_.end()) rows = std::move(it->second), rank_inputs_.erase(it);
      }
      if (!rows.defined()) {
        out.copy_(sum_of_copies(in, n));
        break;
      }
      // Rank order, as VirtualGroup sums its posts.
      const torch::ScalarType acc_type = accumulation_type(in.scalar_type());
      torch::Tensor acc = rows[0].to(torch::kCPU, acc_type, false, true);
      for (int k = 1; k < n; ++k) acc.add_(rows[k].to(torch::kCPU, acc_type));
      out.copy_(acc);
      break;
    }
    case CollOp::reduce_scatter: {
      const int64_t m = out.numel();
      if (mode_ == PeerValuesMode::model) {
        in.copy_(sum_of_copies(in, n));  // every rank's slice, for the caller's peer model
        out.copy_(in.view({-1}).narrow(0, rank() * m, m).view(out.sizes()));
      } else {  // nobody models the peers' gradients: this rank's slice alone, O(model / N)
        out.copy_(sum_of_copies(in.view({-1}).narrow(0, rank() * m, m), n).view(out.sizes()));
      }
      break;
    }
    case CollOp::all_gather: gather_from_peers(out, in); break;
    case CollOp::broadcast:
    case CollOp::barrier: break;
  }
}

}  // namespace zrepro
