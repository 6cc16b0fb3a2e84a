// See user_file.h.
#include "trainer/config/user_file.h"

#include <filesystem>
#include <fstream>
#include <ios>
#include <sstream>

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

}  // namespace zrepro
