// The step boundary's stop check across real processes (trainer/runtime/liveness.h).
// The outer test starts this binary under `mpirun -np 2` with ZREPRO_LIVENESS_RANKS set;
// the inner test then runs as the two ranks.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "device/base/errors.h"
#include "tests/support/process.h"
#include "trainer/runtime/liveness.h"
#include "zero/comm/mpi_communicator.h"

namespace {

bool inner() { return std::getenv("ZREPRO_LIVENESS_RANKS") != nullptr; }

}  // namespace

// [Note: a rank that vanished]: rank 0 waits at the step boundary for a peer that never
// comes (it died between its last collective and the boundary). The watcher's interrupt
// must end that wait too; the boundary's agreement used to be a blocking MPI_Allreduce,
// where the survivor sat until mpirun's SIGKILL and wrote no summary (CI, stop 46).
TEST(LivenessUnderMpi, InterruptEndsAWaitAtTheStepBoundary) {
  if (!inner()) GTEST_SKIP() << "run by Liveness.InterruptEndsAWaitAtTheStepBoundary under mpirun";
  zrepro::mpi_init(nullptr, nullptr);
  zrepro::MpiCommunicator comm;
  if (comm.rank() == 1) {  // never reaches the boundary
    std::this_thread::sleep_for(std::chrono::seconds(3));
    std::fflush(nullptr);
    std::_Exit(0);
  }
  std::thread interrupter([&comm] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    comm.interrupt(SIGTERM, "rank 1 vanished (test)");
  });
  const auto t0 = std::chrono::steady_clock::now();
  std::string what;
  try {
    zrepro::stop_at_boundary(&comm, {}, 0);
  } catch (const zrepro::Interrupted& e) {
    what = e.what();
  }
  interrupter.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("boundary wait ended after %.2f s: %s\n", s, what.c_str());
  std::fflush(nullptr);
  std::_Exit(0);  // no MPI_Finalize: a request is open (mpirun then reports an improper exit)
}

TEST(Liveness, InterruptEndsAWaitAtTheStepBoundary) {
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  ASSERT_GT(n, 0);
  const auto r = zrepro_test::shell("ZREPRO_LIVENESS_RANKS=1 timeout -k 5 60 mpirun -np 2 --oversubscribe --bind-to none " +
                                    std::string(exe, n) + " --gtest_filter=LivenessUnderMpi.* 2>&1");
  // Rank 0 prints its line only if the wait ended; before rank 1's exit ends the job.
  EXPECT_NE(r.output.find("boundary wait ended after"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 1 vanished (test)"), std::string::npos) << r.output;
}
