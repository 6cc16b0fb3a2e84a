// The user's Python with torch, for what only Python's torch can do: rewriting a
// checkpoint DeepSpeed wrote into files LibTorch reads (`zrepro checkpoint
// from-deepspeed`), and the torch a bisect's DeepSpeed releases run on.
//
// [Note: which Python is the user's] The same order scripts/torch-prefix.sh follows to
// choose the torch zrepro builds against, so by default it is that torch's own Python:
// the flag's value (--python), else $ZREPRO_TORCH_PYTHON, else python3 on PATH when it
// imports torch 2.x, else the pinned torch's venv ($ZREPRO_TORCH_VENV, default
// ~/.cache/zrepro/torch-venv) that scripts/setup.sh makes when python3 has no torch.
#pragma once
#include <string>
#include <vector>

namespace zrepro {

// [Note: a Python that never answers] Asking a Python for its torch (or a release's
// environment for its DeepSpeed) waits at most python_probe_timeout_s() (120 s, a cold
// `import torch` on a slow disk takes a few tens; $ZREPRO_PROBE_TIMEOUT_S sets it): a
// wrapper that hangs, an interpreter waiting on a lock or on stdin, is then treated as no
// Python, its log saying it did not answer, never waited on for good.
int python_probe_timeout_s();
// argv under coreutils' timeout at python_probe_timeout_s() (SIGKILL 5 s later).
std::vector<std::string> under_probe_timeout(std::vector<std::string> argv);

// The torch version of `python` ("2.15.0+cu132", a path or a name on PATH); "" when it
// cannot be run, has no torch or does not answer in time. Its output goes to `log`.
std::string python_torch_version(const std::string& python, const std::string& log);

struct TorchPython {
  std::string python;   // what to run
  std::string version;  // its torch
  std::string chosen;   // why this one ("--python", "ZREPRO_TORCH_PYTHON", "python3 on PATH", "the torch venv")
};
// [Note: which Python is the user's]. A named Python (flag_value, ZREPRO_TORCH_PYTHON)
// without torch is bad input: ConfigError naming it and the fix; so is finding none.
TorchPython find_torch_python(const std::string& flag, const std::string& flag_value, const std::string& log);
// The --python flag's help where find_torch_python chooses: the order above, in one line.
constexpr const char* kTorchPythonFlagHelp =
    "a Python with torch (default: $ZREPRO_TORCH_PYTHON, else python3 when it has torch 2.x, else the torch venv "
    "scripts/setup.sh made)";

}  // namespace zrepro
