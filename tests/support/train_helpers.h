// In-process training helpers for tests: `tiny` for a few steps under a config.
#pragma once
#include <vector>

#include "device/device_memory.h"
#include "trainer/config/model_spec.h"
#include "trainer/loop/train.h"
#include "trainer/planner/tape_recorder.h"

namespace zrepro_test {

// A one-rank job of cfg (resolved for one rank) and a model, `tiny` unless given.
inline zrepro::JobSpec one_rank_job(zrepro::DsConfig cfg, zrepro::ModelSpec model = zrepro::resolve_model("tiny")) {
  zrepro::JobSpec job;
  job.cfg = std::move(cfg);
  job.model = std::move(model);
  return job;
}

// The tracking allocator is installed (unlimited) so device categories are measured.
inline zrepro::TrainResult train_tiny(const zrepro::DsConfig& cfg, int64_t steps,
                                      std::vector<zrepro::Injection> inject = {}) {
  zrepro::DeviceMemory::instance().install(0);
  zrepro::TrainOptions o;
  o.steps = steps;
  o.inject = std::move(inject);
  zrepro::TrainResult r;
  zrepro::train(one_rank_job(cfg), o, r);
  return r;
}

// Bytes a bf16 matmul of a scenario's shape allocates beyond its own output on this
// CPU (trainer/planner/tape_recorder.h). Where LibTorch's bf16 GEMM goes through oneDNN it
// allocates reorder buffers whose sizes follow the (dynamic) sequence length; those
// small, varying blocks are what strands reserved memory in the caching emulation.
// Without native bf16 (e.g. no AVX512-BF16) the GEMM allocates nothing extra and the
// fragmentation scenario cannot happen.
using zrepro::bf16_matmul_scratch_bytes;

}  // namespace zrepro_test
