// [Note: one summary type] (trainer/report/summary.h): the type is the schema. Every kind
// of run's summary.json - completed, offloaded, out of memory at partition, refused config,
// numerically dead fp16, virtual ranks, scaled down, a 2-rank hang, a 2-rank OOM's merged
// views - goes through Summary::from_json and back to the same JSON, field for field; a
// field the type does not carry fails here with the JSON patch that is lost.
#include <gtest/gtest.h>

#include "tests/support/process.h"
#include "trainer/report/summary.h"

namespace {

struct Case {
  const char* name;
  const char* config;  // under the repository
  const char* args;
  int exit_code;
};

class SummaryType : public testing::TestWithParam<Case> {};

TEST_P(SummaryType, RoundTripsEveryRunsSummary) {
  const Case& c = GetParam();
  const std::string src = ZREPRO_SOURCE_DIR;
  const auto r = zrepro_test::zrepro_run(std::string("summary_type_") + c.name,
                                         zrepro_test::read_text(src + "/" + c.config), c.args);
  ASSERT_EQ(r.code, c.exit_code) << r.output;
  ASSERT_TRUE(r.summary.is_object()) << r.output;
  const zrepro::Summary s = zrepro::Summary::from_json(r.summary);
  const nlohmann::json back = s.to_json();
  EXPECT_EQ(back, r.summary) << "lost or changed: " << nlohmann::json::diff(r.summary, back).dump(1);
  EXPECT_EQ(s.status, r.summary["status"]);
  if (r.summary["memory"].is_object()) {
    ASSERT_NE(s.rank_memory(0), nullptr);
    EXPECT_EQ(s.peak_bytes() > 0, true);
  }
  // [Note: typed views of module-owned parts]: each view reads what its module wrote.
  EXPECT_EQ(s.planned().has_value(), r.summary["memory"].is_object() && r.summary["memory"]["planned"].is_object());
  if (const auto p = s.planned()) {
    EXPECT_EQ(p->peak_bytes, r.summary["memory"]["planned"]["peak_bytes"].get<int64_t>());
  }
  EXPECT_EQ(s.offloaded().has_value(), std::string(c.name) == "offload");
  if (const auto o = s.offloaded()) {
    ASSERT_FALSE(o->ranks.empty());
    EXPECT_GT(o->ranks[0].d2h_bytes, 0) << "gradients went down to the host";
    EXPECT_GT(o->ranks[0].h2d_bytes, 0) << "parameters came up from the host";
  }
  EXPECT_EQ(s.scaled().has_value(), std::string(c.name) == "scaled");
  if (const auto sd = s.scaled()) {
    EXPECT_EQ(sd->target_name, "gpt3-6.7b");
    EXPECT_GT(sd->parameter_factor, 100.0);
    EXPECT_EQ(sd->target_params / sd->toy_params, static_cast<int64_t>(sd->parameter_factor));
    EXPECT_FALSE(sd->fidelity.empty());
  }
  if (std::string(c.name) == "oom_two_ranks") {
    ASSERT_TRUE(s.failure && s.failure->views) << r.summary["failure"].dump();
    EXPECT_EQ(s.failure->views->reported.size() + s.failure->views->without_a_view.size(), 2u);
    EXPECT_EQ(s.failure->views->ranks.size(), s.failure->views->reported.size());
  }
}

INSTANTIATE_TEST_SUITE_P(
    Runs, SummaryType,
    testing::Values(Case{"ok", "configs/examples/stage0_fp32.json", "--steps 2", 0},
                    Case{"offload", "configs/examples/zero3_offload.json", "--steps 2", 0},
                    Case{"oom", "configs/scenarios/optimizer-partition-oom/ds_config.json",
                         "--model small --device-memory 48MB --steps 2", 3},
                    // Two processes that both run out: the merged summary of every rank's view.
                    Case{"oom_two_ranks", "configs/scenarios/optimizer-partition-oom/ds_config.json",
                         "--model small --device-memory 30MB --ranks 2 --steps 2", 3},
                    Case{"refused", "configs/examples/stage0_fp32.json", "--steps 2 --micro-batch 0", 2},
                    Case{"diverged", "configs/examples/stage0_fp32.json", "--steps 3 --inject inf-grad:0:1", 5},
                    Case{"virtual", "configs/examples/zero3_tiny.json", "--steps 2 --world-size 2", 0},
                    Case{"scaled", "configs/scenarios/zero2-params-dont-fit/ds_config.json",
                         "--target-model gpt3-6.7b --target-device-memory 40GB --activation-checkpointing --steps 2", 3},
                    Case{"hang", "configs/examples/stage0_fp32.json",
                         "--ranks 2 --zero-stage 2 --steps 3 --inject gas-mismatch:1 --comm-timeout 3", 4}),
    [](const testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

}  // namespace
