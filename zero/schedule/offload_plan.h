// Offload arithmetic, pure: which layers keep their optimizer on the host (partial
// offload: ratio < 1) and how many host bytes offload pins or allocates per rank.
// The engine sizes and preflights its buffers with it; the planner reports it.
#pragma once
#include <cstdint>
#include <vector>

#include <c10/core/ScalarType.h>

#include "zero/zero_config.h"

namespace zrepro {

// Per layer: true when its optimizer states live on the host. DeepSpeed's partial
// offload takes the first layers up to `ratio` of the parameters.
// layer_param_numels: per layer, its parameters' sizes.
std::vector<bool> offloaded_layers(const std::vector<std::vector<int64_t>>& layer_param_numels, const ZeroConfig& z);

struct OffloadHostBytes {
  int64_t pinned = 0, pageable = 0;
};
// param_dtype: the 16-bit (or fp32) parameter storage; grad_dtype: the reduced gradient (communication) dtype.
OffloadHostBytes offload_host_bytes(const std::vector<std::vector<int64_t>>& layer_param_numels, const ZeroConfig& z,
                                    int world_size, c10::ScalarType param_dtype, c10::ScalarType grad_dtype);

// Host bytes of OptimizerOffload per partition element: fp32 master, exp_avg,
// exp_avg_sq, gradient accumulator, the gradient landing buffer and (unless the
// parameters themselves live on the host) the 16-bit copy that goes up.
int64_t optimizer_offload_bytes_per_element(c10::ScalarType param_dtype, c10::ScalarType grad_dtype,
                                            bool param_offload);

}  // namespace zrepro
