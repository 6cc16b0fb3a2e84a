// What a run trains on, written for an outside trainer (the DeepSpeed conformance
// harness, conformance/): the model layout, the initial weights and the token
// batches, as NumPy .npy files (torch.from_numpy(numpy.load(...)) reads them).
//
//   DIR/layout.json  model dimensions, layers in order with each parameter's name,
//                    shape and offset into init.npy, the batch geometry and how a
//                    (step, micro-step, rank) finds its samples
//   DIR/init.npy     float32 [params]: every layer's initial values back to back
//   DIR/tokens.npy   int64 [steps * global_batch, seq + 1]: global samples in order, padded
//                    with -100 after each sample's length under --seq-len-dist
//   OUT/final.npy    (beside DIR, not in it: an output, and DIR's files key the bisect
//                    cache) float32 [params]: the parameters after the last step, laid out
//                    as init.npy (fp32 runs: the fp32 master; 16-bit runs: the 16-bit
//                    values), written when the run completes
//
// Each file is written through a temporary file and renamed (write_file_atomic).
#pragma once
#include <cstdint>
#include <string>

#include <torch/torch.h>

#include "trainer/config/model_spec.h"
#include "trainer/model/data.h"

namespace zrepro {

struct InputsGeometry {
  int64_t steps = 0, micro = 0, grad_accum = 0;
  int world = 1;
  uint64_t seed = 0;
  SeqLenDist lengths;  // --seq-len-dist
  std::string loss_normalization = "mean";
};

// The bytes of a .npy (format 1.0) file holding a contiguous CPU tensor of float32
// or int64.
std::string npy_bytes(const torch::Tensor& t);

void export_inputs(const std::string& dir, const ModelSpec& spec, const InputsGeometry& g);
// OUT/final.npy (out_dir: the run's --out) from each layer's full fp32 values after the last step.
void export_final_params(const std::string& dir, const std::vector<torch::Tensor>& layers);

}  // namespace zrepro
