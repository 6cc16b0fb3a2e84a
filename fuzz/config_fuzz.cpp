// libFuzzer target: the config loader and the `zrepro run` flag parser, as a user's
// input reaches them. An input is one line of flags, then the DeepSpeed config text.
// Both may refuse it (ConfigError: exit 2 in the binary); anything else that escapes
// (another exception, a crash, a sanitizer report) is a bug. Built by scripts/fuzz.sh
// (clang, -DZREPRO_FUZZ=ON, ASan + UBSan); results in docs/lab/ROBUSTNESS.md.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "device/base/errors.h"
#include "trainer/app/run_spec.h"
#include "trainer/config/ds_config.h"
#include "trainer/config/model_spec.h"

namespace {

std::vector<std::string> words(const std::string& line) {
  std::vector<std::string> out{"run"};
  std::istringstream in(line);
  for (std::string w; in >> w && out.size() < 64;) out.push_back(w);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nl = input.find('\n');
  const std::string flags = nl == std::string::npos ? "" : input.substr(0, nl);
  const std::string config = nl == std::string::npos ? input : input.substr(nl + 1);
  using zrepro::ConfigError;
  zrepro::RunSpec spec;
  try {
    std::vector<std::string> args = words(flags);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    std::ostringstream quiet;  // --help prints: keep the fuzzer's output readable
    std::streambuf* old = std::cout.rdbuf(quiet.rdbuf());
    try {
      zrepro::parse_run_spec(static_cast<int>(argv.size()), argv.data(), spec);
    } catch (...) {
      std::cout.rdbuf(old);
      throw;
    }
    std::cout.rdbuf(old);
  } catch (const ConfigError&) {
    spec = zrepro::RunSpec{};  // refused flags: still load the config with the defaults
  }
  try {
    zrepro::ModelSpec model = zrepro::resolve_model(spec.model, spec.model_overrides);
    zrepro::ConfigFlags f = spec.flags;
    f.hidden_size = model.hidden;
    f.world_size = spec.world_size.value_or(1);
    f.total_steps = spec.steps;
    const zrepro::DsConfig cfg = zrepro::parse_ds_config(config, "fuzz.json", f);
    (void)cfg.effective_json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  } catch (const ConfigError&) {
  }
  return 0;
}
