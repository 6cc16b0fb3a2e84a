// trainer/report/gpu_fidelity.h on the repository's GPU record: the ranges `zrepro plan`
// prints under every plan are the record's own figures (recomputed here from its cases),
// and a folder without records gives none.
#include "trainer/report/gpu_fidelity.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

using namespace zrepro;
using json = nlohmann::json;

TEST(GpuFidelity, TheRangesAreTheRecordsOwnFigures) {
  const std::string dir = std::string(ZREPRO_SOURCE_DIR) + "/conformance/results/gpu";
  const auto f = load_gpu_fidelity(dir);
  ASSERT_TRUE(f.has_value());
  std::ifstream in(f->record);
  const json rec = json::parse(in);
  double lo = 1e9, hi = -1e9, step_lo = 1e9;
  int cases = 0;
  for (const auto& c : rec["cases"]) {
    double plan = 0, ds = 0;
    for (const auto& r : c["phases"]) {
      if (r["deepspeed"].is_null()) continue;
      plan = std::max(plan, r["plan"].get<double>());
      ds = std::max(ds, r["deepspeed"].get<double>());
      if (r["phase"] == "step") step_lo = std::min(step_lo, r["plan_vs_deepspeed"].get<double>());
    }
    if (ds == 0) continue;
    lo = std::min(lo, plan / ds - 1), hi = std::max(hi, plan / ds - 1);
    ++cases;
  }
  EXPECT_EQ(f->cases, cases);
  EXPECT_NEAR(f->peak.first, lo, 1e-12);
  EXPECT_NEAR(f->peak.second, hi, 1e-12);
  EXPECT_NEAR(f->by_phase.at("step").first, step_lo, 1e-12);
  EXPECT_EQ(f->deepspeed, "0.19.8");
  const std::string text = format_gpu_fidelity(*f);
  EXPECT_NE(text.find("over " + std::to_string(cases) + " cases"), std::string::npos) << text;
  EXPECT_NE(text.find("NVIDIA H200"), std::string::npos) << text;
  EXPECT_FALSE(load_gpu_fidelity(testing::TempDir() + "/no_records_here").has_value());
}
