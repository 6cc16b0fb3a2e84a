// zrepro's plan against real DeepSpeed's memory per phase on the CPU
// (conformance/results/cpu_phases.json, written by conformance/cpu_phases.py: DeepSpeed
// 0.19.8 training Hugging Face's own model classes on the CPU accelerator, every live
// tensor storage counted; a two-rank case has a row per rank, planned with --world-size 2
// --as-rank). Without DeepSpeed: today's `zrepro plan --device cpu` of every
// recorded case without offload is within 3% of DeepSpeed's peak in every phase, but for
// the gaps named in kCpuGaps, each held to its figure (it may close, not widen).
#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/plan_phases.h"

namespace {

using cpu_json = nlohmann::json;

constexpr double kCpuBand = 0.03;

struct CpuGap {
  const char* case_name;
  const char* phase;
  double error;  // (plan - DeepSpeed) / DeepSpeed, recorded
  const char* why;
};
// From the record's comparison (conformance/cpu_phases.py, 2026-12-06). At these short
// sequences (128-256 tokens) the backward is ruled by gradient and bucket buffers, not
// activations: the GPU record's longer sequences hid these differences. Closed since: stage
// 2's partition from the first bucket's result, the second partition of an accumulating
// micro-step without overlap_comm, the tied weight's gradients summed out of place, ZeRO-1's
// reduction at the end of the boundary micro-step's backward, ZeRO-3's gather of every
// parameter to hook it, the norm's fp64 copy of one gradient piece (two ranks, fp32 ZeRO-2).
const CpuGap kCpuGaps[] = {
    {"gpt2-fp32-z0", "init", -0.237,
     "transformers' from_config makes GPT-2's LM head weight before it ties it to the embedding (a construction "
     "transient of a randomly initialised model; docs/lab/GPU.md \"Replanned\")"},
};

const CpuGap* cpu_gap(const std::string& name, const std::string& phase) {
  for (const CpuGap& g : kCpuGaps)
    if (name == g.case_name && phase == g.phase) return &g;
  return nullptr;
}

cpu_json cpu_record() {
  std::ifstream in(std::string(ZREPRO_SOURCE_DIR).append("/conformance/results/cpu_phases.json"));
  return in ? cpu_json::parse(in) : cpu_json();
}

TEST(CpuPhases, TodaysPlanIsWithinThreePercentOfRealDeepSpeedInEveryPhase) {
  const cpu_json rec = cpu_record();
  ASSERT_TRUE(rec.is_object()) << "conformance/results/cpu_phases.json: DS_ACCELERATOR=cpu python "
                                  "conformance/cpu_phases.py --out conformance/results/cpu_phases.json";
  int compared = 0, two_rank_rows = 0, moe_rows = 0, recorded_rows = 0;
  for (const auto& c : rec["cases"]) {
    const std::string name = c["name"];
    // On the CPU accelerator DeepSpeed's host buffers (offload) are the same memory as its
    // "device" tensors, and the walk counts them together: recorded, not compared (the GPU
    // record compares the offload cases).
    const cpu_json& zero = c["ds_config"]["zero_optimization"];
    if (zero.contains("offload_optimizer") || zero.contains("offload_param")) continue;
    std::map<std::string, double> today = zrepro_test::plan_phases(c, "cpu");
    for (const auto& row : c["phases"]) {
      const std::string phase = row["phase"];
      const double m = row["peak_bytes"];
      ASSERT_TRUE(today.count(phase)) << name << " " << phase;
      const double e = (today[phase] - m) / m;
      if (const CpuGap* g = cpu_gap(name, phase)) {
        EXPECT_LE(std::abs(e), std::abs(g->error) + 0.005) << name << " " << phase << ": " << g->why;
      } else {
        EXPECT_LE(std::abs(e), kCpuBand) << name << " " << phase << ": today's plan " << today[phase]
                                         << " bytes, DeepSpeed's " << m << " (" << 100 * e << "%)";
      }
      ++compared;
      two_rank_rows += c.value("world_size", 1) == 2;
      moe_rows += name.rfind("mixtral", 0) == 0;
      recorded_rows += c["zrepro_flags"].dump().find(".tape.json") != std::string::npos;
    }
  }
  EXPECT_GE(compared, 4 * 27) << "at least 27 rows (a case's rank each) without offload, 4 phases each";
  EXPECT_GE(two_rank_rows, 4 * 12) << "each rank of at least 6 two-rank cases";
  EXPECT_GE(moe_rows, 4 * 4) << "a mixture of experts at stages 2 and 3, on one rank and two";
  // [Note: a recorded architecture]: Qwen3, Phi-3 and Gemma-2, planned from transformers' own
  // modules recorded under FakeTensorMode (conformance/results/recordings/).
  EXPECT_GE(recorded_rows, 4 * 4) << "four cases of architectures zrepro has no model of";
}

}  // namespace
