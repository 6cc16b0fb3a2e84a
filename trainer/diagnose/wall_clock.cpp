// See wall_clock.h.
#include "trainer/diagnose/wall_clock.h"

#include <algorithm>
#include <cstdio>

namespace zrepro {

void WallClock::add(double forward_s, double backward_s, double comm_wait_s, double optimizer_s) {
  fwd += forward_s, bwd += backward_s, allreduce += std::min(comm_wait_s, backward_s), step += optimizer_s;
}

std::string WallClock::line_and_reset() {
  auto ms = [](double s) {
    char b[32];
    std::snprintf(b, sizeof b, "%.2f", 1000 * s);
    return std::string(b);
  };
  const std::string l = "[Rank 0] time (ms) | fwd: " + ms(fwd) + " | bwd: " + ms(bwd) + " | bwd_inner: " +
                        ms(bwd - allreduce) + " | bwd_allreduce: " + ms(allreduce) + " | step: " + ms(step);
  *this = WallClock{};
  return l;
}

}  // namespace zrepro
