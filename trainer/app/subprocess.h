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
// The last lines of a file, indented, for error messages.
std::string tail_of(const std::string& path, size_t lines);
// A JSON file, or null when it is missing or not valid JSON.
nlohmann::json read_json_file(const std::string& path);
// Shell-like words of a flag's value ("--micro-batch 2 --activation-checkpointing");
// throws ConfigError naming the flag on unbalanced quotes.
std::vector<std::string> words(const std::string& flag, const std::string& text);

}  // namespace zrepro
