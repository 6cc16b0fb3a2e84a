// [Note: OpenBLAS on a CPU it does not know] (trainer/app/env.h): this process (the
// tests' main made the same check `zrepro run` makes) runs OpenBLAS kernels for the
// best instruction set the CPU allows, not OpenBLAS's fallback for a model it does not know.
#include <gtest/gtest.h>

#include <cstdlib>

#include "trainer/app/env.h"

using namespace zrepro;

TEST(Env, KernelSetLevelsFollowTheInstructionSet) {
  EXPECT_EQ(blas_core_level("Prescott"), 0);
  EXPECT_EQ(blas_core_level("Sandybridge"), 1);
  EXPECT_EQ(blas_core_level("Haswell"), 2);
  EXPECT_EQ(blas_core_level("Zen"), 2);
  EXPECT_EQ(blas_core_level("SkylakeX"), 3);
  EXPECT_EQ(blas_core_level("COOPERLAKE"), 3);
}

TEST(Env, OpenBlasRunsTheKernelsThisCpuAllows) {
  const std::string core = blas_core();
  if (core.empty()) GTEST_SKIP() << "the BLAS is not OpenBLAS";
  if (std::getenv("OPENBLAS_CORETYPE") && !std::getenv("ZREPRO_OPENBLAS_DETECTED"))
    GTEST_SKIP() << "OPENBLAS_CORETYPE was set before the tests started: the user's choice stands";
  EXPECT_GE(blas_core_level(core), blas_core_level(best_blas_core()))
      << "OpenBLAS runs " << core << " kernels; this CPU allows " << best_blas_core();
}
