// `zrepro doctor` as a user runs it (its collective check starts 2 ranks): every line
// present with its level, a planned OOM fails with the planner's fixes (exit 10), and a
// lowered memlock limit fails the pinned-memory line with the fix.
#include <gtest/gtest.h>

#include <unistd.h>

#include "tests/support/process.h"

namespace {

}  // namespace

TEST(Doctor, MachineChecksPassAndAPlannedOomFailsWithItsFixes) {
  const std::string out = zrepro_test::fresh_dir("doctor");
  const auto plain = zrepro_test::zrepro_cmd("doctor --out " + out);
  EXPECT_EQ(plain.code, 0) << plain.output;
  for (const char* line : {"libraries", "config", "host link", "communication"})
    EXPECT_NE(plain.output.find(line), std::string::npos) << line << "\n" << plain.output;
  const auto oom = zrepro_test::zrepro_cmd("doctor --config " + zrepro_test::scenario_path("first-batch-activations") +
                                           " --model small --device-memory 120MB --out " + out);
  EXPECT_EQ(oom.code, 10) << oom.output;
  EXPECT_NE(oom.output.find("fail  device memory   planned OOM in phase forward"), std::string::npos) << oom.output;
  EXPECT_NE(oom.output.find("fits with activation checkpointing"), std::string::npos) << oom.output;
}

TEST(Doctor, ALowMemlockLimitFailsThePinnedMemoryLine) {
  const bool root = ::geteuid() == 0;
  if (root && zrepro_test::shell("setpriv --inh-caps=-ipc_lock --bounding-set=-ipc_lock true").code != 0)
    GTEST_SKIP() << "cannot drop CAP_IPC_LOCK here (setpriv missing)";
  const std::string drop = root ? "setpriv --inh-caps=-ipc_lock --bounding-set=-ipc_lock " : "";
  const auto r = zrepro_test::shell("sh -c 'ulimit -l 64 && " + drop + std::string(ZREPRO_BIN).append(" doctor --config ") +
                                    zrepro_test::scenario_path("memlock-limit") + " --out " + zrepro_test::fresh_dir("doctor_ml") + "' 2>&1");
  EXPECT_EQ(r.code, 10) << r.output;
  EXPECT_NE(r.output.find("fail  pinned memory"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("raise ulimit -l"), std::string::npos) << r.output;
}
