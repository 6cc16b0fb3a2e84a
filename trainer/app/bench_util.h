// Timing helper shared by the `zrepro bench` subcommands: best of reps after one
// warm-up call (page faults, first touch), in seconds.
#pragma once
#include <algorithm>
#include <chrono>

namespace zrepro {

template <class F>
double best_seconds(int reps, F&& f) {
  f();
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace zrepro
