// Reading a file the user named on the command line (a DeepSpeed config, a Hugging Face
// config.json, TrainingArguments): one place that turns a folder or an unreadable path
// into a ConfigError naming the flag, before any stream touches it. (libstdc++ opens a
// folder as a stream and throws std::ios_base::failure on the first read, whatever the
// exception mask: `--model dir.json` and `--training-args /tmp` ended in terminate,
// exit 134, as `check --baseline RUN_DIR` had.)
#pragma once
#include <string>

namespace zrepro {

// The whole text of path. `flag` names the flag that gave it and `expected` what it
// should be ("a DeepSpeed JSON config file, e.g. configs/examples/stage0_fp32.json").
std::string read_user_file(const std::string& flag, const std::string& path, const std::string& expected);

}  // namespace zrepro
