// The usual fixes for a device OOM, each planned for the same run: activation
// checkpointing, half the micro-batch with twice the accumulation (the same global
// batch), ZeRO stage 3, optimizer offload to the host, buckets a tenth the size,
// fewer stage-3 live parameters. Each comes back with the planner's verdict and peak,
// so the OOM hint and `zrepro plan` can say which fixes the planner predicts would
// fit, best first, instead of a fixed list; and with the change itself, as a JSON
// merge patch (RFC 7386) on the DeepSpeed config or as run flags, so `zrepro
// diagnose --write-scenario` can write each as a fix config to verify.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainer/planner/planner.h"

namespace zrepro {

struct FixPrediction {
  std::string fix;      // "activation checkpointing", "micro-batch 4 x gas 2", ...
  std::string flags;    // how to ask zrepro run for it ("--activation-checkpointing", ...)
  bool fits = false;
  int64_t peak_bytes = 0;
  double peak_share = 0;  // of the capacity
  nlohmann::json config_patch;     // merge patch on ds_config.json; null: the fix is a flag
  std::vector<std::string> args;   // zrepro run flags the fix needs (activation checkpointing)
  nlohmann::json to_json() const;
};

// The fixes that apply to req (one already in place is left out), planned; those that
// fit first, by peak. Empty without a capacity.
std::vector<FixPrediction> predict_fixes(const JobSpec& req);

// "planner: fits with activation checkpointing (peak 76%), ...; not with ZeRO stage 3 (112%)".
std::string format_fixes(const std::vector<FixPrediction>& fixes);

}  // namespace zrepro
