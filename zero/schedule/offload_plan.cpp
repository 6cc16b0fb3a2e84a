// See offload_plan.h.
#include "zero/schedule/offload_plan.h"

#include <algorithm>

#include "zero/schedule/partition.h"
#include "zero/schedule/stage_policy.h"

namespace zrepro {

namespace {
std::vector<int64_t> layer_totals(const std::vector<std::vector<int64_t>>& layers) {
  std::vector<int64_t> totals;
  for (const auto& l : layers) {
    int64_t n = 0;
    for (int64_t p : l) n += p;
    totals.push_back(n);
  }
  return totals;
}
}  // namespace

std::vector<bool> offloaded_layers(const std::vector<std::vector<int64_t>>& layers, const ZeroConfig& z) {
  const double ratio =
      z.offload_optimizer.enabled() && stage_policy(z.stage).shard_optimizer() ? z.offload_optimizer.ratio : 0.0;
  int64_t total = 0, done = 0;
  const std::vector<int64_t> numels = layer_totals(layers);
  for (int64_t n : numels) total += n;
  std::vector<bool> out;
  for (int64_t n : numels) {
    out.push_back(ratio > 0 && static_cast<double>(done) < ratio * static_cast<double>(total));
    done += n;
  }
  return out;
}

int64_t optimizer_offload_bytes_per_element(c10::ScalarType param_dtype, c10::ScalarType grad_dtype,
                                            bool param_offload) {
  return 16 + static_cast<int64_t>(c10::elementSize(grad_dtype)) +
         (param_dtype == c10::ScalarType::Float || param_offload ? 0
                                                                 : static_cast<int64_t>(c10::elementSize(param_dtype)));
}

int64_t offload_grad_temp_numel(const std::vector<std::vector<int64_t>>& layers, const ZeroConfig& z) {
  const StagePolicy policy = stage_policy(z.stage);
  if (!z.offload_optimizer.enabled() || !policy.shard_optimizer() || policy.shard_params()) return 0;
  int64_t largest = 0;
  for (const auto& l : layers)
    for (int64_t n : l) largest = std::max(largest, n);
  return largest;
}

int64_t offload_grad_overhang_numel(const std::vector<std::vector<int64_t>>& layers, const ZeroConfig& z, int ws,
                                    int rank) {
  if (offload_grad_temp_numel(layers, z) == 0) return 0;
  for (bool off : offloaded_layers(layers, z))
    if (!off) return 0;  // partial offload: not modelled
  return whole_param_overhang_numel(layers, ws, rank);
}

OffloadHostBytes offload_host_bytes(const std::vector<std::vector<int64_t>>& layers, const ZeroConfig& z, int ws,
                                    int rank, c10::ScalarType param_dtype, c10::ScalarType grad_dtype) {
  const OffloadConfig& oo = z.offload_optimizer;
  const OffloadConfig& op = z.offload_param;
  const std::vector<int64_t> totals = layer_totals(layers);
  const std::vector<bool> offloaded = offloaded_layers(layers, z);
  const int64_t es = static_cast<int64_t>(c10::elementSize(param_dtype));
  OffloadHostBytes b;
  for (size_t l = 0; l < layers.size(); ++l) {
    // The partition this rank's optimizer updates (a stage-0 layer is never offloaded).
    const int64_t owned = stage_policy(z.stage).shard_params() ? partition_params(layers[l], ws).shard_numel
                                                               : partition_flat(totals[l], ws).partition_numel;
    if (op.enabled()) (op.pin_memory ? b.pinned : b.pageable) += owned * es;
    if (offloaded[l])
      (oo.pin_memory ? b.pinned : b.pageable) +=
          owned * optimizer_offload_bytes_per_element(param_dtype, grad_dtype, op.enabled());
  }
  (oo.pin_memory ? b.pinned : b.pageable) +=
      offload_grad_overhang_numel(layers, z, ws, rank) * static_cast<int64_t>(c10::elementSize(grad_dtype));
  return b;
}

}  // namespace zrepro
