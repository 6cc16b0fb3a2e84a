// A recorded case planned again by today's `zrepro plan` (the GPU and CPU records' tests):
// the case's DeepSpeed config written to a fresh folder, its zrepro flags (configs/...
// paths taken from the source tree), and each phase's peak (zrepro's partition phase
// counts as init, as conformance/gpu/fidelity.py counts it) with the run's as "peak".
#pragma once
#include <algorithm>
#include <fstream>
#include <map>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/process.h"

namespace zrepro_test {

inline std::map<std::string, double> plan_phases(const nlohmann::json& c, const std::string& device) {
  const std::string dir = fresh_dir("replan_" + device + "_" + c["name"].get<std::string>());
  std::ofstream(dir + "/ds.json") << c["ds_config"].dump();
  std::string flags;
  for (const auto& f : c["zrepro_flags"]) {
    const std::string s = f.get<std::string>();
    const bool in_tree = s.rfind("configs/", 0) == 0 || s.rfind("conformance/", 0) == 0;
    flags += " " + (in_tree ? std::string(ZREPRO_SOURCE_DIR).append("/") + s : s);
  }
  const auto p = zrepro_cmd("plan --device " + device + " --steps 3 --json --config " + dir + "/ds.json" + flags, 60,
                            /*keep_stderr=*/false);
  EXPECT_EQ(p.code, 0) << c["name"] << "\n" << p.output;
  std::map<std::string, double> today;
  if (p.code != 0) return today;
  const nlohmann::json plan = nlohmann::json::parse(p.output);  // alive through the loop
  for (const auto& ph : plan["phases"]) {
    const std::string name = ph["phase"] == "partition" ? "init" : ph["phase"].get<std::string>();
    today[name] = std::max(today[name], ph["peak_bytes"].get<double>());
    today["peak"] = std::max(today["peak"], ph["peak_bytes"].get<double>());
  }
  today["reserved_peak"] = plan["caching_allocator"]["reserved_peak_bytes"].get<double>();
  return today;
}

}  // namespace zrepro_test
