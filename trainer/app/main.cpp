// zrepro: reproduce DeepSpeed ZeRO failures with a small LibTorch trainer.
// Dispatches to the subcommands; each returns the exit code of docs/ARCHITECTURE.md "Contracts".
#include <csignal>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "device/base/errors.h"
#include "trainer/app/cli.h"
#include "trainer/app/env.h"

namespace {

// The command named `cmd`: its exit code (2 for an unknown one).
int dispatch(const std::string& cmd, int argc, char** argv, const char* usage) {
  if (cmd == "--version" || cmd == "version") {
    std::cout << zrepro::version_line() << "\n";
    return 0;
  }
  if (cmd == "env") return zrepro::env_command(argc - 1, argv + 1);
  if (cmd == "check") return zrepro::check_command(argc - 1, argv + 1);
  if (cmd == "run") return zrepro::run_command(argc - 1, argv + 1);
  if (cmd == "plan") return zrepro::plan_command(argc - 1, argv + 1);
  if (cmd == "config") return zrepro::config_command(argc - 1, argv + 1);
  if (cmd == "ab") return zrepro::ab_command(argc - 1, argv + 1);
  if (cmd == "verify") return zrepro::verify_command(argc - 1, argv + 1);
  if (cmd == "scenario") return zrepro::scenario_command(argc - 1, argv + 1);
  if (cmd == "doctor") return zrepro::doctor_command(argc - 1, argv + 1);
  if (cmd == "diagnose") return zrepro::diagnose_command(argc - 1, argv + 1);
  if (cmd == "bench") {
    if (argc >= 3 && std::string(argv[2]) == "comm") return zrepro::bench_comm(argc - 2, argv + 2);
    if (argc >= 3 && std::string(argv[2]) == "adam") return zrepro::bench_adam(argc - 2, argv + 2);
    if (argc >= 3 && std::string(argv[2]) == "copy") return zrepro::bench_copy(argc - 2, argv + 2);
    std::cerr << "zrepro bench: expected a benchmark name: comm, adam, copy\n";
    return 2;
  }
  std::cerr << "zrepro: unknown command \"" << cmd << "\"\n" << usage;
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  // A file-size limit (ulimit -f) makes a write past it fail with EFBIG instead of killing
  // the process by SIGXFSZ: the output that could not be written ends the run as an I/O
  // failure (exit 12) with its summary where that can still be written.
  std::signal(SIGXFSZ, SIG_IGN);
  // Commands that train or benchmark (and env, which reports it) want OpenBLAS's best
  // kernels; this may re-execute the binary once (about 0.4 s). Their child processes
  // inherit the choice. plan, config, diagnose and doctor compute nothing with BLAS.
  const std::string first = argc >= 2 ? argv[1] : "";
  if (first == "run" || first == "ab" || first == "scenario" || first == "check" || first == "verify" ||
      first == "bench" || first == "env")
    zrepro::ensure_blas_kernels(argv);
  const char* usage =
      "usage: zrepro <command> [options]\n"
      "  run     train the toy GPT under a DeepSpeed config (--config FILE --model tiny --steps N --out DIR)\n"
      "  plan    predict per-rank device memory and a fits/OOM verdict (--config FILE --model M --world-size N\n"
      "          --device-memory SIZE [--json])\n"
      "  config  print the effective config, every value with its source (--config FILE [--json])\n"
      "  ab      verify a fix: run side A and side B at each rank count and compare (--a A.json --b B.json\n"
      "          | --b-args FLAGS, --ranks 1,4, --plan-only, and any run flag); exit 0 when B fixes A\n"
      "  diagnose  a failed job's log -> checkpoint, scenario, evidence lines, numbers, what to try\n"
      "          (LOG [--config FILE --model M --world-size N --device-memory SIZE] [--json]\n"
      "          [--write-scenario DIR [--run]]: a ready reproduction of the job, its fixes verified)\n"
      "  check   regression test after an upgrade: --save B.json or --baseline B.json, with --run DIR or\n"
      "          -- RUN ARGS; exit 11 when memory, collectives, losses or step time moved past tolerance\n"
      "  env     this build and machine: versions (zrepro, LibTorch, BLAS, MPI, NCCL, CUDA), GPUs, host memory,\n"
      "          memlock, CPU flags ([--json]); `zrepro --version` prints the first line\n"
      "  bench   benchmarks: `bench comm` (collectives vs raw MPI, nccl-tests format),\n"
      "          `bench adam` (fused CPU Adam vs LibTorch AdamW vs memory bandwidth),\n"
      "          `bench copy` (offload copies: pinned vs pageable, d2h/h2d, overlap with compute)\n"
      "`zrepro <command> --help` lists a command's options.\n";
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::cout << usage;
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  try {
    return dispatch(cmd, argc, argv, usage);
  } catch (const zrepro::Interrupted& e) {
    // [Note: no orphan] (subprocess.h): a command's child was stopped by the signal and
    // waited for; the command ends as one process would.
    std::cerr << "[zrepro " << cmd << "] interrupted: " << e.what() << std::endl;
    return 128 + e.signal;
  } catch (const zrepro::IoError& e) {  // an output that could not be written whole
    std::cerr << "[zrepro " << cmd << "] error: " << e.what() << " (exit " << zrepro::kExitIo << ")" << std::endl;
    return zrepro::kExitIo;
  } catch (const std::filesystem::filesystem_error& e) {
    std::cerr << "[zrepro " << cmd << "] error: " << e.what() << " (exit " << zrepro::kExitIo << ")" << std::endl;
    return zrepro::kExitIo;
  }
}
