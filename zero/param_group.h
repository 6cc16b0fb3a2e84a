// ParamGroup: the unit ZeRO shards, one per model layer. Its parameters live as
// views in one flat, contiguous buffer (Megatron-style param-and-grad buffer) and
// their .grad tensors are views of one flat gradient buffer, so autograd
// accumulates micro-step gradients in place and a whole layer moves, reduces or
// updates as one tensor. The range map (name -> offset, shape) is computed once.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace zrepro {

struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel() const;
};

class ParamGroup {
 public:
  // Allocates the flat parameter and gradient buffers (options: dtype + device).
  ParamGroup(std::string name, std::vector<ParamSpec> specs, torch::TensorOptions options);

  const std::string& name() const { return name_; }
  const std::vector<ParamSpec>& specs() const { return specs_; }
  int64_t numel() const { return numel_; }
  int64_t offset(size_t i) const { return offsets_[i]; }

  torch::Tensor& flat() { return flat_; }
  torch::Tensor& flat_grad() { return flat_grad_; }
  const torch::Tensor& param(size_t i) const { return params_[i]; }
  const std::vector<torch::Tensor>& params() const { return params_; }

  void zero_grad() { flat_grad_.zero_(); }

 private:
  std::string name_;
  std::vector<ParamSpec> specs_;
  std::vector<int64_t> offsets_;
  int64_t numel_ = 0;
  torch::Tensor flat_, flat_grad_;
  std::vector<torch::Tensor> params_;
};

}  // namespace zrepro
