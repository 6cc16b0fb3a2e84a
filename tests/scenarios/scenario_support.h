// Shared by the scenario tests: a scenario folder's config text, `zrepro run` of a
// config in a fresh folder, and the fragmentation scenario's precondition on this CPU.
#pragma once
#include <string>

#include "device/device_memory.h"
#include "tests/support/process.h"
#include "tests/support/train_helpers.h"

namespace scenario_test {

using zrepro_test::expect_same_losses;
using zrepro_test::RunResult;

inline std::string scenario(const std::string& name, const std::string& file = "ds_config.json") {
  return zrepro_test::read_text(std::string(ZREPRO_SOURCE_DIR).append("/configs/scenarios/") + name + "/" + file);
}
inline RunResult run(const std::string& name, const std::string& cfg, const std::string& args) {
  return zrepro_test::zrepro_run(name, cfg, args);
}

using zrepro_test::bf16_matmul_scratch_bytes;  // tests/support/train_helpers.h

}  // namespace scenario_test
