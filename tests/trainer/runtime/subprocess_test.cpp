// [Note: progress of a child] (trainer/runtime/subprocess.h): where a child run is, read
// from its log, and the line the waiting command prints.
#include <gtest/gtest.h>

#include <cstdlib>

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
  EXPECT_EQ(progress_line("side A on 2 rank(s)", {0, 50, ""}, 4), "[zrepro] side A on 2 rank(s): step 0/50, 4 s");
  // 20 of 50 steps in 12 s: 30 more at the same pace take 18 s.
  EXPECT_EQ(progress_line("the run to check", {20, 50, ""}, 12), "[zrepro] the run to check: step 20/50, 12 s, ETA 18 s");
  // Issue 60: a DeepSpeed release building its op before any step says so (as PyTorch's
  // cpp_extension logs it), and no longer once the op is loaded.
  const std::string build = "Using /root/.cache/torch_extensions as PyTorch extensions root...\n"
                            "Emitting ninja build file /root/.cache/torch_extensions/cpu_adam/build.ninja...\n"
                            "Building extension module cpu_adam...\n"
                            "Allowing ninja to set a default number of workers...\n[1/3] c++ -MMD -MF cpu_adam.o.d\n";
  EXPECT_EQ(progress_line("DeepSpeed 0.17.6 on 2 rank(s)", child_steps(build), 95),
            "[zrepro] DeepSpeed 0.17.6 on 2 rank(s): building the cpu_adam extension, 95 s");
  EXPECT_EQ(child_steps(build + "Loading extension module cpu_adam...\nTime to load cpu_adam op: 2.4 seconds\n").activity, "");
}

// run_program (zrepro bisect's DeepSpeed runs): the program is looked up on PATH, gets the
// extra environment, writes into the log, and its exit code comes back; a program that
// does not exist is 127 with the reason in the log.
TEST(RunProgram, RunsAProgramWithItsEnvironmentIntoTheLog) {
  const std::string log = testing::TempDir() + "/zrepro_run_program.log";
  EXPECT_EQ(run_program({"sh", "-c", "echo \"got $ZREPRO_TEST_VALUE\"; exit 3"}, {{"ZREPRO_TEST_VALUE", "bar"}}, log), 3);
  EXPECT_NE(tail_of(log, 2).find("got bar"), std::string::npos) << tail_of(log, 4);
  EXPECT_EQ(std::getenv("ZREPRO_TEST_VALUE"), nullptr);  // the child's environment only
  EXPECT_EQ(run_program({"/nonexistent/python3", "-c", "pass"}, {}, log), 127);
  EXPECT_NE(tail_of(log, 2).find("cannot start /nonexistent/python3"), std::string::npos) << tail_of(log, 4);
}
