// Running zrepro itself (ab, verify) or another program (bisect's DeepSpeed runs) as a
// child process: the child's output goes to a log file, its exit code comes back, and
// the JSON files it wrote are read back tolerantly (null when missing or cut).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace zrepro {

// `zrepro ARGS...` (this binary), stdout and stderr into log; the exit code (128 + signal
// when killed).
// [Note: no orphan] The child runs in its own process group and gets SIGTERM if this
// process dies; a SIGINT / SIGTERM sent to this process while it waits is forwarded to
// the child once (a terminal's Ctrl-C reaches only this process, not the child twice),
// the child is waited for (it writes its summary at its step boundary) and then
// Interrupted is thrown: the command ends with 128 + the signal and leaves no process.
// Once the child has exited, what it left in its process group is killed.
// [Note: progress of a child] With `what` (e.g. "side A on 2 rank(s)"), the wait shows
// where the child is: its last step line in the log ("[zrepro] step=N/M"), the time it
// has run and an ETA from its pace. On a terminal (stderr) one line is rewritten every
// second; otherwise (a CI log) a heartbeat line is printed every 10 s, so a long
// comparison is never a silent minute. ZREPRO_HEARTBEAT_S sets the interval (tests).
int run_self(const std::vector<std::string>& args, const std::string& log, const std::string& what = "");
// Set in a zrepro child's environment by run_self: `zrepro run` then writes a marker line
// "[zrepro] at step=N/M" before its first step and after each, whatever --log-every says.
constexpr const char* kChildProgressEnv = "ZREPRO_CHILD_PROGRESS";
// Another program (argv[0] looked up on PATH) the same way: its own process group, signals
// forwarded, no orphan, progress from its "[zrepro] step=N/M" lines; `env` is added to this
// process's environment for the child (zrepro bisect runs DeepSpeed's Python so).
using EnvVars = std::vector<std::pair<std::string, std::string>>;
int run_program(const std::vector<std::string>& argv, const EnvVars& env, const std::string& log,
                const std::string& what = "");
// run_self for a child whose bad input is the caller's: its exit 2 becomes a ConfigError
// naming `what` with the child's last lines.
int run_self_or_refuse(const std::string& what, const std::vector<std::string>& args, const std::string& log);

// A child's progress as its log shows it: the last "[zrepro] step=N/M" line's N and M
// (0, 0 before the first).
struct ChildSteps {
  long long done = 0, total = 0;
  // Before the first step, what the child is busy with where its log says so: PyTorch's
  // cpp_extension building an op ("building the cpu_adam extension": a DeepSpeed release's
  // first optimizer offload spends minutes there), else "".
  std::string activity;
};
ChildSteps child_steps(const std::string& log_tail);
// The progress line: "[zrepro] side A on 2 rank(s): step 20/50, 12 s, ETA 18 s".
std::string progress_line(const std::string& what, const ChildSteps& steps, double elapsed_s);
// The last lines of a file, indented, for error messages.
std::string tail_of(const std::string& path, size_t lines);
// Shell-like words of a flag's value ("--micro-batch 2 --activation-checkpointing");
// throws ConfigError naming the flag on unbalanced quotes.
std::vector<std::string> words(const std::string& flag, const std::string& text);

}  // namespace zrepro
