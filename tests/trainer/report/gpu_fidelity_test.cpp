// trainer/report/gpu_fidelity.h on the repository's GPU record: the ranges `zrepro plan`
// prints under every plan are the replan's own figures (today's planner on the record's
// cases against its measured DeepSpeed figures, recomputed here from its rows), and a
// folder without records gives none.
#include "trainer/report/gpu_fidelity.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

using namespace zrepro;
using json = nlohmann::json;

TEST(GpuFidelity, TheRangesAreTheReplansOwnFigures) {
  const std::string dir = std::string(ZREPRO_SOURCE_DIR) + "/conformance/results/gpu";
  const auto f = load_gpu_fidelity(dir);
  ASSERT_TRUE(f.has_value());
  ASSERT_FALSE(f->replan.empty()) << "the record has a replan beside it (conformance/gpu/fidelity.py replan --json)";
  std::ifstream in(f->replan);
  const json rep = json::parse(in);
  double lo = 1e9, hi = -1e9, step_lo = 1e9;
  int cases = 0;
  for (const auto& r : rep["rows"]) {
    const double e = r["plan_vs_deepspeed"];
    if (r["phase"] == "peak") lo = std::min(lo, e), hi = std::max(hi, e), ++cases;
    if (r["phase"] == "step") step_lo = std::min(step_lo, e);
  }
  EXPECT_EQ(f->cases, cases);
  EXPECT_NEAR(f->peak.first, lo, 1e-12);
  EXPECT_NEAR(f->peak.second, hi, 1e-12);
  EXPECT_NEAR(f->by_phase.at("step").first, step_lo, 1e-12);
  EXPECT_EQ(f->deepspeed, "0.19.8");
  const std::string text = format_gpu_fidelity(*f);
  EXPECT_NE(text.find("over " + std::to_string(cases) + " cases"), std::string::npos) << text;
  EXPECT_NE(text.find("replanned " + f->replanned), std::string::npos) << text;
  EXPECT_NE(text.find("NVIDIA H200"), std::string::npos) << text;
  EXPECT_FALSE(load_gpu_fidelity(testing::TempDir() + "/no_records_here").has_value());
}
