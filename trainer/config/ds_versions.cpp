// See ds_versions.h.
#include "trainer/config/ds_versions.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "device/base/errors.h"

#ifndef ZREPRO_CONFIGS_DIR
#define ZREPRO_CONFIGS_DIR "configs"
#endif

namespace zrepro {

using json = nlohmann::json;

namespace {

struct Table {
  std::vector<std::string> releases;
  std::vector<VersionChange> changes;
};

std::string data_path() {
  const char* dir = std::getenv("ZREPRO_DATA_DIR");
  return std::string(dir && *dir ? dir : ZREPRO_CONFIGS_DIR) + "/deepspeed_versions.json";
}

Table load_table() {
  const std::string path = data_path();
  std::ifstream in(path);
  if (!in) throw ConfigError(path + ": cannot read the DeepSpeed version table (set ZREPRO_DATA_DIR to zrepro's configs/)");
  const json j = json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.value("releases", json()).is_array() || !j.value("changes", json()).is_array())
    throw ConfigError(path + ": not a version table ({\"releases\": [...], \"changes\": [...]})");
  Table t;
  for (const auto& r : j["releases"]) t.releases.push_back(r.get<std::string>());
  for (const auto& c : j["changes"]) {
    VersionChange v;
    v.key = c.at("key").get<std::string>(), v.kind = c.at("kind").get<std::string>();
    v.since = c.at("since").get<std::string>();
    v.before = c.value("before", json()), v.after = c.value("after", json());
    v.message = c.value("message", ""), v.pr = c.value("pr", ""), v.evidence = c.value("evidence", "");
    v.note = c.value("note", ""), v.effect = c.value("effect", "");
    v.when = c.value("when", json());
    t.changes.push_back(std::move(v));
  }
  return t;
}

const Table& table() {
  static const Table t = load_table();
  return t;
}

std::string cite(const VersionChange& c) { return c.pr.empty() ? "" : " (" + c.pr + ")"; }

}  // namespace

const std::vector<VersionChange>& version_changes() { return table().changes; }

namespace {

// The config's value at a dotted key (null when unset).
nlohmann::json value_at(const nlohmann::json& config, const std::string& key) {
  const nlohmann::json* node = &config;
  size_t at = 0;
  for (;;) {
    const size_t dot = key.find('.', at);
    const std::string part = key.substr(at, dot == std::string::npos ? std::string::npos : dot - at);
    if (!node->is_object() || !node->contains(part)) return nullptr;
    node = &(*node)[part];
    if (dot == std::string::npos) return *node;
    at = dot + 1;
  }
}

bool key_set(const nlohmann::json& config, const std::string& key) { return !value_at(config, key).is_null(); }

// A behaviour's condition ("when": {"zero_optimization.stage": 2}) holds for the config.
bool condition_holds(const nlohmann::json& config, const nlohmann::json& when) {
  if (!when.is_object()) return true;
  for (const auto& [key, value] : when.items())
    if (value_at(config, key) != value) return false;
  return true;
}

}  // namespace

std::vector<const VersionChange*> changes_touching(const nlohmann::json& config, const std::string& after,
                                                   const std::string& upto) {
  std::vector<const VersionChange*> out;
  for (const VersionChange& c : version_changes()) {
    if (compare_versions(c.since, after) <= 0 || compare_versions(c.since, upto) > 0) continue;
    const std::string block = c.key.substr(0, c.key.find('.'));
    const bool touches = key_set(config, c.key) || (c.kind == "default" && !key_set(config, c.key)) ||
                         (c.kind == "behaviour" && key_set(config, block));
    if (touches && condition_holds(config, c.when)) out.push_back(&c);
  }
  return out;
}
const std::vector<std::string>& deepspeed_releases() { return table().releases; }
const std::string& newest_deepspeed_version() { return table().releases.back(); }

int compare_versions(const std::string& a, const std::string& b) {
  std::istringstream x(a), y(b);
  std::string p, q;
  while (true) {
    const bool more_a = static_cast<bool>(std::getline(x, p, '.')), more_b = static_cast<bool>(std::getline(y, q, '.'));
    if (!more_a && !more_b) return 0;
    const long u = more_a ? std::atol(p.c_str()) : 0, w = more_b ? std::atol(q.c_str()) : 0;
    if (u != w) return u < w ? -1 : 1;
  }
}

std::string check_deepspeed_version(const std::string& flag, const std::string& v) {
  for (const auto& r : deepspeed_releases())
    if (r == v) return v;
  throw ConfigError(flag + ": got \"" + v + "\", expected a DeepSpeed release from " + deepspeed_releases().front() +
                    " to " + newest_deepspeed_version() + " (configs/deepspeed_versions.json lists them)");
}

const VersionChange* change_in_effect(const std::string& key, const std::string& kind, const std::string& v) {
  const VersionChange* best = nullptr;
  for (const auto& c : version_changes())
    if (c.key == key && c.kind == kind && compare_versions(c.since, v) <= 0 &&
        (!best || compare_versions(c.since, best->since) > 0))
      best = &c;
  return best;
}

const VersionChange* not_yet_added(const std::string& key, const std::string& v) {
  for (const auto& c : version_changes())
    if (c.key == key && c.kind == "added" && compare_versions(c.since, v) > 0) return &c;
  return nullptr;
}

std::optional<VersionedDefault> versioned_default(const std::string& key, const std::string& v) {
  const VersionChange* oldest = nullptr;
  for (const auto& c : version_changes())
    if (c.key == key && c.kind == "default" && (!oldest || compare_versions(c.since, oldest->since) < 0)) oldest = &c;
  if (!oldest) return std::nullopt;
  if (const VersionChange* now = change_in_effect(key, "default", v))
    return VersionedDefault{now->after, "since DeepSpeed " + now->since + cite(*now)};
  return VersionedDefault{oldest->before, "DeepSpeed " + v + "'s; " + oldest->after.dump() + " since " +
                                              oldest->since + cite(*oldest)};
}

}  // namespace zrepro
