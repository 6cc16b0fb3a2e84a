// See torch_python.h.
#include "trainer/runtime/torch_python.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <vector>

#include "device/base/errors.h"
#include "trainer/runtime/subprocess.h"

namespace zrepro {

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

}  // namespace

int python_probe_timeout_s() {
  const std::string v = env("ZREPRO_PROBE_TIMEOUT_S");
  char* end = nullptr;
  const long s = v.empty() ? 0 : std::strtol(v.c_str(), &end, 10);
  return s > 0 && end && *end == '\0' ? static_cast<int>(std::min(s, 86400L)) : 120;
}

std::vector<std::string> under_probe_timeout(std::vector<std::string> argv) {
  argv.insert(argv.begin(), {"timeout", "--kill-after=5", std::to_string(python_probe_timeout_s())});
  return argv;
}

std::string python_torch_version(const std::string& python, const std::string& log) {
  if (python.empty()) return "";
  const int rc = run_program(under_probe_timeout({python, "-c", "import torch; print('ZREPRO_TORCH', torch.__version__)"}),
                             {}, log);
  if (rc == 124 || rc == 137) {  // timeout's own codes: it did not answer
    std::ofstream(log, std::ios::app) << "zrepro: " << python << " did not answer within " << python_probe_timeout_s()
                                      << " s (ZREPRO_PROBE_TIMEOUT_S sets the wait)\n";
    return "";
  }
  if (rc != 0) return "";
  std::ifstream in(log);
  const std::string marker = "ZREPRO_TORCH ";
  for (std::string l; std::getline(in, l);)
    if (l.rfind(marker, 0) == 0) return l.substr(marker.size());
  return "";
}

TorchPython find_torch_python(const std::string& flag, const std::string& flag_value, const std::string& log) {
  // A Python the user named must have torch.
  for (const auto& [value, name] : std::vector<std::pair<std::string, std::string>>{
           {flag_value, flag}, {env("ZREPRO_TORCH_PYTHON"), "ZREPRO_TORCH_PYTHON"}}) {
    if (value.empty()) continue;
    const std::string v = python_torch_version(value, log);
    if (v.empty()) {
      std::string said = tail_of(log, 1);
      said.erase(0, std::min(said.size(), said.find_first_not_of(' ')));
      while (!said.empty() && std::isspace(static_cast<unsigned char>(said.back()))) said.pop_back();
      throw ConfigError(name + " " + value + ": not a Python that imports torch (" +
                        (said.empty() ? std::string("it printed nothing") : "it said \"" + said + "\"") +
                        "); name one that does (pip install torch there), or leave " + name + " out");
    }
    return {value, v, name};
  }
  const std::string python3_version = python_torch_version("python3", log);
  if (python3_version.rfind("2.", 0) == 0) return {"python3", python3_version, "python3 on PATH"};
  const std::string venv = !env("ZREPRO_TORCH_VENV").empty() ? env("ZREPRO_TORCH_VENV")
                                                             : env("HOME") + "/.cache/zrepro/torch-venv";
  const std::string venv_python = venv + "/bin/python";
  const std::string v = python_torch_version(venv_python, log);
  if (!v.empty()) return {venv_python, v, "the torch venv " + venv};
  throw ConfigError(flag + ": no Python with torch found (python3 has " +
                    (python3_version.empty() ? std::string("none") : "torch " + python3_version) + ", and " +
                    venv_python + " none): name one with " + flag + " PY or ZREPRO_TORCH_PYTHON, or run "
                    "scripts/setup.sh, which installs the pinned torch into " + venv);
}

}  // namespace zrepro
