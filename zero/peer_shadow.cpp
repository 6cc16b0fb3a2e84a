// See peer_shadow.h.
#include "zero/peer_shadow.h"

#include <cmath>
#include <sstream>

#include "device/device_memory.h"
#include "zero/layer_optimizer.h"

namespace zrepro {

PeerShadow::PeerShadow(StandInCommunicator& comm)
    : comm_(comm), world_(comm.world_size()), rank_(comm.rank()) {
  checks_.values_modelled = comm.mode() == PeerValuesMode::model;
  if (!modelled()) checks_.first_difference = "--peer-values initial: the peers' partitions stay at their initial values";
  comm_.set_peer_values(this);
}

PeerShadow::~PeerShadow() { comm_.set_peer_values(nullptr); }

void PeerShadow::group_built(ParamGroup& g, const torch::Tensor& init_fp32, torch::ScalarType grad_dtype) {
  if (g.config().policy.owns_whole_flat()) {  // stage 0's peers hold what this rank holds
    whole_flat_ = true;
    return;
  }
  torch::NoGradGuard no_grad;
  DeviceMemory::HostScope host;  // the peers' state is nobody's device memory
  TORCH_CHECK(g.index() == static_cast<int>(rows_.size()), "PeerShadow: groups are added in index order");
  const LayerLayout& lay = g.layout();
  // The layer in its full gradient layout (padded, rank-major slices), where every
  // GradUnit gives rank k's slice at base + k * slice: the rows are those slices.
  torch::Tensor full = torch::zeros({lay.full_grad_numel()}, torch::kFloat);
  const torch::Tensor init = init_fp32.to(torch::kCPU, torch::kFloat).reshape({-1});
  for (size_t i = 0; i < lay.param_numels.size(); ++i)
    full.narrow(0, lay.grad_offset(i), lay.param_numels[i]).copy_(init.narrow(0, lay.natural_offsets[i], lay.param_numels[i]));
  const int64_t owned = lay.owned_numel();
  torch::Tensor values = torch::zeros({world_, owned}, torch::kFloat);
  for (const GradUnit& u : lay.units)
    values.narrow(1, u.owned_offset, u.slice).copy_(full.narrow(0, u.base, world_ * u.slice).view({world_, u.slice}));
  Rows r;
  r.group = &g;
  r.params = values.to(g.config().dtype);
  if (!modelled()) {
    rows_.push_back(std::move(r));
    return;
  }
  r.master = r.params.to(torch::kFloat);  // DeviceAdam's master: the 16-bit values in fp32
  r.exp_avg = torch::zeros_like(r.master);
  r.exp_avg_sq = torch::zeros_like(r.master);
  r.grads = torch::zeros({world_, owned}, grad_dtype);
  rows_.push_back(std::move(r));
}

ReducedPieces PeerShadow::reduced_pieces() {
  if (!modelled() || whole_flat_) return {};
  return [this](int g, int64_t offset, const torch::Tensor& rows) { add_reduced(g, offset, rows); };
}

void PeerShadow::stats_reducing(const torch::Tensor& own, const RankStatsParts& parts) {
  // Each peer's share of each layer's norm, summed as the engine sums its own; this rank's
  // row is its own statistics, its norms checked against its row of the model.
  DeviceMemory::HostScope host;
  const size_t L = parts.own_norms.size();
  torch::Tensor rows = torch::empty({world_, 3}, torch::kDouble);
  auto* r = rows.data_ptr<double>();
  std::vector<double> norms(L);
  for (int k = 0; k < world_; ++k) {
    for (size_t l = 0; l < L; ++l) {
      const int g = static_cast<int>(l);
      norms[l] = whole_flat_  ? parts.norm(l, k, torch::Tensor())
                 : modelled() ? parts.norm(l, k, grad(g, k))
                              : parts.own_norms[l];  // --peer-values initial: this rank's share stands in
      if (k == rank_ && modelled() && !whole_flat_) check_norm(g, parts.own_norms[l], norms[l]);
    }
    const std::pair<double, double> s = parts.sum(norms);
    r[3 * k] = parts.local_loss, r[3 * k + 1] = s.first, r[3 * k + 2] = s.second;
  }
  rows[rank_].copy_(own.cpu());
  comm_.set_rank_inputs(own, rows);
}

void PeerShadow::add_reduced(int group, int64_t owned_offset, const torch::Tensor& rows) {
  torch::NoGradGuard no_grad;
  DeviceMemory::HostScope host;
  if (!modelled()) return;
  rows_[group].grads.narrow(1, owned_offset, rows.size(1)).add_(rows.to(torch::kCPU));
}

void PeerShadow::stepped(const AdamHyper& h, int64_t step, double coef) {
  torch::NoGradGuard no_grad;
  DeviceMemory::HostScope host;
  if (!modelled()) return;
  for (Rows& r : rows_) adam_update(r.master, r.grads, r.exp_avg, r.exp_avg_sq, r.params, false, h, step, coef);
}

void PeerShadow::grads_zeroed() {
  for (Rows& r : rows_)
    if (r.grads.defined()) r.grads.zero_();
}

bool PeerShadow::fill_gather(const torch::Tensor& mine, torch::Tensor out) {
  torch::NoGradGuard no_grad;
  DeviceMemory::HostScope host;
  const auto* p = static_cast<const char*>(mine.data_ptr());
  for (Rows& r : rows_) {
    const torch::Tensor src = r.group->gather_source();
    if (!src.defined()) continue;
    const auto* base = static_cast<const char*>(src.data_ptr());
    const int64_t bytes = src.numel() * static_cast<int64_t>(src.element_size());
    if (p < base || p >= base + bytes || src.scalar_type() != mine.scalar_type()) continue;
    const int64_t off = (p - base) / src.element_size(), m = mine.numel();
    const torch::Tensor slices = r.params.narrow(1, off, m);
    const bool equal = torch::equal(slices[rank_], mine.to(torch::kCPU).view({-1}));
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++checks_.gathers;
      if (equal) ++checks_.gathers_equal;
      else
        differ("gather of group " + r.group->name() + " (elements " + std::to_string(off) + ".." +
               std::to_string(off + m) + " of its partition)");
    }
    // Every rank's slice but this one's: an in-place gather's input is its own slot.
    torch::Tensor slots = out.view({world_, m});
    if (rank_ > 0) slots.narrow(0, 0, rank_).copy_(slices.narrow(0, 0, rank_));
    if (rank_ + 1 < world_) slots.narrow(0, rank_ + 1, world_ - rank_ - 1).copy_(slices.narrow(0, rank_ + 1, world_ - rank_ - 1));
    if (slots[rank_].data_ptr() != mine.data_ptr()) slots[rank_].copy_(mine.view({-1}));
    return true;
  }
  return false;
}

void PeerShadow::check_norm(int group, double own, double modelled) {
  std::lock_guard<std::mutex> lock(mu_);
  ++checks_.norms;
  const bool equal = own == modelled || (std::isnan(own) && std::isnan(modelled));
  if (equal) ++checks_.norms_equal;
  else {
    std::ostringstream os;
    os.precision(17);
    os << "gradient norm share of group " << rows_[group].group->name() << " (" << own << " computed, " << modelled
       << " modelled)";
    differ(os.str());
  }
}

void PeerShadow::differ(const std::string& what) {
  if (checks_.first_difference.empty()) checks_.first_difference = what;
}

StandInChecks PeerShadow::checks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return checks_;
}

}  // namespace zrepro
