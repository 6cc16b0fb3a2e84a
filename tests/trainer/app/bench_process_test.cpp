// `zrepro bench copy` as a user runs it: pinned vs pageable, both directions, overlap.
#include <gtest/gtest.h>

#include <atomic>

#include "device/device_memory.h"
#include "offload/copy_engine.h"
#include "offload/host_memory.h"
#include "offload/optimizer_offload.h"
#include "tests/support/train_helpers.h"
#include "tests/support/process.h"
#include "trainer/config/ds_config.h"
#include "trainer/config/model_spec.h"
#include "trainer/loop/train.h"

using namespace zrepro;
using zrepro_test::expect_same_losses;
using zrepro_test::train_tiny;

TEST(Bench, CopyReportsPinnedPageableAndOverlap) {
  auto p = zrepro_test::zrepro_cmd("bench copy --sizes 256K --reps 1 --host-link-gbps 8 --json", 120, false);
  ASSERT_EQ(p.code, 0) << p.output;
  const nlohmann::json rows = nlohmann::json::parse(p.output);
  ASSERT_EQ(rows.size(), 3u);  // d2h, h2d, overlap
  for (int i = 0; i < 2; ++i) {
    for (const char* k : {"pinned_gbps", "pageable_gbps", "memcpy_gbps"}) EXPECT_GT(rows[i][k].get<double>(), 0) << k;
    // The link model bounds the pinned bandwidth; pageable runs at half of it.
    EXPECT_LE(rows[i]["pinned_gbps"].get<double>(), 8.0 * 1.01);
    EXPECT_LE(rows[i]["pageable_gbps"].get<double>(), 4.0 * 1.01);
  }
  EXPECT_GE(rows[2]["overlap"]["overlap_efficiency"].get<double>(), 0);
}

// Issue 61 item 5, [Note: a benchmark fits the host]: a size past this host's memory
// aborted in LibTorch's allocation (exit 134); it is refused before anything is allocated.
TEST(Bench, ASizePastThisHostIsRefusedBeforeItAllocates) {
  for (const std::string cmd : {"bench copy --sizes 1M,2T --reps 1", "bench adam --sizes 1T --reps 1",
                                "bench comm --max-bytes 2T --iters 1"}) {
    const auto p = zrepro_test::zrepro_cmd(cmd, 60);
    EXPECT_EQ(p.code, 2) << cmd << "\n" << p.output;
    EXPECT_NE(p.output.find("available (MemAvailable); give a smaller size"), std::string::npos) << cmd << "\n" << p.output;
    EXPECT_EQ(p.output.find("# zrepro bench"), std::string::npos) << "nothing ran first: " << p.output;
  }
}
