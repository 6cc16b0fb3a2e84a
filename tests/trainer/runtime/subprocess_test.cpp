// [Note: progress of a child] (trainer/runtime/subprocess.h): where a child run is, read
// from its log, and the line the waiting command prints.
#include <gtest/gtest.h>

#include "trainer/runtime/subprocess.h"

using namespace zrepro;

TEST(ChildProgress, TheLastStepLineOfTheLogSaysWhereTheChildIs) {
  EXPECT_EQ(child_steps("").total, 0);
  EXPECT_EQ(child_steps("[zrepro] world_size=2 zero_stage=1\n").total, 0);
  const ChildSteps s = child_steps(
      "[zrepro] step=10/50 loss=4.1 grad_norm=1\n[deepspeed] step=20, skipped=0\n[zrepro] step=20/50 loss=3.9\n");
  EXPECT_EQ(s.done, 20);
  EXPECT_EQ(s.total, 50);
  // A line cut by the read, or nonsense, is no progress.
  EXPECT_EQ(child_steps("[zrepro] step=").total, 0);
  EXPECT_EQ(child_steps("[zrepro] step=60/50").total, 0);
}

TEST(ChildProgress, TheLineSaysTheStepTheTimeAndAnEta) {
  EXPECT_EQ(progress_line("side A on 2 rank(s)", {}, 3.2), "[zrepro] side A on 2 rank(s): starting, 3 s");
  EXPECT_EQ(progress_line("side A on 2 rank(s)", {0, 50}, 4), "[zrepro] side A on 2 rank(s): step 0/50, 4 s");
  // 20 of 50 steps in 12 s: 30 more at the same pace take 18 s.
  EXPECT_EQ(progress_line("the run to check", {20, 50}, 12), "[zrepro] the run to check: step 20/50, 12 s, ETA 18 s");
}
