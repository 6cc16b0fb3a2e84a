// Helpers shared by the `zrepro bench` subcommands: the best of reps after one warm-up
// call (page faults, first touch), in seconds; a size checked against the host first.
#pragma once
#include <algorithm>
#include <chrono>
#include <string>

#include "device/base/errors.h"
#include "device/device_memory.h"
#include "trainer/app/env.h"

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

// [Note: a benchmark fits the host] A size is refused (exit 2, the flag and the value named)
// before anything is allocated when what the benchmark holds at once for it (`bytes`)
// passes this host's available memory: past it LibTorch's allocation ended the process
// (abort, exit 134), or the kernel's OOM killer would. `what` says what those bytes are.
inline void check_fits_host(const std::string& flag, const std::string& spec, double bytes, const std::string& what) {
  const int64_t available = meminfo_bytes("MemAvailable:");
  if (available <= 0 || bytes <= static_cast<double>(available)) return;  // not Linux: nothing to compare with
  throw ConfigError(flag + " " + spec + ": the benchmark holds about " + format_bytes(static_cast<int64_t>(std::min(bytes, 9e18))) +
                    " at once (" + what + "), this host has " + format_bytes(available) +
                    " available (MemAvailable); give a smaller size");
}

}  // namespace zrepro
