// See rank_configs.h.
#include "trainer/config/rank_configs.h"

#include <map>
#include <set>

namespace zrepro {

using json = nlohmann::json;

namespace {

// "a.b.c" -> value for every leaf (arrays are leaves).
void flatten(const json& j, const std::string& prefix, std::map<std::string, std::string>& out) {
  if (j.is_object() && !j.empty()) {
    for (const auto& [k, v] : j.items()) flatten(v, prefix.empty() ? k : prefix + "." + k, out);
    return;
  }
  out[prefix] = j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

std::vector<std::string> config_mismatch(const std::vector<json>& per_rank) {
  const int n = static_cast<int>(per_rank.size());
  std::vector<std::map<std::string, std::string>> flat(n);
  std::set<std::string> keys;
  for (int r = 0; r < n; ++r) {
    flatten(per_rank[r], "", flat[r]);
    for (const auto& [k, v] : flat[r]) keys.insert(k);
  }
  std::vector<std::string> lines;
  for (const auto& key : keys) {
    std::map<std::string, std::vector<int>> by_value;
    for (int r = 0; r < n; ++r) {
      auto it = flat[r].find(key);
      by_value[it == flat[r].end() ? "(unset)" : it->second].push_back(r);
    }
    if (by_value.size() < 2) continue;
    // The most common value is "the others'"; each other value names its ranks.
    auto common = by_value.begin();
    for (auto it = by_value.begin(); it != by_value.end(); ++it)
      if (it->second.size() > common->second.size()) common = it;
    for (const auto& [value, ranks] : by_value) {
      if (value == common->first) continue;
      std::string who;
      for (int r : ranks) who += (who.empty() ? "rank " : ", ") + std::to_string(r);
      lines.push_back(who + ": " + key + "=" + value + ", others " + common->first);
    }
  }
  return lines;
}

}  // namespace zrepro
