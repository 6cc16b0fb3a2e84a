// Running zrepro itself as a child process, for the commands that compose runs
// (ab, verify): the child's output goes to a log file, its exit code comes back, and
// the JSON files it wrote are read back tolerantly (null when missing or cut).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace zrepro {

// `zrepro ARGS...` (this binary), stdout and stderr into log; the exit code (128 + signal
// when killed).
int run_self(const std::vector<std::string>& args, const std::string& log);
// run_self for a child whose bad input is the caller's: its exit 2 becomes a ConfigError
// naming `what` (e.g. "side A on 2 rank(s)") with the child's last lines.
int run_self_or_refuse(const std::string& what, const std::vector<std::string>& args, const std::string& log);
// The last lines of a file, indented, for error messages.
std::string tail_of(const std::string& path, size_t lines);
// A JSON file, or null when it is missing or not valid JSON.
nlohmann::json read_json_file(const std::string& path);
// Shell-like words of a flag's value ("--micro-batch 2 --activation-checkpointing");
// throws ConfigError naming the flag on unbalanced quotes.
std::vector<std::string> words(const std::string& flag, const std::string& text);

}  // namespace zrepro
