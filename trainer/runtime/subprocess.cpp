// See subprocess.h.
#include "trainer/runtime/subprocess.h"

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <wordexp.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <thread>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <stdexcept>

#include "device/base/errors.h"
#include "trainer/runtime/liveness.h"

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

namespace {

std::atomic<pid_t> g_child{0};
std::atomic<int> g_signal{0};

// [Note: no orphan]: a signal that arrives before the child exists is remembered and sent
// once it does.
void forward_to_child(int sig) {
  g_signal.store(sig);
  const pid_t child = g_child.load();
  if (child > 0) ::kill(child, sig);
}

// SIGINT / SIGTERM forwarded for the lifetime of one child, the previous handlers after.
struct ForwardSignals {
  ForwardSignals() {
    g_signal.store(0);
    prev_int = std::signal(SIGINT, forward_to_child);
    prev_term = std::signal(SIGTERM, forward_to_child);
  }
  ~ForwardSignals() {
    g_child.store(0);
    std::signal(SIGINT, prev_int);
    std::signal(SIGTERM, prev_term);
  }
  void (*prev_int)(int);
  void (*prev_term)(int);
};

// The last bytes of a file (a child's log grows while it is read).
std::string file_tail(const std::string& path, std::streamoff bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  in.seekg(std::max<std::streamoff>(0, size - bytes));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return text;
}

// [Note: progress of a child]
class ChildProgress {
 public:
  ChildProgress(std::string what, std::string log) : what_(std::move(what)), log_(std::move(log)) {
    tty_ = ::isatty(STDERR_FILENO) != 0;
    interval_s_ = tty_ ? 1.0 : 10.0;
    if (const char* env = std::getenv("ZREPRO_HEARTBEAT_S")) {
      const double v = std::atof(env);
      if (v > 0) interval_s_ = v;
    }
  }
  ~ChildProgress() {
    if (tty_ && shown_) std::fprintf(stderr, "\r%100s\r", "");
  }
  void tick() {
    if (what_.empty()) return;
    const double t = seconds_since(start_);
    if (t < next_s_) return;
    next_s_ = t + interval_s_;
    const std::string line = progress_line(what_, child_steps(file_tail(log_, 16384)), t);
    if (tty_) std::fprintf(stderr, "\r%-100s", line.c_str());
    else std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
    shown_ = true;
  }

 private:
  static double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  }
  std::string what_, log_;
  bool tty_ = false, shown_ = false;
  double interval_s_ = 10, next_s_ = 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace

ChildSteps child_steps(const std::string& tail) {
  ChildSteps s;
  // The newest of a step line and a step marker (kChildProgressEnv).
  size_t at = std::string::npos, key_size = 0;
  for (const std::string key : {"[zrepro] step=", "[zrepro] at step="}) {
    const size_t k = tail.rfind(key);
    if (k != std::string::npos && (at == std::string::npos || k > at)) at = k, key_size = key.size();
  }
  // torch.utils.cpp_extension: "Building extension module X..." until "Loading extension module X...".
  const std::string building = "Building extension module ";
  const size_t b = tail.rfind(building);
  if (b != std::string::npos && tail.find("Loading extension module ", b) == std::string::npos) {
    const size_t end = tail.find_first_of(".\n", b + building.size());
    s.activity = "building the " + tail.substr(b + building.size(), end == std::string::npos ? std::string::npos
                                                                                           : end - b - building.size()) +
                 " extension";
  }
  if (at == std::string::npos) return s;
  long long n = 0, m = 0;
  if (std::sscanf(tail.c_str() + at + key_size, "%lld/%lld", &n, &m) == 2 && n >= 0 && m > 0 && n <= m)
    s.done = n, s.total = m;
  return s;
}

std::string progress_line(const std::string& what, const ChildSteps& steps, double elapsed_s) {
  char b[256];
  const long long secs = std::llround(elapsed_s);
  if (steps.total == 0) {
    std::snprintf(b, sizeof b, "[zrepro] %s: %s, %lld s", what.c_str(),
                  steps.activity.empty() ? "starting" : steps.activity.c_str(), secs);
  } else if (steps.done == 0) {
    std::snprintf(b, sizeof b, "[zrepro] %s: step 0/%lld, %lld s", what.c_str(), steps.total, secs);
  } else {
    const double eta = elapsed_s / static_cast<double>(steps.done) * static_cast<double>(steps.total - steps.done);
    std::snprintf(b, sizeof b, "[zrepro] %s: step %lld/%lld, %lld s, ETA %lld s", what.c_str(), steps.done,
                  steps.total, secs, std::llround(eta));
  }
  return b;
}

// Runs this binary with args, its output into log; returns the exit code.
int run_self(const std::vector<std::string>& args, const std::string& log, const std::string& what) {
  std::vector<std::string> argv = {"/proc/self/exe"};
  argv.insert(argv.end(), args.begin(), args.end());
  // [Note: progress of a child]: a zrepro child marks every step in its log, not only the
  // steps its --log-every prints.
  return run_program(argv, {{kChildProgressEnv, "1"}}, log, what);
}

int run_program(const std::vector<std::string>& args, const EnvVars& env, const std::string& log,
                const std::string& what) {
  if (args.empty()) throw std::logic_error("run_program: no program");
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::cout << std::flush;
  ForwardSignals forwarding;
  const pid_t parent = ::getpid();
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("zrepro: fork failed: " + std::string(std::strerror(errno)));
  if (pid == 0) {
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
    ::setpgid(0, 0);                    // a terminal's Ctrl-C reaches the parent, which forwards it once
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // the parent killed outright: the child stops too
    if (::getppid() != parent) _exit(kExitInterrupted);
    FILE* f = std::fopen(log.c_str(), "w");
    if (f) {
      dup2(fileno(f), STDOUT_FILENO);
      dup2(fileno(f), STDERR_FILENO);
    }
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    execvp(argv[0], argv.data());
    std::fprintf(stderr, "zrepro: cannot start %s: %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  g_child.store(pid);
  if (const int early = g_signal.load()) ::kill(pid, early);
  int status = 0;
  {
    ChildProgress progress(what, log);
    for (;;) {
      // Exited, not yet reaped: while it is a zombie its process group id cannot be reused.
      siginfo_t info{};
      const int rc = waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT);
      if ((rc == 0 && info.si_pid == pid) || (rc < 0 && errno != EINTR)) break;
      progress.tick();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  // [Note: no orphan] The child led its own process group: whatever it left there (a
  // worker that ignored the forwarded signal, a background job of a shell) is ended now.
  ::kill(-pid, SIGKILL);
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (const int sig = g_signal.load()) {
    const std::string who = args[0] == "/proc/self/exe" ? "zrepro " + (args.size() > 1 ? args[1] : "") : args[0];
    throw Interrupted(sig, std::string(signal_name(sig)) + ": the child `" + who +
                               "` was stopped (exit " + std::to_string(code) + "; its output: " + log + ")");
  }
  return code;
}

int run_self_or_refuse(const std::string& what, const std::vector<std::string>& args, const std::string& log) {
  const int code = run_self(args, log, what);
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

}  // namespace zrepro
