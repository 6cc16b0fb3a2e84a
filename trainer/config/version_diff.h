// `zrepro config --config X --diff-versions A B`: which effective values of one config
// differ when DeepSpeed release A and release B resolve it, and what each difference does
// (the version table's effect: memory, speed, numerics, a refusal), with the release and PR
// that made it. A config one release refuses is a difference too (its message).
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "trainer/config/ds_config.h"

namespace zrepro {

// flags: the run's config flags (world size, autos); their deepspeed_version is replaced.
// {"a", "b", "refused": {"a": msg|null, "b": msg|null}, "differences": [{"key", "a": {value,
//  source, note}, "b": {...}, "changes": [{kind, since, pr, effect}]}], "warnings": {"a", "b"}}
nlohmann::json diff_config_versions(const std::string& path, ConfigFlags flags, const std::string& a,
                                    const std::string& b);
std::string format_version_diff(const nlohmann::json& diff);

}  // namespace zrepro
