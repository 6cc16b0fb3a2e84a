// `zrepro ab`: verify a fix in one command. Runs side A (the failing setup) and side B
// (the fix: another config, or the same config with other flags) at each rank count,
// each as its own `zrepro run` (or `zrepro plan --json` under --plan-only) into
// OUT/<side>_r<ranks>/, then compares them (trainer/report/ab.h): one table, a verdict
// line per rank count, OUT/ab.json and OUT/ab.html. Exit 0 when B fixes the failure A
// shows, 6 when B fails too, 7 when A shows no failure, 2 on bad input. --expect names
// a symptom other than a failure (slower, less/more of a figure, differing losses).
#include <filesystem>
#include <fstream>
#include <iostream>

#include "trainer/app/cli.h"
#include "trainer/config/ds_versions.h"
#include "trainer/runtime/subprocess.h"
#include "trainer/report/ab.h"
#include "trainer/report/report.h"
#include "zero/comm/mpi_communicator.h"

namespace zrepro {

using json = nlohmann::json;

namespace {

struct Side {
  std::string name;
  std::string config;
  std::vector<std::string> args;  // the side's own flags
};

// Under --plan-only the planner answers for the job itself: a scale-down's target is what
// it plans (--target-model as --model, --target-device-memory as --device-memory), and
// the flags only a trained toy has are refused naming what to do instead.
std::vector<std::string> plan_flags(const std::vector<std::string>& run_flags) {
  std::vector<std::string> out;
  for (size_t i = 0; i < run_flags.size(); ++i) {
    std::string flag = run_flags[i], value;
    const size_t eq = flag.find('=');
    if (eq != std::string::npos) value = flag.substr(eq + 1), flag = flag.substr(0, eq);
    if (flag == "--target-world-size")
      throw ConfigError("--target-world-size with --plan-only: the planner plans at each --ranks count; give "
                        "--ranks N instead");
    if (flag == "--scale")
      throw ConfigError("--scale with --plan-only: only a trained toy has a scale; the planner plans the target "
                        "itself (drop --scale)");
    const std::string mapped = flag == "--target-model" ? "--model" : flag == "--target-device-memory" ? "--device-memory" : "";
    if (mapped.empty()) {
      out.push_back(run_flags[i]);
    } else {
      if (eq == std::string::npos && i + 1 < run_flags.size()) value = run_flags[++i];
      out.insert(out.end(), {mapped, value});
    }
  }
  return out;
}

// One side at one rank count: the run (or the plan) and what it left.
AbRun run_side(const Side& side, int ranks, const std::vector<std::string>& common, const std::string& out,
               bool plan_only, bool refusal_is_the_symptom, bool virtual_ranks) {
  AbRun r;
  r.side = side.name;
  r.ranks = ranks;
  const std::string dir = out + "/" + side.name + "_r" + std::to_string(ranks);
  r.log = dir + (plan_only ? ".plan.json" : ".log");
  std::vector<std::string> args;
  if (plan_only)
    args = {"plan", "--config", side.config, "--world-size", std::to_string(ranks), "--json"};
  else
    args = {"run", "--config", side.config, "--out", dir};
  if (!plan_only && ranks > 1) args.insert(args.end(), {virtual_ranks ? "--world-size" : "--ranks", std::to_string(ranks)});
  args.insert(args.end(), common.begin(), common.end());
  args.insert(args.end(), side.args.begin(), side.args.end());
  if (!plan_only) std::filesystem::remove_all(dir);
  std::cout << "[zrepro ab] " << side.name << " on " << ranks << " rank(s): zrepro";
  for (const auto& a : args) std::cout << " " << a;
  std::cout << std::endl;
  const std::string what = "side " + side.name + " on " + std::to_string(ranks) + " rank(s)";
  r.exit_code = refusal_is_the_symptom ? run_self(args, r.log, what) : run_self_or_refuse(what, args, r.log);
  if (r.exit_code == kExitBadInput) std::cout << "[zrepro ab] " << what << " refused, as expected:\n" << tail_of(r.log, 4);
  if (plan_only) {
    r.plan = read_json_file(r.log);
    return r;
  }
  r.summary = read_summary(dir + "/summary.json");
  if (r.summary) {
    // A hang stops every rank (rank 0's summary covers them all).
    if (r.summary->status == "hang") {
      r.failed_ranks = ranks;
      return r;
    }
    // Several processes: summary.json lists every failing rank's view ([Note: every
    // rank's view]). Virtual ranks or one process: one summary, the first rank that failed.
    const bool listed = r.summary->failure && r.summary->failure->views;
    r.failed_ranks = listed ? static_cast<int>(r.summary->failure->views->ranks.size()) : r.summary->status != "ok";
  }
  return r;
}

// cxxopts takes one-letter names as short options (-a); the command line of
// `zrepro ab` spells them --a / --b: those two spellings become --a-config / --b-config.
std::vector<std::string> long_side_flags(int argc, char** argv) {
  std::vector<std::string> out(argv, argv + argc);
  for (auto& a : out)
    for (const char* side : {"a", "b"}) {
      const std::string flag = std::string("--") + side;
      if (a == flag || a.rfind(flag + "=", 0) == 0) a = flag + "-config" + a.substr(flag.size());
    }
  return out;
}

cxxopts::Options ab_options() {
  cxxopts::Options o("zrepro ab",
                     "Verify a fix: run side A and side B at each rank count and compare them. Every other flag "
                     "(--model, --device-memory, --steps, --target-model, --inject, ...) goes to both sides' "
                     "`zrepro run`.");
  o.allow_unrecognised_options();
  o.add_options("ab")
      ("a-config", "side A's DeepSpeed config (the failing setup)", cxxopts::value<std::string>())
      ("b-config", "side B's DeepSpeed config (default: A's)", cxxopts::value<std::string>())
      ("a-args", "flags for side A only, e.g. \"--micro-batch 8\"", cxxopts::value<std::string>())
      ("b-args", "flags for side B only, e.g. \"--activation-checkpointing\"", cxxopts::value<std::string>())
      ("a-version", "DeepSpeed release whose semantics side A's config resolves with (--deepspeed-version)",
       cxxopts::value<std::string>())
      ("b-version", "DeepSpeed release for side B: the same JSON before and after an upgrade, e.g. --a-version "
                    "0.19.4 --b-version 0.19.5", cxxopts::value<std::string>())
      ("ranks", "rank counts to run each side at, e.g. 1,4", cxxopts::value<std::vector<int>>()->default_value("1"))
      ("virtual", "run each rank count above 1 as virtual ranks in one process (zrepro run --world-size N): "
                  "exact memory and numerics, not timing (refused with the timing expectations: slower, less/more "
                  "of a time share, scaling)")
      ("expect", "the symptom A shows and B must not: failure (default), refused (A's config is rejected at "
                 "init), slower:R, less:KEY:R, more:KEY:R (KEY: device_busy_fraction, overlap_ratio, "
                 "comm_wait_share, data_wait_share, ...), present:KEY (A's figure above 0, B's 0: alloc_retries_per_step), "
                 "differs:loss|grad_norm:TOL, scaling:E (A's throughput "
                 "efficiency from the first rank count to the others below E, B's at least E)",
       cxxopts::value<std::string>()->default_value("failure"))
      ("plan-only", "answer from the planner (zrepro plan) instead of training")
      ("out", "folder for each side's outputs, ab.json and ab.html", cxxopts::value<std::string>()->default_value("ab_out"))
      ("h,help", "show this help");
  return o;
}

// What one comparison is: both sides, the rank counts, the expectation, the shared flags.
struct AbRequest {
  Side a, b;
  std::vector<int> ranks;
  bool plan_only = false, virtual_ranks = false;
  Expectation expect;
  std::vector<std::string> common;  // every flag that is not ab's: both sides' `zrepro run`
  std::string out;
};

// The flags checked into a request (ConfigError naming the flag).
// A measured symptom needs what it measures: timing needs real processes, anything but a
// failure needs runs, not plans.
void check_expectation_fits(const AbRequest& q) {
  const Expectation& expect = q.expect;
  if (q.virtual_ranks && expect.measures_time())
    throw ConfigError("--virtual with --expect " + expect.text + ": virtual ranks share one process's cores, so "
                      "their timing is not the job's; run real processes (drop --virtual)");
  if (q.plan_only && expect.kind != Expectation::Kind::failure)
    throw ConfigError("--expect " + expect.text + " needs runs: the planner answers only whether a side fits (drop --plan-only)");
}

AbRequest ab_request_from(const cxxopts::ParseResult& r) {
  if (launched_by_mpi()) throw ConfigError("zrepro ab starts its runs itself: run it without mpirun (use --ranks)");
  if (!r.count("a-config")) throw ConfigError("--a: missing. Give side A's config: zrepro ab --a before.json --b after.json");
  AbRequest q;
  q.a = {"A", r["a-config"].as<std::string>(), r.count("a-args") ? words("--a-args", r["a-args"].as<std::string>()) : std::vector<std::string>{}};
  q.b = {"B", r.count("b-config") ? r["b-config"].as<std::string>() : q.a.config,
         r.count("b-args") ? words("--b-args", r["b-args"].as<std::string>()) : std::vector<std::string>{}};
  for (auto [side, key] : {std::pair<Side*, const char*>{&q.a, "a-version"}, {&q.b, "b-version"}})
    if (r.count(key))
      side->args.insert(side->args.end(), {"--deepspeed-version", check_deepspeed_version(std::string("--") + key,
                                                                                          r[key].as<std::string>())});
  if (!r.count("b-config") && q.b.args.empty() && q.a.args.empty())
    throw ConfigError("--b: missing. Give side B's config (--b after.json) or its flags (--b-args \"...\")");
  for (const std::string* f : {&q.a.config, &q.b.config})
    if (!std::filesystem::is_regular_file(*f)) throw ConfigError("--a/--b: \"" + *f + "\" is not a readable file");
  q.ranks = r["ranks"].as<std::vector<int>>();
  for (int n : q.ranks)
    if (n < 1) throw ConfigError("--ranks: got " + std::to_string(n) + ", expected rank counts >= 1 such as 1,4");
  q.plan_only = r.count("plan-only") > 0;
  q.expect = parse_expectation(r["expect"].as<std::string>());
  q.virtual_ranks = r.count("virtual") > 0;
  check_expectation_fits(q);
  q.common = q.plan_only ? plan_flags(r.unmatched()) : r.unmatched();
  q.out = r["out"].as<std::string>();
  return q;
}

// Each side at each rank count, the comparison, ab.json and ab.html, the verdicts.
int run_ab(const AbRequest& q) {
  std::vector<AbRun> ra, rb;
  for (int n : q.ranks) {
    ra.push_back(run_side(q.a, n, q.common, q.out, q.plan_only, q.expect.kind == Expectation::Kind::refused,
                          q.virtual_ranks));
    rb.push_back(run_side(q.b, n, q.common, q.out, q.plan_only, false, q.virtual_ranks));
  }
  const AbResult res = compare_ab(ra, rb, q.plan_only, q.expect);
  write_json_file(q.out + "/ab.json", res.doc.to_json());
  write_file_atomic(q.out + "/ab.html", ab_html(res.doc));
  std::cout << "\n" << res.table << "\n";
  for (const auto& v : res.verdicts) std::cout << "[zrepro ab] " << v << "\n";
  std::cout << "[zrepro ab] outcome: " << res.doc.outcome << " (exit " << res.exit_code
            << "); " << q.out << "/ab.json, " << q.out << "/ab.html" << std::endl;
  return res.exit_code;
}

// [Note: no orphan] in trainer/runtime/subprocess.h: the side that was running stopped and
// wrote its summary; the comparison is recorded as interrupted, not half-made.
int ab_interrupted(const std::string& out_dir, const Interrupted& e) {
  const int code = 128 + e.signal;
  try {
    if (!out_dir.empty()) {
      AbDocument doc;
      doc.outcome = "interrupted", doc.exit_code = code, doc.message = e.what();
      write_json_file(out_dir + "/ab.json", doc.to_json());
    }
  } catch (const IoError& io) {
    std::cerr << "[zrepro ab] " << io.what() << std::endl;  // the interruption's exit code stands
  }
  std::cerr << "[zrepro ab] interrupted: " << e.what() << "; no comparison (exit " << code << ")" << std::endl;
  return code;
}

}  // namespace

// --help in the spelling users type (--a FILE, --b FILE; long_side_flags): cxxopts knows
// them as --a-config / --b-config, which also work.
std::string side_flag_help(std::string text) {
  for (auto [from, to] : {std::pair<std::string, std::string>{"--a-config arg", "--a FILE      "},
                          {"--b-config arg", "--b FILE      "}}) {
    const size_t at = text.find(from);
    if (at != std::string::npos) text.replace(at, from.size(), to);
  }
  return text;
}

int ab_command(int argc, char** argv) {
  cxxopts::Options o = ab_options();
  std::vector<std::string> args = long_side_flags(argc, argv);
  std::vector<char*> cargs;
  for (auto& x : args) cargs.push_back(x.data());
  std::string out_dir;  // known once the flags are read: where an interruption is recorded
  try {
    return command_main(o, static_cast<int>(cargs.size()), cargs.data(), [&](const cxxopts::ParseResult& r) -> int {
      const AbRequest q = ab_request_from(r);
      out_dir = q.out;
      return with_out_dir(q.out, "zrepro ab", [&] { return run_ab(q); });
    }, side_flag_help, Words::the_command_reads_them);
  } catch (const Interrupted& e) {
    return ab_interrupted(out_dir, e);
  }
}

}  // namespace zrepro
