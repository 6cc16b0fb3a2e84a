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

namespace zrepro {

// The whole text of path. `flag` names the flag that gave it and `expected` what it
// should be ("a DeepSpeed JSON config file, e.g. configs/examples/stage0_fp32.json").
std::string read_user_file(const std::string& flag, const std::string& path, const std::string& expected);

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
