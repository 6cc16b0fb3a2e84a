// DeepSpeed's global timer line ("[Rank 0] time (ms) | fwd: .. | bwd: .."), written by
// `zrepro run` and read by diagnose: one format in one place.
#pragma once
#include <string>

namespace zrepro {

// [Note: wall_clock_breakdown] With "wall_clock_breakdown": true `zrepro run`'s rank 0
// prints DeepSpeed's global timer line at each print boundary, summed since the last one
// (DeepSpeed resets its timers when it logs them): "[Rank 0] time (ms) | fwd: .. | bwd: ..
// | bwd_inner: .. | bwd_allreduce: .. | step: ..". zrepro's figures: fwd and bwd are the
// micro-steps' forward and backward, bwd_allreduce the part of bwd blocked in collectives
// (the step's comm_wait, at most bwd), bwd_inner the rest, step the optimizer step (with
// offload: the host Adam and the copies). diagnose reads the same line (its "wall_clock"
// fingerprint, evidence.cpp) from DeepSpeed's logs and zrepro's: one format, one place.
struct WallClock {
  double fwd = 0, bwd = 0, allreduce = 0, step = 0;
  void add(double forward_s, double backward_s, double comm_wait_s, double optimizer_s);
  std::string line_and_reset();  // the line, then zero
};

}  // namespace zrepro
