// See user_file.h.
#include "trainer/config/user_file.h"

#include <filesystem>
#include <fstream>
#include <ios>
#include <sstream>

#include <unistd.h>

#include "device/base/errors.h"

namespace zrepro {

std::string read_user_file(const std::string& flag, const std::string& path, const std::string& expected) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw ConfigError(flag + ": \"" + path + "\" is a directory; pass " + expected);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(flag + ": cannot read \"" + path + "\" (no such file or not readable); pass " + expected);
  std::stringstream text;
  try {
    text << in.rdbuf();
  } catch (const std::ios_base::failure& e) {
    throw ConfigError(flag + ": cannot read \"" + path + "\" (" + e.what() + "); pass " + expected);
  }
  return text.str();
}

void refuse_nesting(const std::string& what) {
  throw ConfigError(what + ": nested deeper than " + std::to_string(kMaxUserNesting) + " levels or more than " +
                    std::to_string(kMaxUserValues) + " values once its aliases are expanded; a DeepSpeed, accelerate "
                    "or model config is a few levels and keys deep: give the file the job really uses");
}

nlohmann::json parse_user_json(const std::string& what, const std::string& text,
                               const nlohmann::json::parser_callback_t& callback) {
  using json = nlohmann::json;
  const json::parser_callback_t bounded = [&](int depth, json::parse_event_t ev, json& parsed) {
    if (depth > kMaxUserNesting) refuse_nesting(what);
    return callback ? callback(depth, ev, parsed) : true;
  };
  return json::parse(text, bounded, false);
}

void write_file_atomic(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << content;
    out.close();  // flush and close, both checked: a full disk shows here
    if (!out) {
      std::remove(tmp.c_str());
      throw IoError("cannot write " + path + " (" + std::to_string(content.size()) +
                    " bytes): the disk is full, a size limit was hit or the folder is not writable");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    throw IoError("cannot rename " + tmp + " to " + path + ": " + ec.message());
  }
}

void check_output_target(const std::string& flag, const std::string& path, const std::vector<std::string>& inputs,
                         bool (*ours)(const std::string& text)) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path.empty() || !fs::exists(path, ec)) return;
  for (const std::string& input : inputs)
    if (!input.empty() && fs::equivalent(path, input, ec))
      throw ConfigError(flag + " " + path + ": that is one of this run's inputs (" + input + "); zrepro never writes "
                        "an output over an input: give another path");
  if (!fs::is_regular_file(path, ec))
    throw ConfigError(flag + " " + path + ": exists and is not a file; give a file's path");
  std::ifstream in(path);
  std::string head(4096, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(in.gcount()));
  if (!head.empty() && !ours(head))
    throw ConfigError(flag + " " + path + ": the file exists and is not one zrepro wrote; zrepro never replaces a file "
                      "it did not write: give another path, or remove it yourself");
}

}  // namespace zrepro
