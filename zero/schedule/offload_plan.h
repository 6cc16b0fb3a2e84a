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
// param_dtype: the 16-bit (or fp32) parameter storage; grad_dtype: the reduced gradient
// (communication) dtype; rank: whose whole-parameter overhang (below) is counted.
OffloadHostBytes offload_host_bytes(const std::vector<std::vector<int64_t>>& layer_param_numels, const ZeroConfig& z,
                                    int world_size, int rank, c10::ScalarType param_dtype, c10::ScalarType grad_dtype);

// [Note: DeepSpeed's offloaded accumulation moves whole parameters] At stages 1-2 with
// offload_optimizer, DeepSpeed 0.19.8 accumulates a step's micro-step gradients in the
// model dtype through the device (stage_1_and_2.py async_accumulate_grad_in_cpu_via_gpu):
// per parameter overlapping the rank's partition, the whole parameter's host
// accumulator comes up into a device buffer of the largest parameter's size
// (temp_grad_buffer_for_gpu_offload), is added to the micro-step's reduced gradient on
// the device, and the sum goes back down, whole, every micro-step; at the boundary the
// partition also goes down as fp32. zrepro's offload does the same per layer partition
// (offload/optimizer_offload.cpp) and moves the elements of those whole parameters
// beyond its partition (the overhang) between the same device buffer and a host buffer
// of their size, so the link carries DeepSpeed's bytes.
//
// Elements of the device buffer (the largest parameter; 0 where DeepSpeed has none:
// stage 0, stage 3, no optimizer offload).
int64_t offload_grad_temp_numel(const std::vector<std::vector<int64_t>>& layer_param_numels, const ZeroConfig& z);
// Elements of the overhang on `rank` that moves with the accumulator (0 unless stages
// 1-2 with every layer's optimizer offloaded).
int64_t offload_grad_overhang_numel(const std::vector<std::vector<int64_t>>& layer_param_numels, const ZeroConfig& z,
                                    int world_size, int rank);

// Host bytes of OptimizerOffload per partition element: fp32 master, exp_avg,
// exp_avg_sq, gradient accumulator, the gradient landing buffer and (unless the
// parameters themselves live on the host) the 16-bit copy that goes up.
int64_t optimizer_offload_bytes_per_element(c10::ScalarType param_dtype, c10::ScalarType grad_dtype,
                                            bool param_offload);

}  // namespace zrepro
