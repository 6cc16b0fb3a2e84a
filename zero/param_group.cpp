// See param_group.h.
#include "zero/param_group.h"

namespace zrepro {

int64_t ParamSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

ParamGroup::ParamGroup(std::string name, std::vector<ParamSpec> specs, torch::TensorOptions options)
    : name_(std::move(name)), specs_(std::move(specs)) {
  for (const auto& s : specs_) {
    offsets_.push_back(numel_);
    numel_ += s.numel();
  }
  flat_ = torch::zeros({numel_}, options);
  flat_grad_ = torch::zeros({numel_}, options);
  for (size_t i = 0; i < specs_.size(); ++i) {
    const int64_t n = specs_[i].numel();
    // detach(): a leaf that shares flat_'s storage; in-place updates of flat_ show through.
    torch::Tensor p = flat_.narrow(0, offsets_[i], n).view(specs_[i].shape).detach().requires_grad_(true);
    p.mutable_grad() = flat_grad_.narrow(0, offsets_[i], n).view(specs_[i].shape);
    params_.push_back(p);
  }
}

}  // namespace zrepro
