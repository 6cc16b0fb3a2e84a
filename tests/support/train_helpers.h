// In-process training helpers for tests: `tiny` for a few steps under a config.
#pragma once
#include <vector>

#include "device/device_memory.h"
#include "trainer/config/model_spec.h"
#include "trainer/loop/train.h"

namespace zrepro_test {

// The tracking allocator is installed (unlimited) so device categories are measured.
inline zrepro::TrainResult train_tiny(const zrepro::DsConfig& cfg, int64_t steps,
                                      std::vector<zrepro::Injection> inject = {}) {
  zrepro::DeviceMemory::instance().install(0);
  zrepro::TrainOptions o;
  o.steps = steps;
  o.inject = std::move(inject);
  zrepro::TrainResult r;
  zrepro::train(cfg, zrepro::resolve_model("tiny"), o, r);
  return r;
}

}  // namespace zrepro_test
