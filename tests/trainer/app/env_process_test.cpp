// `zrepro env` / `zrepro --version` as a user runs them, and the same block in summary.json:
// every field present, the values this machine really has (LibTorch's version from its
// headers, the memlock limit from getrlimit, the BLAS alternative).
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <torch/torch.h>

#include "tests/support/process.h"
#include "trainer/app/env.h"

TEST(Env, JsonHasEveryFieldWithThisMachinesValues) {
  const auto r = zrepro_test::zrepro_cmd("env --json", 60, false);
  ASSERT_EQ(r.code, 0) << r.output;
  const auto e = nlohmann::json::parse(r.output);
  for (const char* k : {"zrepro", "libtorch", "blas", "mpi", "nccl", "cuda", "host", "cpu"}) EXPECT_TRUE(e.contains(k)) << k;
  EXPECT_EQ(e["libtorch"]["version"], std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) +
                                           "." + std::to_string(TORCH_VERSION_PATCH));
  // Issue 43: where that LibTorch came from, and the planner's tapes recorded from it.
  EXPECT_TRUE(e["libtorch"]["source"].is_string()) << e["libtorch"].dump();
  EXPECT_TRUE(e["libtorch"]["prefix"].is_string()) << e["libtorch"].dump();
  ASSERT_TRUE(e["libtorch"]["activation_tapes"].is_object()) << e["libtorch"].dump();
  EXPECT_EQ(e["libtorch"]["activation_tapes"]["libtorch"], e["libtorch"]["version"]);
  EXPECT_EQ(e["libtorch"]["activation_tapes"]["problems"], 0);
  EXPECT_FALSE(e["zrepro"]["commit"].get<std::string>().empty());
  EXPECT_NE(e["mpi"].get<std::string>().find("MPI"), std::string::npos) << e["mpi"];
  EXPECT_GT(e["host"]["memory_total_bytes"].get<int64_t>(), 0);
  rlimit lim{};
  ASSERT_EQ(getrlimit(RLIMIT_MEMLOCK, &lim), 0);
  if (lim.rlim_cur == RLIM_INFINITY) {
    EXPECT_EQ(e["host"]["memlock_limit_bytes"], "unlimited");
  } else {
    EXPECT_EQ(e["host"]["memlock_limit_bytes"].get<int64_t>(), static_cast<int64_t>(lim.rlim_cur));
  }
  EXPECT_GE(e["cpu"]["cores"].get<int>(), 1);
  // No GPU in CI: the block says why instead of failing.
  if (e["cuda"]["gpus"].empty()) {
    EXPECT_TRUE(e["cuda"]["note"].is_string()) << e["cuda"].dump();
  }
  // [Note: one environment type]: the JSON reads back as itself, and the human block is the type's text.
  const zrepro::Environment typed = zrepro::Environment::from_json(e);
  EXPECT_EQ(typed.to_json(), e) << nlohmann::json::diff(e, typed.to_json()).dump();
  const auto text = zrepro_test::zrepro_cmd("env", 60, false);
  ASSERT_EQ(text.code, 0) << text.output;
  for (const char* row : {"\n  libtorch.......... ", "\n  planner tapes..... recorded with LibTorch ", "\n  host memory....... ", "\n  cpu............... "})
    EXPECT_NE(text.output.find(row), std::string::npos) << row << "\n" << text.output;
}

TEST(Env, VersionLineAndHumanBlock) {
  const auto v = zrepro_test::zrepro_cmd("--version", 30, false);
  EXPECT_EQ(v.code, 0);
  EXPECT_EQ(v.output.rfind("zrepro ", 0), 0u) << v.output;
  EXPECT_NE(v.output.find("LibTorch"), std::string::npos);
  const auto h = zrepro_test::zrepro_cmd("env", 30, false);
  EXPECT_EQ(h.code, 0);
  for (const char* row : {"libtorch", "libtorch from", "planner tapes", "bf16 gemm", "blas", "memlock", "cpu", "gpu"})
    EXPECT_NE(h.output.find(row), std::string::npos) << row;
  EXPECT_EQ(zrepro_test::zrepro_cmd("env --no-such-flag").code, 2);
}

TEST(Env, SummaryJsonCarriesTheSameBlock) {
  const auto r = zrepro_test::zrepro_run("env_summary", R"({"train_micro_batch_size_per_gpu": 2})", "--model tiny --steps 1");
  ASSERT_EQ(r.code, 0) << r.output;
  ASSERT_TRUE(r.summary["env"].is_object());
  EXPECT_EQ(r.summary["env"]["libtorch"]["version"].get<std::string>().substr(0, 2),
            std::to_string(TORCH_VERSION_MAJOR) + ".");
  EXPECT_TRUE(r.summary["env"]["zrepro"].contains("commit"));
}

// [Note: OpenBLAS on a CPU it does not know]: `zrepro env` (like run) reports the kernel
// set a run uses; without OPENBLAS_CORETYPE it is the best the CPU allows, and a user's
// OPENBLAS_CORETYPE is kept as given.
TEST(Env, BlasKernelsAreTheBestTheCpuAllowsUnlessTheUserChose) {
  const std::string bin = ZREPRO_BIN;
  const auto mine = zrepro_test::shell("env -u OPENBLAS_CORETYPE -u ZREPRO_OPENBLAS_DETECTED " + bin + " env --json");
  ASSERT_EQ(mine.code, 0) << mine.output;
  const auto k = nlohmann::json::parse(mine.output)["blas_kernels"];
  if (k.is_null()) GTEST_SKIP() << "the BLAS is not OpenBLAS";
  const std::string best = zrepro::best_blas_core();
  EXPECT_GE(zrepro::blas_core_level(k["core"]), zrepro::blas_core_level(best)) << k.dump();
  if (k["set_by"] == "zrepro") {
    EXPECT_NE(k["core"], k["openblas_detected"]) << k.dump();
  }
  const auto user = zrepro_test::shell("env -u ZREPRO_OPENBLAS_DETECTED OPENBLAS_CORETYPE=PRESCOTT " + bin +
                                       " env --json");
  ASSERT_EQ(user.code, 0) << user.output;
  const auto u = nlohmann::json::parse(user.output)["blas_kernels"];
  EXPECT_EQ(u["core"], "Prescott") << u.dump();
  EXPECT_EQ(u["set_by"], "OPENBLAS_CORETYPE") << u.dump();
}
