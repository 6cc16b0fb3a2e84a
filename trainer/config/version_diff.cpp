// See version_diff.h.
#include "trainer/config/version_diff.h"

#include <map>
#include <set>
#include <sstream>

#include "device/base/errors.h"
#include "trainer/config/ds_versions.h"
#include "trainer/config/user_file.h"

namespace zrepro {

using json = nlohmann::json;

namespace {

struct Side {
  std::map<std::string, json> entries;  // key -> {value, source, note}
  json refused, warnings = json::array();
};

Side resolve(const std::string& path, ConfigFlags flags, const std::string& v) {
  flags.deepspeed_version = v;
  Side s;
  try {
    const DsConfig c = load_ds_config(path, flags);
    for (const auto& e : c.entries)
      s.entries[e.path] = {{"value", e.value}, {"source", source_name(e.source)}, {"note", e.note}};
    for (const auto& w : c.warnings) s.warnings.push_back(w);
  } catch (const ConfigError& e) {
    s.refused = e.what();
  }
  return s;
}

// A setting of an offload block whose device is "none": it does nothing, whatever its value.
bool inside_unused_offload(const std::string& key, const Side& s) {
  for (const char* block : {"zero_optimization.offload_optimizer.", "zero_optimization.offload_param."}) {
    const std::string b = block;
    if (key.rfind(b, 0) != 0 || key == b + "device") continue;
    const auto it = s.entries.find(b + "device");
    return it != s.entries.end() && it->second["value"] == "none";
  }
  return false;
}

// The table's changes to `key` between the two releases (since in (lo, hi]).
json changes_between(const std::string& key, const std::string& a, const std::string& b) {
  const std::string& lo = compare_versions(a, b) <= 0 ? a : b;
  const std::string& hi = compare_versions(a, b) <= 0 ? b : a;
  json out = json::array();
  for (const auto& c : version_changes())
    if (compare_versions(c.since, lo) > 0 && compare_versions(c.since, hi) <= 0 &&
        c.key == key)
      out.push_back({{"kind", c.kind}, {"since", c.since}, {"pr", c.pr}, {"effect", c.effect}});
  return out;
}

// A refusal: the values of the side that loads are not differences; the reason is, with
// the table's entries that the refusal names and that one release has and the other not.
json refusal_changes(const Side& sa, const Side& sb, const std::string& va, const std::string& vb) {
  const std::string& which = sa.refused.is_null() ? vb : va;
  const std::string msg = (sa.refused.is_null() ? sb.refused : sa.refused).get<std::string>();
  const auto in_one = [&](const VersionChange& c) {
    return compare_versions(c.since, which) <= 0 && (compare_versions(c.since, va) > 0) != (compare_versions(c.since, vb) > 0);
  };
  json out = json::array();
  for (const auto& c : version_changes()) {
    const bool refusing_kind = c.kind == "removed" || c.kind == "strict" || c.kind == "behaviour";
    if (refusing_kind && msg.find(": " + c.key) != std::string::npos && in_one(c))
      out.push_back({{"key", c.key}, {"since", c.since}, {"pr", c.pr}, {"effect", c.effect}});
  }
  return out;
}

// Every key whose value or source differs between the sides (settings of an unused
// offload block on both sides left out).
json value_differences(const Side& sa, const Side& sb, const std::string& va, const std::string& vb) {
  std::set<std::string> keys;
  for (const auto& [k, v] : sa.entries) keys.insert(k);
  for (const auto& [k, v] : sb.entries) keys.insert(k);
  json out = json::array();
  for (const auto& k : keys) {
    const json ea = sa.entries.count(k) ? sa.entries.at(k) : json(nullptr);
    const json eb = sb.entries.count(k) ? sb.entries.at(k) : json(nullptr);
    const bool same = ea.is_object() && eb.is_object() && ea["value"] == eb["value"] && ea["source"] == eb["source"];
    if (same || (inside_unused_offload(k, sa) && inside_unused_offload(k, sb))) continue;
    out.push_back({{"key", k}, {"a", ea}, {"b", eb}, {"changes", changes_between(k, va, vb)}});
  }
  return out;
}

// What the engine does differently between the releases for this config (the table's
// behaviour entries: no value shows them), e.g. 0.17.6's ZeRO-2 gradients (#7718).
json behaviour_changes(const std::string& path, const std::string& a, const std::string& b) {
  const std::string& lo = compare_versions(a, b) <= 0 ? a : b;
  const std::string& hi = compare_versions(a, b) <= 0 ? b : a;
  const json config = parse_user_json("--config " + path, read_user_file("--config", path, "a DeepSpeed JSON config file"));
  json out = json::array();
  if (!config.is_object()) return out;
  for (const VersionChange* c : changes_touching(config, lo, hi))
    if (c->kind == "behaviour")
      out.push_back({{"key", c->key}, {"since", c->since}, {"pr", c->pr}, {"effect", c->effect}});
  return out;
}

}  // namespace

json diff_config_versions(const std::string& path, ConfigFlags flags, const std::string& a, const std::string& b) {
  const std::string va = check_deepspeed_version("--diff-versions", a), vb = check_deepspeed_version("--diff-versions", b);
  const Side sa = resolve(path, flags, va), sb = resolve(path, flags, vb);
  json diff = {{"config", path}, {"a", va}, {"b", vb}, {"refused", {{"a", sa.refused}, {"b", sb.refused}}},
               {"differences", json::array()}, {"warnings", {{"a", sa.warnings}, {"b", sb.warnings}}}};
  if (!sa.refused.is_null() || !sb.refused.is_null())
    diff["refusal_changes"] = refusal_changes(sa, sb, va, vb);
  else
    diff["differences"] = value_differences(sa, sb, va, vb);
  diff["behaviour"] = behaviour_changes(path, va, vb);
  return diff;
}

std::string format_version_diff(const json& d) {
  std::ostringstream o;
  const std::string a = d["a"], b = d["b"];
  o << "[zrepro config] " << d["config"].get<std::string>() << " under DeepSpeed " << a << " vs " << b << "\n";
  for (const char* side : {"a", "b"})
    if (!d["refused"][side].is_null())
      o << "  DeepSpeed " << d[side].get<std::string>() << " REFUSES this config: " << d["refused"][side].get<std::string>() << "\n";
  auto val = [](const json& e) {
    return e.is_object() ? e["value"].dump() + " [" + e["source"].get<std::string>() + "]" : std::string("-");
  };
  for (const auto& c : d.value("refusal_changes", json::array()))
    o << "      " << c["key"].get<std::string>() << " since " << c["since"].get<std::string>() << " ("
      << c["pr"].get<std::string>() << "): " << c["effect"].get<std::string>() << "\n";
  if (d["differences"].empty() && d["refused"]["a"].is_null() && d["refused"]["b"].is_null())
    o << "  no effective value differs\n";
  for (const auto& x : d["differences"]) {
    o << "  " << x["key"].get<std::string>() << ": " << val(x["a"]) << " -> " << val(x["b"]) << "\n";
    for (const auto& c : x["changes"])
      o << "      " << c["kind"].get<std::string>() << " since " << c["since"].get<std::string>() << " ("
        << c["pr"].get<std::string>() << "): " << c["effect"].get<std::string>() << "\n";
  }
  const json behaviour = d.value("behaviour", json::array());
  if (!behaviour.empty())
    o << "  what the engine does differently for this config (the version table's behaviour entries; no value "
         "shows them; zrepro check --deepspeed " << a << "," << b << " runs both releases):\n";
  for (const auto& c : behaviour)
    o << "      " << c["key"].get<std::string>() << " since " << c["since"].get<std::string>() << " ("
      << c["pr"].get<std::string>() << "): " << c["effect"].get<std::string>() << "\n";
  return o.str();
}

}  // namespace zrepro
