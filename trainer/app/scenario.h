// The scenario catalogue's folder format (configs/scenarios/NAME/scenario.json), shared by
// `zrepro scenario` and `zrepro diagnose --write-scenario` (which writes one and runs it).
//   {"name", "symptom", "grep", "expect", "a": {"config", "args"},
//    "b": {"config", "args"}                     one fix, or
//    "fixes": [{"name", "why", "config", "args"}] several, each verified against A,
//    "args": [...], "ranks": [...],
//    "setup": [{"why", "args": [zrepro command line]}]   optional, run first
//    ("{out}" in any argument: --out; "{scenario}": the scenario's folder),
//    "hint": words the failing side's failure.hint must hold (its own cause and fix; the
//    catalogue's test checks it per scenario)}
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace zrepro {

// configs/scenarios under the working directory, else the source tree's.
std::string scenarios_dir(const std::optional<std::string>& given);

// scenario.json, checked: the keys above, "b" or a non-empty "fixes". Throws ConfigError.
nlohmann::json load_scenario(const std::string& path);

// The catalogue's scenarios: the folders of `dir` holding a scenario.json, sorted.
std::vector<std::string> scenario_names(const std::string& dir);

// Runs folder dir/name as `zrepro ab` (once per fix) into out. Exit codes are ab's: 0
// reproduced and (some fix) verified, 6 reproduced and no fix verified, 7 not reproduced.
// ab_flags: flags for `zrepro ab` itself (--virtual: rank counts above 1 run in one
// process; --oversubscribe: more ranks than cores, passed on to each `zrepro run`).
int run_scenario(const std::string& dir, const std::string& name, const std::optional<std::string>& ranks,
                 const std::string& out, const std::vector<std::string>& ab_flags = {});

}  // namespace zrepro
