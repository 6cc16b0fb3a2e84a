// The usual fixes for a device OOM, each planned for the same run: activation
// checkpointing, half the micro-batch with twice the accumulation (the same global
// batch), ZeRO stage 3, optimizer offload to the host, buckets a tenth the size,
// fewer stage-3 live parameters. Each comes back with the planner's verdict and peak,
// so the OOM hint and `zrepro plan` can say which fixes the planner predicts would
// fit, best first, instead of a fixed list; and with the change itself, as a JSON
// merge patch (RFC 7386) on the DeepSpeed config or as run flags, so `zrepro
// diagnose --write-scenario` can write each as a fix config to verify.
//
// [Note: fixes a user can apply] A fix that changes nothing the planner can see (its
// peak is the run's own) is left out. When no fix fits alone, pairs are planned (each
// pair's patches merged, flags joined). Each fix says what it costs and, where the
// Hugging Face Trainer has the knob, how a Trainer user spells it; recommended_fix picks
// the cheapest that fits (cost order below), not the lowest peak.
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
  std::string trainer_args;        // the Trainer's spelling ("gradient_checkpointing=True"); "" : the config's
  std::string cost;                // what it costs ("about a third more compute: ...")
  int cost_rank = 0;               // cheaper first: 1 (buckets) .. 6 (optimizer offload); a pair: the sum
  int parts = 1;                   // 2: two fixes together (none fitted alone)
  nlohmann::json to_json() const;
  static FixPrediction from_json(const nlohmann::json& j);  // nlohmann::json::exception on a wrong shape
};

// The fixes that apply to req (one already in place is left out), planned; those that
// fit first, by peak. Empty without a capacity.
std::vector<FixPrediction> predict_fixes(const JobSpec& req);

// The cheapest fix that fits (cost_rank, then peak); nullptr when none fits.
const FixPrediction* recommended_fix(const std::vector<FixPrediction>& fixes);

// "planner: fits with activation checkpointing (peak 76%), ...; not with ZeRO stage 3 (112%);
// recommended: ... (cost)".
std::string format_fixes(const std::vector<FixPrediction>& fixes);
// One block per fix for `zrepro plan`: verdict, peak, cost, the run flags, the Trainer's
// spelling and the ready JSON patch.
std::string format_fix_details(const std::vector<FixPrediction>& fixes);

}  // namespace zrepro
