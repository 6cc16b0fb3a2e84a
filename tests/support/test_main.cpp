// The test binaries' main: GoogleTest's, after the BLAS kernel check every zrepro
// process makes first ([Note: OpenBLAS on a CPU it does not know], trainer/app/env.h),
// so in-process tests run LibTorch at the speed `zrepro run` does.
#include <gtest/gtest.h>

#include "trainer/app/env.h"

int main(int argc, char** argv) {
  zrepro::ensure_blas_kernels(argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
