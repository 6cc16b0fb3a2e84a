// Exit codes of the command-line contract (docs/design/ARCHITECTURE.md) and the exceptions that
// carry them up to main(), which turns each into a summary and that exit code.
// Lives in device/base, below every layer, so that every layer can raise them.
#pragma once
#include <stdexcept>
#include <string>
#include <utility>

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
  // An output file could not be written (full disk, file size limit, I/O error).
  kExitIo = 12,
  // Out of host memory: the emulated kernel OOM killer at a save or a consolidation
  // (--host-memory), a host allocation that failed, or a run refused before it would not
  // fit in this host. Not the device's 3: the fix is another one.
  kExitHostOom = 13,
  // Stopped by SIGINT (130) or SIGTERM (143): 128 + the signal, as a shell reports it.
  kExitInterrupted = 130,
};

// Bad config, flag or file: the message names the key/flag/file, the value,
// what was expected and how to fix it.
struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// An output could not be written whole (full disk, quota, file size limit): exit 12.
// The final name never holds a partial file.
struct IoError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// SIGINT / SIGTERM seen at a step boundary: the run stops there, exit 128 + signal.
struct Interrupted : std::runtime_error {
  Interrupted(int sig, const std::string& what) : std::runtime_error(what), signal(sig) {}
  int signal;
};

// An emulated host-memory capacity exceeded (--host-memory): what the kernel's OOM killer
// ends. Exit 3, as a device OOM; `phase` names where (consolidate: zero_to_fp32).
struct HostMemoryExhausted : std::runtime_error {
  HostMemoryExhausted(std::string phase_, const std::string& what) : std::runtime_error(what), phase(std::move(phase_)) {}
  std::string phase;
};

// Numerical failure (loss scale at its minimum, NaN loss): exit 5.
struct NumericalError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace zrepro
