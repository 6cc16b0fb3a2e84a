// The test binaries' main: GoogleTest's, after the BLAS kernel check every zrepro
// process makes first ([Note: OpenBLAS on a CPU it does not know], trainer/app/env.h),
// so in-process tests run LibTorch at the speed `zrepro run` does.
//
// [Note: one temporary folder per test process] Tests write under testing::TempDir()
// (fresh_dir, tests/support/process.h), which is $TEST_TMPDIR, else /tmp. Two test runs on
// one machine (two CI jobs on a busy runner, a developer's ctest beside a clean-clone
// check) would then share /tmp/zrepro_<name> and overwrite each other's files mid-test.
// Unless TEST_TMPDIR is given, each test process gets its own $TMPDIR/zrepro-test-<pid>/,
// removed when every test passed and kept (and named) when one failed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>

#include "trainer/app/env.h"

namespace {

// The folder this process made for its tests ("" when TEST_TMPDIR was the caller's).
// The marker survives ensure_blas_kernels' re-exec of this process.
std::string own_test_tmpdir() {
  const char* owned = std::getenv("ZREPRO_TEST_TMPDIR_OWNED");
  const char* given = std::getenv("TEST_TMPDIR");
  if (owned && given && std::string(owned) == given) return given;
  if (given && *given) return "";
  const char* tmp = std::getenv("TMPDIR");
  const std::string dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/zrepro-test-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  ::setenv("TEST_TMPDIR", dir.c_str(), 1);
  ::setenv("ZREPRO_TEST_TMPDIR_OWNED", dir.c_str(), 1);
  return dir;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = own_test_tmpdir();
  zrepro::ensure_blas_kernels(argv);
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  if (!dir.empty()) {
    std::error_code ec;
    if (rc == 0) std::filesystem::remove_all(dir, ec);
    else std::cerr << "[zrepro tests] files of this run kept in " << dir << "\n";
  }
  return rc;
}
