// See commands.h.
#include "trainer/app/commands.h"

#include <algorithm>
#include <iostream>

#include "device/base/errors.h"
#include "trainer/app/cli.h"
#include "trainer/app/env.h"

namespace zrepro {

const std::vector<Command>& commands() {
  static const std::vector<Command> table = {
      {"run", "--config FILE [--model M] [--steps N] [--ranks N] [--out DIR]",
       "train the toy GPT under a DeepSpeed config, 1 or N ranks, and record what happens", run_command, true, {}},
      {"plan", "--config FILE --model M --world-size N --device-memory SIZE [--json]",
       "predict per-rank device memory by phase and category, a fits/OOM verdict and the fixes that fit",
       plan_command, false, {}},
      {"config", "--config FILE [--json] [--diff-versions A,B]",
       "print the effective config, every value with its source; what a DeepSpeed release changes",
       config_command, false, {}},
      {"ab", "--a A.json (--b B.json | --b-args FLAGS) [--ranks 1,4] [--plan-only] [run flags]",
       "verify a fix: side A and side B at each rank count, one verdict (exit 0 when B fixes A)", ab_command, true,
       {}},
      {"scenario", "list | run NAME [--ranks 1,2] [--out DIR]",
       "the failure catalogue (configs/scenarios/): list it, or reproduce one and verify its fix",
       scenario_command, true, {}},
      {"diagnose", "LOG|- [--config FILE --model M --world-size N --device-memory SIZE] [--json] "
                   "[--write-scenario DIR [--run]]",
       "a failed job's log -> checkpoint, scenario, evidence lines, numbers, what to try, a reproduction",
       diagnose_command, false, {}},
      {"check", "(--save B.json | --baseline B.json) (--run DIR | -- RUN ARGS) [--json]",
       "regression test after an upgrade: exit 11 when memory, collectives, losses or step time moved",
       check_command, true, {}},
      {"bisect", "--config FILE --good A [--bad B] [--ranks 2] [--steps 3] [run flags]",
       "the first DeepSpeed release whose figures on the toy moved, found by running the real releases here",
       bisect_command, true, {}},
      {"verify", "--config FILE [run flags]",
       "the equivalence suite for one config: stages, ranks, accumulation, offload keep the losses",
       verify_command, true, {}},
      {"doctor", "--config FILE --model M --world-size N --device-memory SIZE",
       "preflight this machine for a run: one line per checkpoint with its fix", doctor_command, false, {}},
      {"env", "[--json]",
       "this build and machine: zrepro, LibTorch, BLAS, MPI, NCCL, CUDA, GPUs, host memory, memlock",
       env_command, true, {}},
      {"checkpoint", "to-universal --input-folder DIR/global_stepN --output-folder DIR/global_stepN_universal | "
                     "from-deepspeed --input-folder DS_DIR --output-folder OUT",
       "DeepSpeed's ds_to_universal.py conversion (resume at another world size); a checkpoint real DeepSpeed wrote, "
       "made readable to --resume",
       checkpoint_command, false, {"to-universal", "from-deepspeed"}},
      {"record-model", "--config config.json --seq N [--dtype bf16] [--attn sdpa] --out M.tape.json",
       "an architecture zrepro has no model of: transformers' own activation tape under FakeTensorMode, for plan",
       record_model_command, false, {}},
      {"bench", "comm | adam | copy [options]",
       "benchmarks: collectives (nccl-tests format), fused CPU Adam, offload copies", bench_command, true,
       {"comm", "adam", "copy"}},
  };
  return table;
}

const Command* find_command(std::string_view name) {
  for (const auto& c : commands())
    if (c.name == name) return &c;
  return nullptr;
}

std::string usage_text() {
  std::string s = "usage: zrepro <command> [options]    (zrepro --version: this build in one line)\n";
  for (const auto& c : commands()) {
    std::string name(c.name);
    name.resize(std::max<size_t>(name.size(), 9), ' ');
    s += "  " + name + " " + std::string(c.summary) + "\n";
    s += "            " + std::string(c.name) + " " + std::string(c.args) + "\n";
  }
  return s + "`zrepro <command> --help` lists a command's options; exit codes: docs/reference/exit-codes.md.\n";
}

std::vector<std::string> command_lines() {
  std::vector<std::string> lines;
  for (const auto& c : commands()) {
    if (c.subcommands.empty()) lines.emplace_back(c.name);
    for (const auto& sub : c.subcommands) lines.push_back(std::string(c.name) + " " + std::string(sub));
  }
  return lines;
}

int bench_command(int argc, char** argv) {
  const std::string name = argc >= 2 ? argv[1] : "";
  if (name == "--help" || name == "-h") {
    std::cout << "zrepro bench comm | adam | copy [options]: " << find_command("bench")->summary
              << ".\n`zrepro bench NAME --help` lists a benchmark's options.\n";
    return kExitOk;
  }
  if (name == "comm") return bench_comm(argc - 1, argv + 1);
  if (name == "adam") return bench_adam(argc - 1, argv + 1);
  if (name == "copy") return bench_copy(argc - 1, argv + 1);
  std::cerr << "[zrepro bench] error: " << (name.empty() ? "no benchmark named" : "unknown benchmark \"" + name + "\"")
            << "; expected one of comm, adam, copy (zrepro bench comm --help)\n";
  return kExitBadInput;
}

}  // namespace zrepro
