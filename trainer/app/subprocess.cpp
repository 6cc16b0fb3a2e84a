// See subprocess.h.
#include "trainer/app/subprocess.h"

#include <sys/wait.h>
#include <unistd.h>
#include <wordexp.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <stdexcept>

#include "device/base/errors.h"

namespace zrepro {

using json = nlohmann::json;

// Shell-like words of a flag value ("--micro-batch 2 --activation-checkpointing").
std::vector<std::string> words(const std::string& flag, const std::string& text) {
  wordexp_t w;
  if (wordexp(text.c_str(), &w, WRDE_NOCMD | WRDE_UNDEF) != 0)
    throw ConfigError(flag + ": cannot split \"" + text + "\" into flags (unbalanced quotes or a command substitution)");
  std::vector<std::string> out(w.we_wordv, w.we_wordv + w.we_wordc);
  wordfree(&w);
  return out;
}

// Runs this binary with args, its output into log; returns the exit code.
int run_self(const std::vector<std::string>& args, const std::string& log) {
  std::vector<char*> argv;
  std::string self = "/proc/self/exe";
  argv.push_back(self.data());
  std::vector<std::string> copy = args;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::cout << std::flush;
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("zrepro ab: fork failed");
  if (pid == 0) {
    FILE* f = std::fopen(log.c_str(), "w");
    if (f) {
      dup2(fileno(f), STDOUT_FILENO);
      dup2(fileno(f), STDERR_FILENO);
    }
    execv(argv[0], argv.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int run_self_or_refuse(const std::string& what, const std::vector<std::string>& args, const std::string& log) {
  const int code = run_self(args, log);
  if (code == kExitBadInput)
    throw ConfigError(what + " was refused (exit 2):\n" + tail_of(log, 6) + "  fix the flags or config named above");
  return code;
}

std::string tail_of(const std::string& path, size_t lines) {
  std::ifstream in(path);
  std::vector<std::string> all;
  for (std::string l; std::getline(in, l);) all.push_back(l);
  std::string out;
  for (size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i) out += "    " + all[i] + "\n";
  return out;
}

json read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return nullptr;
  try {
    return json::parse(in);
  } catch (const json::exception&) {
    return nullptr;
  }
}

}  // namespace zrepro
