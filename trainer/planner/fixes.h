// The usual fixes for a device OOM, each planned for the same run: activation
// checkpointing, half the micro-batch with twice the accumulation (the same global
// batch), ZeRO stage 3, optimizer offload to the host. Each comes back with the
// planner's verdict and peak, so the OOM hint and `zrepro plan` can say which fixes
// the planner predicts would fit, best first, instead of a fixed list.
#pragma once
#include <string>
#include <vector>

#include "trainer/planner/planner.h"

namespace zrepro {

struct FixPrediction {
  std::string fix;      // "activation checkpointing", "micro-batch 4 x gas 2", ...
  std::string flags;    // how to ask zrepro run for it ("--activation-checkpointing", ...)
  bool fits = false;
  int64_t peak_bytes = 0;
  double peak_share = 0;  // of the capacity
};

// The fixes that apply to req (one already in place is left out), planned; those that
// fit first, by peak. Empty without a capacity.
std::vector<FixPrediction> predict_fixes(const PlanRequest& req);

// "planner: fits with activation checkpointing (peak 76%), ...; not with ZeRO stage 3 (112%)".
std::string format_fixes(const std::vector<FixPrediction>& fixes);

}  // namespace zrepro
