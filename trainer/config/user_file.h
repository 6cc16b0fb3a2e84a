// Files: reading one the user named on the command line, and writing an output whole.
//
// Reading a file the user named on the command line (a DeepSpeed config, a Hugging Face
// config.json, TrainingArguments): one place that turns a folder or an unreadable path
// into a ConfigError naming the flag, before any stream touches it. (libstdc++ opens a
// folder as a stream and throws std::ios_base::failure on the first read, whatever the
// exception mask: `--model dir.json` and `--training-args /tmp` ended in terminate,
// exit 134, as `check --baseline RUN_DIR` had.)
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace zrepro {

// The whole text of path. `flag` names the flag that gave it and `expected` what it
// should be ("a DeepSpeed JSON config file, e.g. configs/examples/stage0_fp32.json").
std::string read_user_file(const std::string& flag, const std::string& path, const std::string& expected);

// [Note: a user's file is bounded] What a user's file holds is bounded before anything walks
// it: JSON nested deeper than kMaxUserNesting levels (a DeepSpeed config is at most 4, a
// Hugging Face config.json 3) is refused, as is YAML that expands past kMaxUserValues
// values (aliases: a "billion laughs") or refers to itself. nlohmann's parser is
// iterative, but every later walk (dump, compare, copy) recurses: a config nested 100,000
// deep ended `zrepro run` in SIGSEGV, and a 9-level alias YAML grew for minutes.
constexpr int kMaxUserNesting = 64;
// An accelerate config holds about 25 values; 10,000 refuses an alias bomb in ~40 ms (a
// million took 4 s to walk, 13 s under the fuzzer's sanitizers).
constexpr int64_t kMaxUserValues = 10000;

// text as JSON: discarded (is_discarded()) when it is not JSON; ConfigError naming `what`
// (the flag and the path) when it nests deeper than kMaxUserNesting. `callback`, when
// given, sees every event as nlohmann's parser callback does.
nlohmann::json parse_user_json(const std::string& what, const std::string& text,
                               const nlohmann::json::parser_callback_t& callback = nullptr);
// The ConfigError for a file past the bound, naming `what` and the bound it passed.
[[noreturn]] void refuse_nesting(const std::string& what);

// Writes content to path through a temporary file in the same folder, renamed once the
// write and close succeeded: a reader sees the old file or the whole new one, never a
// part. A failed write (full disk, quota, file size limit) removes the temporary and
// throws IoError naming the path (exit 12).
void write_file_atomic(const std::string& path, const std::string& content);

// [Note: an output never replaces an input] Before an output named by `flag` is written to
// path: refused (ConfigError, exit 2) when path is one of the run's inputs (the same file,
// by identity, whatever its spelling), or exists and `ours` says zrepro did not write it
// (given its text). A missing or empty path passes.
void check_output_target(const std::string& flag, const std::string& path, const std::vector<std::string>& inputs,
                         bool (*ours)(const std::string& text));

}  // namespace zrepro
