// zrepro: reproduce DeepSpeed ZeRO failures with a small LibTorch trainer.
// main() finds the command in the table (trainer/app/commands.h) and runs it; a command
// returns its exit code (docs/reference/exit-codes.md).
#include <csignal>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "device/base/errors.h"
#include "trainer/app/commands.h"
#include "trainer/app/env.h"

int main(int argc, char** argv) {
  // A file-size limit (ulimit -f) makes a write past it fail with EFBIG instead of killing
  // the process by SIGXFSZ: the output that could not be written ends the run as an I/O
  // failure (exit 12) with its summary where that can still be written.
  std::signal(SIGXFSZ, SIG_IGN);
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::cout << zrepro::usage_text();
    return argc < 2 ? zrepro::kExitBadInput : zrepro::kExitOk;
  }
  const std::string cmd = argv[1];
  if (cmd == "--version" || cmd == "version") {
    std::cout << zrepro::version_line() << "\n";
    return zrepro::kExitOk;
  }
  if (cmd == "--list-commands") {  // one line per page of docs/reference/cli.md
    for (const auto& line : zrepro::command_lines()) std::cout << line << "\n";
    return zrepro::kExitOk;
  }
  const zrepro::Command* c = zrepro::find_command(cmd);
  if (!c) {
    std::cerr << "zrepro: unknown command \"" << cmd << "\"\n" << zrepro::usage_text();
    return zrepro::kExitBadInput;
  }
  // Commands that train or benchmark (and env, which reports it) want OpenBLAS's best
  // kernels; this may re-execute the binary once (about 0.4 s). Their children inherit it.
  if (c->uses_blas) zrepro::ensure_blas_kernels(argv);
  try {
    return c->main(argc - 1, argv + 1);
  } catch (const zrepro::Interrupted& e) {
    // [Note: no orphan] (trainer/runtime/subprocess.h): a command's child was stopped by the signal and
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
