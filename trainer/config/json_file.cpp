// See json_file.h.
#include "trainer/config/json_file.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "trainer/config/user_file.h"

namespace zrepro {

using json = nlohmann::json;

json read_json_file(const std::string& path) {
  // A folder opens as a stream and throws std::ios_base::failure ("Is a directory") on the
  // first read in libstdc++, whatever the exception mask (issue 31: check --baseline
  // RUN_DIR ended in terminate, exit 134). A folder, or any read error, is no JSON.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return nullptr;
  std::ifstream in(path);
  if (!in) return nullptr;
  try {
    std::stringstream text;
    text << in.rdbuf();
    json j = parse_user_json(path, text.str());  // [Note: a user's file is bounded]
    return j.is_discarded() ? json(nullptr) : j;
  } catch (const std::ios_base::failure&) {
    return nullptr;
  }
}

std::string json_text(const json& j, int indent) { return j.dump(indent, ' ', false, json::error_handler_t::replace); }

void write_json_file(const std::string& path, const json& j) { write_file_atomic(path, json_text(j) + "\n"); }

}  // namespace zrepro
