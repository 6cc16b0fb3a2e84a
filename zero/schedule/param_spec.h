// What the engine is given of a model: its layers (ZeRO's parameter groups), each a list
// of named parameter shapes. One description serves the model (ModelSpec::layer_shapes,
// trainer/config/model_spec.h, writes it once per family), the engine and the planner.
// Pure: no tensors.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace zrepro {

struct ParamSpec {
  std::string name;  // "<module>.weight" / "<module>.bias", or an embedding's name
  std::vector<int64_t> shape;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

struct LayerSpec {
  std::string name;  // embed, block.<l>, head
  std::vector<ParamSpec> params;
  int64_t numel() const {
    int64_t n = 0;
    for (const auto& p : params) n += p.numel();
    return n;
  }
};

}  // namespace zrepro
