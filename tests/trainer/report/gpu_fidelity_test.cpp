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
  const std::string dir = std::string(ZREPRO_SOURCE_DIR).append("/conformance/results/gpu");
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

// [Note: a verdict inside the band]: real DeepSpeed's peak lies in plan / (1 + error) over
// the band's errors; a capacity inside that range is not called either way.
TEST(GpuFidelity, ACapacityInsideTheBandIsNotCalled) {
  GpuFidelity f;
  f.peak = {-0.05, 0.10};  // the plan 5% under to 10% over real DeepSpeed
  const BandCall in = band_call(f, {100.0, 95.0, 0, false});
  EXPECT_NEAR(in.deepspeed_low, 100.0 / 1.10, 1e-9);
  EXPECT_NEAR(in.deepspeed_high, 100.0 / 0.95, 1e-9);
  EXPECT_TRUE(in.inside);
  EXPECT_NE(in.text().find("too close to call"), std::string::npos) << in.text();
  const BandCall fits = band_call(f, {100.0, 110.0, 0, false});
  EXPECT_FALSE(fits.inside);
  EXPECT_NE(fits.text().find("fits beyond the band's error"), std::string::npos) << fits.text();
  const BandCall oom = band_call(f, {100.0, 80.0, 0, false});
  EXPECT_FALSE(oom.inside);
  EXPECT_NE(oom.text().find("out of memory beyond the band's error"), std::string::npos) << oom.text();
  // What summary.json and ab.json carry reads back as itself.
  const BandCall back = BandCall::from_json(in.to_json());
  EXPECT_EQ(back.inside, in.inside);
  EXPECT_DOUBLE_EQ(back.deepspeed_high, in.deepspeed_high);
}

// [Note: a verdict inside the band] on a GPU, where the capacity binds on reserved bytes: a
// capacity above the allocated range but inside the reserved one is not called where the
// plan's own replay is at the allocator's edge (it flushes or runs out); elsewhere it is
// called "fits", saying real DeepSpeed may flush its cache. Above both it fits, below the
// allocated range's low end it is an OOM.
TEST(GpuFidelity, OnAGpuTheReservedBandIsCalledAtTheAllocatorsEdge) {
  GpuFidelity f;
  f.peak = {-0.03, 0.03};
  f.reserved_peak = std::make_pair(-0.15, 0.05);  // the replay 15% under to 5% over real reserved peaks
  const BandCall edge = band_call(f, {100.0, 110.0, 105.0, true});
  EXPECT_NEAR(edge.reserved_low, 105.0 / 1.05, 1e-9);
  EXPECT_NEAR(edge.reserved_high, 105.0 / 0.85, 1e-9);
  EXPECT_TRUE(edge.inside) << edge.text();
  EXPECT_NE(edge.text().find("at its edge"), std::string::npos) << edge.text();
  const BandCall no_flush = band_call(f, {100.0, 110.0, 105.0, false});
  EXPECT_FALSE(no_flush.inside) << no_flush.text();
  EXPECT_NE(no_flush.text().find("may flush PyTorch's cache"), std::string::npos) << no_flush.text();
  EXPECT_FALSE(band_call(f, {100.0, 110.0, 0, false}).inside) << "binding on allocated bytes, 110 is past the band";
  const BandCall fits = band_call(f, {100.0, 130.0, 105.0, true});
  EXPECT_FALSE(fits.inside);
  EXPECT_EQ(fits.text().find("flush"), std::string::npos) << fits.text();
  EXPECT_NE(fits.text().find("fits beyond the band's error"), std::string::npos) << fits.text();
  const BandCall oom = band_call(f, {100.0, 90.0, 105.0, true});
  EXPECT_FALSE(oom.inside);
  EXPECT_NE(oom.text().find("out of memory beyond the band's error"), std::string::npos) << oom.text();
  const BandCall back = BandCall::from_json(edge.to_json());
  EXPECT_DOUBLE_EQ(back.reserved_high, edge.reserved_high);
  EXPECT_DOUBLE_EQ(back.planned_reserved, 105.0);
  EXPECT_TRUE(back.allocator_edge);
}
