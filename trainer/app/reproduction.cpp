// See reproduction.h.
#include "trainer/app/reproduction.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <set>
#include <sstream>

#include "trainer/app/cli.h"
#include "trainer/report/ab.h"
#include "trainer/report/report.h"

namespace zrepro {

using json = nlohmann::json;

namespace {


// The catalogue's grep line without the size its own toy printed ("Tried to allocate 1.86
// GiB" -> "Tried to allocate"): a job's reproduction runs another scale-down and prints
// its own size, which the log never showed (issue 33).
std::string without_size(const std::string& grep) {
  static const std::regex size(R"(\s*[0-9][0-9.]*\s*(bytes|B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)\b.*$)");
  return std::regex_replace(grep, size, "");
}

// The flags that say which toy a catalogue scenario trains; an OOM reproduction replaces
// them with the job's scale-down, and keeps only the template's allocator and run length.
const std::set<std::string> kScaleFlags = {"--model", "--device-memory", "--target-model", "--target-device-memory",
                                           "--target-world-size", "--activation-checkpointing"};
const std::set<std::string> kUnaryFlags = {"--activation-checkpointing"};

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& a : v) s += (s.empty() ? "" : " ") + a;
  return s;
}

std::vector<std::string> strings(const json& a) {
  std::vector<std::string> out;
  for (const auto& x : a) out.push_back(x.get<std::string>());
  return out;
}

// The template's shared args without the scale flags (and their values).
std::vector<std::string> without_scale_flags(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    if (!kScaleFlags.count(args[i])) {
      out.push_back(args[i]);
    } else if (!kUnaryFlags.count(args[i])) {
      ++i;  // its value
    }
  }
  return out;
}

int64_t steps_in(const std::vector<std::string>& args) {
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == "--steps") {
      try {
        return std::stoll(args[i + 1]);
      } catch (const std::exception&) {
        throw ConfigError("--job-args: --steps got \"" + args[i + 1] + "\", expected a whole number of steps");
      }
    }
  return 0;
}

void set_steps(std::vector<std::string>& args, int64_t steps) {
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == "--steps") {
      args[i + 1] = std::to_string(steps);
      return;
    }
  args.insert(args.end(), {"--steps", std::to_string(steps)});
}

// The run flags both sides share: the job's scale for an OOM, the catalogue's toy otherwise.
std::vector<std::string> shared_args(const Diagnosis& d, const json& templ, const JobSetup& job,
                                     std::vector<std::string>& notes) {
  std::vector<std::string> args = strings(templ["args"]);
  if (d.checkpoint == "zero-stage") {
    if (!job.model)
      throw ConfigError("--model: missing; an out-of-memory reproduction scales down the job's model (a preset such as "
                        "gpt3-6.7b, or its Hugging Face config.json): add --model");
    std::string capacity;
    if (job.device_memory) {
      capacity = *job.device_memory;
    } else if (d.numbers.capacity_bytes.value_or(0) > 0) {
      capacity = std::to_string(*d.numbers.capacity_bytes);
      notes.push_back("the device capacity is the log's (" + capacity + " bytes, from the OOM message)");
    } else {
      throw ConfigError("--device-memory: missing, and the log prints no device capacity; add --device-memory "
                        "(a preset such as a100-80gb, or a size such as 80GB)");
    }
    const int64_t template_steps = steps_in(args);
    args = without_scale_flags(args);
    args.insert(args.begin(), {"--target-model", *job.model, "--target-device-memory", capacity});
    const int64_t completed = d.numbers.completed_steps.value_or(0);
    set_steps(args, std::min<int64_t>(std::max<int64_t>(template_steps, completed + 2), 50));
    notes.push_back("scale-down: the job's model " + *job.model + " on " + capacity +
                    " runs as a toy that keeps each memory category's share of the device (summary.json "
                    "scale_down has the fidelity table)");
  }
  args.insert(args.end(), job.job_args.begin(), job.job_args.end());
  return args;
}

json ranks_for(const Diagnosis& d, const json& templ, const JobSetup& job, std::vector<std::string>& notes) {
  if (job.world_size) return json::array({*job.world_size});
  if (d.numbers.world_size) {
    notes.push_back("the world size is the log's (" + std::to_string(*d.numbers.world_size) + ")");
    return json::array({*d.numbers.world_size});
  }
  notes.push_back("the job's world size was not given (--world-size): the catalogue's rank counts " +
                  templ["ranks"].dump() + " are used");
  return templ["ranks"];
}

// The catalogue's setup steps (a checkpoint saved before the sides resume), at the job's
// saving world size when the log names it ("--ranks" of each step).
json setup_for(const Diagnosis& d, const json& templ, std::vector<std::string>& notes) {
  json steps = templ["setup"];
  if (!d.numbers.saved_world_size) return steps;
  const std::string saved = std::to_string(*d.numbers.saved_world_size);
  for (auto& step : steps)
    for (size_t i = 0; i + 1 < step["args"].size(); ++i)
      if (step["args"][i] == "--ranks") step["args"][i + 1] = saved;
  notes.push_back("the checkpoint is saved on the log's saving world size (" + saved +
                  " ranks) by the setup steps");
  return steps;
}

// An OOM's fixes: the planner's for the job, those predicted to fit first (at most three).
std::vector<CandidateFix> planned_fixes(const json& user_config, const PlanAnswer& plan, std::vector<std::string>& notes) {
  std::vector<CandidateFix> out;
  if (plan.fixes.empty())
    throw ConfigError("the planner proposed no fix for this setup (zrepro plan --json has no \"fixes\")");
  const bool any_fits =
      std::any_of(plan.fixes.begin(), plan.fixes.end(), [](const FixPrediction& f) { return f.fits; });
  if (!any_fits)
    notes.push_back("the planner predicts none of the usual fixes fits alone; the two with the lowest peak are tried");
  for (const FixPrediction& f : plan.fixes) {
    if (out.size() == (any_fits ? 3u : 2u) || (any_fits && !f.fits)) break;
    CandidateFix c;
    c.name = f.fix;
    char share[32];
    std::snprintf(share, sizeof share, "%.0f%%", 100 * f.peak_share);
    c.why = std::string("the planner predicts it ") + (f.fits ? "fits" : "does NOT fit") + " (peak " + share +
            " of the device)";
    c.config = user_config;
    if (f.config_patch.is_object()) c.config.merge_patch(f.config_patch);
    c.args = f.args;
    c.planner = {{"fits", f.fits}, {"peak_share", f.peak_share}};
    out.push_back(std::move(c));
  }
  return out;
}

// A slow job: parameters crossing the host link every micro-step, or stage 3's collectives
// on a slow interconnect.
std::vector<CandidateFix> offload_and_stage_fixes(const Diagnosis& d, const json& user_config) {
  std::vector<CandidateFix> out;
  const json z = user_config.value("zero_optimization", json::object());
  if (d.scenario == "offload-link-bottleneck" && z.contains("offload_param")) {
    const json micro = user_config.value("train_micro_batch_size_per_gpu", json());
    const json gas = user_config.value("gradient_accumulation_steps", json());
    if (micro.is_number_integer() && gas.is_number_integer() && gas.get<int64_t>() > 1) {
      CandidateFix c{"micro-batch " + std::to_string(micro.get<int64_t>() * gas.get<int64_t>()) + " x gas 1",
                     "the same global batch in one micro-step: offloaded parameters cross the link once per step, "
                     "not once per micro-step",
                     user_config, {}, nullptr};
      c.config["train_micro_batch_size_per_gpu"] = micro.get<int64_t>() * gas.get<int64_t>();
      c.config["gradient_accumulation_steps"] = 1;
      out.push_back(c);
    }
    CandidateFix c{"parameters kept on the device (no offload_param)",
                   "only the optimizer state crosses the host link, once per optimizer step", user_config, {}, nullptr};
    c.config["zero_optimization"].erase("offload_param");
    out.push_back(c);
  } else if (d.scenario == "more-ranks-no-speedup" && z.value("stage", 0) == 3) {
    CandidateFix c{"ZeRO stage 1", "one gradient all-reduce per step instead of stage 3's gathers and reduce-scatters",
                   user_config, {}, nullptr};
    c.config["zero_optimization"]["stage"] = 1;
    out.push_back(c);
  }
  return out;
}

// The edit that removes a config-side cause (batch triple, fp16, pinning); empty when the
// cause is not in the config.
std::vector<CandidateFix> config_fixes(const Diagnosis& d, const json& user_config, int world_size) {
  CandidateFix c;
  c.config = user_config;
  if (d.scenario == "mismatched-batch-triple") {
    const int64_t tb = user_config.value("train_batch_size", json(0)).is_number() ? user_config["train_batch_size"].get<int64_t>() : 0;
    const json micro = user_config.value("train_micro_batch_size_per_gpu", json());
    if (tb > 0 && micro.is_number() && tb % (micro.get<int64_t>() * world_size) == 0) {
      const int64_t gas = tb / (micro.get<int64_t>() * world_size);
      c.name = "gradient_accumulation_steps " + std::to_string(gas);
      c.why = "train_batch_size " + std::to_string(tb) + " = micro " + micro.dump() + " x gas " + std::to_string(gas) +
              " x world size " + std::to_string(world_size);
      c.config["gradient_accumulation_steps"] = gas;
    } else {
      c.name = "train_batch_size derived";
      c.why = "train_batch_size dropped: DeepSpeed derives it from micro x gas x world size";
      c.config.erase("train_batch_size");
    }
  } else if (d.scenario == "resume-world-size-change") {
    c.name = "a universal checkpoint (checkpoint.load_universal)";
    c.why = "the checkpoint converted by ds_to_universal.py (the scenario's setup: zrepro checkpoint to-universal) "
            "loads at any world size under \"checkpoint\": {\"load_universal\": true}";
    c.config["checkpoint"]["load_universal"] = true;
  } else if (d.scenario == "save-gather-oom") {
    c.name = "stage3_gather_16bit_weights_on_model_save false";
    c.why = "no 16-bit model gathered on rank 0's host at a save: each rank writes its own ZeRO partition; "
            "consolidate offline with zero_to_fp32.py";
    c.config["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] = false;
  } else if (d.scenario == "moe-divergent-gathers") {
    // [Note: which experts a rank fetches] (trainer/config/leaf_modules.h)
    c.name = "ZeRO-3 leaf modules: the MoE block fetched as one unit";
    c.why = "zero_optimization.leaf_module.classes names Hugging Face's MoE blocks (DeepSpeed >= 0.18.0's default; "
            "set_z3_leaf_modules before): every rank gathers every expert, whatever its tokens pick";
    c.config["zero_optimization"]["leaf_module"] = {{"classes", {"MixtralSparseMoeBlock", "Qwen2MoeSparseMoeBlock"}}};
  } else if (d.scenario == "fp16-overflow") {
    c.name = "bf16 instead of fp16";
    c.why = "bf16 has fp32's exponent range: no loss scale, no overflow at 65504";
    c.config.erase("fp16");
    c.config["bf16"] = {{"enabled", true}};
  } else if (d.scenario == "memlock-limit" || d.scenario == "upgrade-pinned-default" || d.scenario == "pageable-copies") {
    const bool pin = d.scenario == "pageable-copies";
    json& z = c.config["zero_optimization"];
    for (const char* section : {"offload_optimizer", "offload_param"})
      if (z.is_object() && z.contains(section)) z[section]["pin_memory"] = pin;
    if (c.config == user_config) return {};
    c.name = pin ? "offload pin_memory true" : "offload pin_memory false";
    c.why = pin ? "pinned offload buffers: the copies run asynchronously and overlap compute"
                : "pageable offload buffers need no locked memory (slower copies; or raise ulimit -l on the nodes)";
  } else {
    return offload_and_stage_fixes(d, user_config);
  }
  return {c};
}

// The config file of fix i: the job's own (ds_config.json) when the fix changes no key
// (a run flag, or side A without its stand-in: [Note: a mechanism is not a fix] in
// scenario.cpp), else fix_<i+1>.json with the patched config.
std::string fix_file(const Reproduction& r, size_t i) {
  return r.fixes[i].config == r.failing_config ? "ds_config.json" : "fix_" + std::to_string(i + 1) + ".json";
}

std::string readme(const Reproduction& r, const Diagnosis& d, const std::string& log_path) {
  std::ostringstream o;
  o << "# " << r.name << "\n\n"
    << "Written by `zrepro diagnose " << log_path << " --write-scenario`: the job's own DeepSpeed config "
    << "(`ds_config.json`) as side A, each candidate fix as a config beside it.\n\n"
    << "## What the log showed\n\n"
    << "Checkpoint **" << d.checkpoint << "**, scenario **" << d.scenario << "** (" << d.confidence << "): " << d.reason
    << ". The catalogue's explanation: `configs/scenarios/" << d.scenario << "/README.md`.\n\n";
  for (size_t i = 0; i < d.evidence.size() && i < 5; ++i)
    o << "    line " << d.evidence[i].line << ": " << d.evidence[i].text << "\n";
  o << "\n## Candidate fixes\n\n";
  for (size_t i = 0; i < r.fixes.size(); ++i)
    o << i + 1 << ". `" << fix_file(r, i) << "`"
      << (r.fixes[i].args.empty() ? "" : " with `" + joined(r.fixes[i].args) + "`") << ": " << r.fixes[i].name << " ("
      << r.fixes[i].why << ")"
      << (fix_file(r, i) == "ds_config.json" && r.fixes[i].args.empty()
              ? ": side A without zrepro's stand-in, which reproduces the mechanism; the fix lies in the job's code or data"
              : "")
      << "\n";
  o << "\n## Run it\n\n"
    << "    zrepro scenario run " << r.name << " --dir <the folder holding this one>\n\n"
    << "Side A must fail the way the log did (its log must contain \"" << r.scenario.value("grep", "")
    << "\"); each fix runs against A. Exit 0: reproduced and at least one fix verified; 6: reproduced, no fix "
    << "verified; 7: not reproduced.\n\n## Stand-ins and choices\n\n";
  for (const auto& n : r.notes) o << "- " << n << "\n";
  o << "- run flags (both sides): `" << joined(strings(r.scenario["args"])) << "`, ranks " << r.scenario["ranks"].dump()
    << "\n";
  return o.str();
}

}  // namespace

PlanAnswer PlanAnswer::from_json(const json& j) {
  PlanAnswer a;
  if (j.contains("refused")) {
    a.refused = j.at("refused").get<std::string>();
    return a;
  }
  a.plan = SummaryPlanned::from_json(j);
  for (const auto& f : j.value("fixes", json::array())) a.fixes.push_back(FixPrediction::from_json(f));
  return a;
}

Reproduction build_reproduction(const Diagnosis& d, const std::string& name, const std::string& log_path,
                                const json& templ,
                                const json& user_config, const JobSetup& job, const PlanAnswer& plan) {
  if (d.scenario.empty())
    throw ConfigError("--write-scenario: the log has no known fingerprint, so there is no scenario to write");
  if (!user_config.is_object()) throw ConfigError("--config: the DeepSpeed config is not a JSON object");
  Reproduction r;
  r.name = name;
  r.failing_config = user_config;
  const std::vector<std::string> args = shared_args(d, templ, job, r.notes);
  const json ranks = ranks_for(d, templ, job, r.notes);
  r.fixes = d.checkpoint == "zero-stage" ? planned_fixes(user_config, plan, r.notes)
                                         : config_fixes(d, user_config, ranks.back().get<int>());
  const json& tb = templ.value("b", json());
  if (r.fixes.empty() && tb.is_object() && tb.value("config", "") == templ["a"].value("config", "")) {
    // The cause is not in the config: the catalogue's fix is a run flag (or A's injection left out).
    CandidateFix c;
    c.args = strings(tb.value("args", json::array()));
    c.name = c.args.empty() ? "without side A's " + joined(strings(templ["a"].value("args", json::array())))
                            : "the catalogue's fix: " + joined(c.args);
    c.why = "configs/scenarios/" + d.scenario + "/README.md: the fix is in the job's code or data, not its config";
    c.config = user_config;
    r.fixes.push_back(c);
  }
  if (r.fixes.empty())
    throw ConfigError("--write-scenario: no candidate fix for " + d.scenario + " can be derived from the config");
  const std::vector<std::string> a_args = strings(templ["a"].value("args", json::array()));
  if (!a_args.empty())
    r.notes.push_back("side A adds `" + joined(a_args) + "`: the catalogue's stand-in for what happened in the job");
  json fixes = json::array();
  for (size_t i = 0; i < r.fixes.size(); ++i)
    fixes.push_back({{"name", r.fixes[i].name}, {"why", r.fixes[i].why}, {"config", fix_file(r, i)},
                     {"args", r.fixes[i].args}, {"planner", r.fixes[i].planner}});
  json evidence = json::array();
  for (size_t i = 0; i < d.evidence.size() && i < 5; ++i) evidence.push_back({{"line", d.evidence[i].line}, {"text", d.evidence[i].text}});
  r.scenario = {{"name", r.name},
                {"symptom", templ.value("symptom", d.reason)},
                {"grep", without_size(templ.value("grep", ""))},
                {"a", {{"config", "ds_config.json"}, {"args", a_args}}},
                {"fixes", fixes},
                {"args", args},
                {"ranks", ranks},
                {"from_log", {{"log", log_path}, {"checkpoint", d.checkpoint}, {"scenario", d.scenario},
                              {"confidence", d.confidence}, {"reason", d.reason}, {"evidence", evidence}}},
                {"notes", r.notes}};
  if (templ.contains("expect")) r.scenario["expect"] = templ["expect"];
  if (templ.contains("setup")) r.scenario["setup"] = setup_for(d, templ, r.notes);
  r.readme = readme(r, d, log_path);
  return r;
}

void write_reproduction(const Reproduction& r, const std::string& given) {
  namespace fs = std::filesystem;
  fs::path where = fs::path(given).lexically_normal();
  if (where.filename().empty()) where = where.parent_path();  // "DIR/"
  const std::string dir = where.string();
  if (fs::exists(dir)) throw ConfigError("--write-scenario: \"" + dir + "\" exists; give a new folder (nothing is overwritten)");
  const std::string tmp = dir + ".tmp-" + std::to_string(::getpid());
  std::error_code ec;
  fs::create_directories(tmp, ec);
  if (ec) throw ConfigError("--write-scenario: cannot create \"" + tmp + "\": " + ec.message());
  try {
    write_json_file(tmp + "/scenario.json", r.scenario);
    write_json_file(tmp + "/ds_config.json", r.failing_config);
    for (size_t i = 0; i < r.fixes.size(); ++i)
      if (fix_file(r, i) != "ds_config.json")
        write_json_file(tmp + "/" + fix_file(r, i), r.fixes[i].config);
    write_file_atomic(tmp + "/README.md", r.readme);
    fs::rename(tmp, dir);
  } catch (const std::exception& e) {
    fs::remove_all(tmp, ec);
    throw ConfigError("--write-scenario: " + std::string(e.what()));
  }
}

// [Note: a reproduction this machine can run]
MachineRun run_on_this_machine(const json& scenario, int cores) {
  MachineRun m;
  std::vector<int> counts;
  for (const auto& n : scenario.value("ranks", json::array())) counts.push_back(n.get<int>());
  const int most = counts.empty() ? 1 : *std::max_element(counts.begin(), counts.end());
  if (most <= cores) return m;
  const bool in_time = parse_expectation(scenario.value("expect", std::string("failure"))).measures_time();
  const bool hang = scenario.value("from_log", json::object()).value("checkpoint", std::string()) == "communication";
  if (!in_time && !hang) {
    m.ab_flags = {"--virtual"};
    m.note = "the job's " + std::to_string(most) + " ranks run as virtual ranks in one process (this machine has " +
             std::to_string(cores) + " core(s)): memory and numerics are the job's at every rank";
    return m;
  }
  const int cap = std::max(2, cores);
  std::string list;
  for (int n : counts) list += (list.empty() ? "" : ",") + std::to_string(std::min(n, cap));
  m.ranks = list;
  m.note = std::string(hang ? "a hang" : "a symptom in time") + " needs real processes: the job's " +
           std::to_string(most) + " ranks run as " + std::to_string(cap) + " on this machine's " +
           std::to_string(cores) + " core(s)";
  return m;
}

// [Note: a reproduction the log tells apart]
std::vector<std::string> open_scenarios(const Diagnosis& d, const std::vector<std::string>& catalogue) {
  std::vector<std::string> open;
  if (!d.scenario.empty()) open.push_back(d.scenario);
  if (d.confidence == "strong" || d.checkpoint != "communication") return open;
  for (const std::string& alternative : d.alternatives) {
    const std::string name = alternative.substr(0, alternative.find(':'));
    const bool known = std::find(catalogue.begin(), catalogue.end(), name) != catalogue.end();
    if (known && std::find(open.begin(), open.end(), name) == open.end()) open.push_back(name);
  }
  return open;
}

}  // namespace zrepro
