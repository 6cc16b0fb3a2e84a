// From a diagnosis to a ready reproduction (`zrepro diagnose LOG --config ... --write-scenario
// DIR`): a scenario folder in the catalogue's format (scenario.h) whose side A is the user's
// own DeepSpeed config and whose fixes are candidate fix configs derived from it.
//   - how to reproduce comes from the matched catalogue scenario (its injections, expected
//     outcome, the line users grep for, its run length);
//   - the scale is the user's: an OOM runs as a scale-down of --model on the job's device
//     capacity (--device-memory, else the capacity the OOM message printed) at the job's
//     world size; other failures keep the catalogue's toy and take the job's world size;
//   - the fixes: for an OOM, the planner's (`zrepro plan --json` "fixes", each a merge
//     patch on the config or run flags), those it predicts to fit first; for the config,
//     numerics and pinned-memory checkpoints, the edit that removes the cause; where the
//     cause is not in the config (a rank's extra micro-step, a straggler, varying sequence
//     lengths), the catalogue's fix flags.
// build_reproduction is pure; write_reproduction writes the folder whole or not at all.
// With --run, [Note: a reproduction this machine can run] and [Note: a reproduction the
// log tells apart] decide how and whether it runs.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainer/diagnose/diagnose.h"
#include "trainer/planner/fixes.h"
#include "trainer/report/summary.h"

namespace zrepro {

// What diagnose reads of `zrepro plan --json` for the job (run as a child): the planner's
// refusal of the config (what DeepSpeed refuses at init), or its verdict and figures (the
// view summary.json's memory.planned is read through) and the fixes it predicts (listed
// whenever there is a capacity).
struct PlanAnswer {
  std::optional<std::string> refused;
  std::optional<SummaryPlanned> plan;
  std::vector<FixPrediction> fixes;
  // MemoryPlan::to_json with plan.cpp's additions; nlohmann::json::exception on a wrong shape.
  static PlanAnswer from_json(const nlohmann::json& j);
};

// The failed job, as far as the user told diagnose.
struct JobSetup {
  std::optional<std::string> model;          // preset or HF config.json
  std::optional<int> world_size;
  std::optional<std::string> device_memory;  // preset or size, as given
  std::vector<std::string> job_args;         // zrepro run flags that describe the job (both sides)
};

// [Note: a reproduction this machine can run] The job's world size can be far above this
// machine's cores. A memory or numerics symptom is exact under virtual ranks (one process
// stands in for all: trainer/loop/virtual_ranks.h), so rank counts above the cores run so;
// a hang or a timing symptom needs real processes, so its rank counts are capped at the
// cores (at least 2: a collective needs two). Nothing changes when the cores suffice.
struct MachineRun {
  std::optional<std::string> ranks;    // rank counts instead of scenario.json's ("2,4")
  std::vector<std::string> ab_flags;   // "--virtual"
  std::string note;                    // what changed and why; "" when nothing did
};
MachineRun run_on_this_machine(const nlohmann::json& scenario, int cores);

// [Note: a reproduction the log tells apart] The scenarios a diagnosis leaves open: its own,
// and, when the diagnosis is not strong and it is a hang, each alternative named by a
// catalogue scenario (`catalogue`: the folder names). A hang's reproduction is the
// catalogue's mechanism injected on side A (an extra micro-step, rank 0 evaluating alone,
// experts fetched one by one): reproducing the wrong one verifies a fix the job does not
// need. The other checkpoints reproduce the job's own config (an OOM scaled down, with the
// planner's fixes for it; a config, numerics or pinned-memory edit; a slow job's timers),
// which the alternatives do not change. More than one open: --run reproduces one only when
// the user names it (--as).
std::vector<std::string> open_scenarios(const Diagnosis& d, const std::vector<std::string>& catalogue);

struct CandidateFix {
  std::string name, why;
  nlohmann::json config;            // the user's config with the fix applied
  std::vector<std::string> args;    // run flags the fix needs
  nlohmann::json planner;           // {"fits", "peak_share"} for a planned fix, else null
};

struct Reproduction {
  std::string name;                 // the folder's name
  nlohmann::json scenario;          // scenario.json
  nlohmann::json failing_config;    // the user's config, as read
  std::vector<CandidateFix> fixes;  // fix_1.json, ... in scenario.json's order
  std::vector<std::string> notes;   // stand-ins and choices the reproduction made
  std::string readme;
};

// name: the folder's; templ: the catalogue's scenario.json for d.scenario; plan: what the planner
// answered for the job (empty when not asked). Throws ConfigError naming the missing flag (an OOM needs
// --model) or why no reproduction can be written (no scenario matched).
Reproduction build_reproduction(const Diagnosis& d, const std::string& name, const std::string& log_path,
                                const nlohmann::json& templ,
                                const nlohmann::json& user_config, const JobSetup& job, const PlanAnswer& plan);

// DIR/{scenario.json, ds_config.json, fix_N.json, README.md}: written to DIR.tmp-PID and
// renamed; an existing DIR is an error (exit 2), nothing is overwritten.
void write_reproduction(const Reproduction& r, const std::string& dir);

}  // namespace zrepro
