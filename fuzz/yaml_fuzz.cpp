// libFuzzer target: the accelerate config reader (`--accelerate-config FILE`, YAML as
// `accelerate config` writes it, or its JSON form), as a user's file reaches it. An input is
// the file's bytes: it is read (parse_accelerate_config: JSON, else YAML through yaml-cpp,
// bounded in depth and values), and a file it accepts builds the DeepSpeed config the
// plugin fills, under the Trainer and alone. A refusal (ConfigError: exit 2 in the binary)
// is the answer to a bad file; anything else that escapes (another exception, a crash, a
// sanitizer report, an alias that expands without bound) is a bug. Built by
// scripts/fuzz.sh yaml (clang, -DZREPRO_FUZZ=ON, ASan + UBSan); results in
// docs/lab/ROBUSTNESS.md.
#include <cstddef>
#include <cstdint>
#include <string>

#include "device/base/errors.h"
#include "trainer/config/accelerate_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const zrepro::AccelerateConfig a = zrepro::parse_accelerate_config("fuzz.yaml", text);
    for (const bool trainer : {true, false})
      (void)a.inline_ds_config(trainer).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    (void)a.source("zero_stage");
  } catch (const zrepro::ConfigError&) {
  }
  return 0;
}
