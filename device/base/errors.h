// Exit codes of the command-line contract (docs/ARCHITECTURE.md) and the exceptions that
// carry them up to main(), which turns each into a summary and that exit code.
// Lives in device/base, below every layer, so that every layer can raise them.
#pragma once
#include <stdexcept>
#include <string>

namespace zrepro {

enum ExitCode : int {
  kExitOk = 0,
  kExitInternal = 1,
  kExitBadInput = 2,
  kExitOom = 3,
  kExitHang = 4,
  kExitNumerical = 5,
  // Offload's pinned host memory cannot be locked (memlock limit, no CAP_IPC_LOCK).
  kExitPinnedMemory = 9,
  // zrepro ab: the verdict (0 when B fixes the failure A shows).
  kExitAbNotFixed = 6,    // B fails too (on some rank count)
  kExitAbNoFailure = 7,   // A runs through everywhere: nothing to fix (the table still compares)
  // zrepro verify: an equivalence that must hold does not.
  kExitVerifyFailed = 8,
  // zrepro doctor: a checkpoint fails on this machine.
  kExitDoctorFailed = 10,
  // zrepro check: a figure moved past its tolerance against the baseline.
  kExitCheckRegressed = 11,
};

// Bad config, flag or file: the message names the key/flag/file, the value,
// what was expected and how to fix it.
struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Numerical failure (loss scale at its minimum, NaN loss): exit 5.
struct NumericalError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace zrepro
