// DeepSpeed-style configuration dump: "  name ..... value" per resolved setting
// (the layout of DeepSpeedConfig.print), with zrepro's source column appended.
#include <sstream>

#include "trainer/config/ds_config.h"

namespace zrepro {

std::string format_config_dump(const DsConfig& cfg) {
  std::ostringstream os;
  os << "[zrepro] DeepSpeed config " << (cfg.file.empty() ? "(built-in)" : cfg.file) << " for world size "
     << cfg.world_size << ":\n";
  size_t width = 29;
  for (const auto& e : cfg.entries) width = std::max(width, e.path.size() + 2);
  for (const auto& e : cfg.entries) {
    std::string value = e.value.is_string() ? e.value.get<std::string>() : e.value.dump();
    os << "  " << e.path << ' ' << std::string(width - e.path.size(), '.') << ' ' << value << "   ["
       << source_name(e.source) << (e.note.empty() ? "" : ": " + e.note) << "]\n";
  }
  for (const auto& w : cfg.warnings) os << "[zrepro] warning: " << w << "\n";
  return os.str();
}

}  // namespace zrepro
