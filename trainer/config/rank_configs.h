// Do all ranks run the same config? Every rank's resolved config (DsConfig::resolved_json)
// is compared key by key at start-up; each key where a rank differs from the others is
// named with both values: "rank 1: gradient_accumulation_steps=2, others 1". Ranks that
// disagree issue different collective sequences and hang, so run.cpp prints these lines
// at start-up and writes them into summary.json and hang_report.json.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace zrepro {

// per_rank[r]: rank r's resolved config. Empty when every rank's is the same.
std::vector<std::string> config_mismatch(const std::vector<nlohmann::json>& per_rank);

}  // namespace zrepro
