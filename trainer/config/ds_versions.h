// DeepSpeed version profiles: what changes between releases (0.14.0 to the newest) for the
// config keys zrepro models, read at run time from configs/deepspeed_versions.json (one
// entry per change, citing the release, the PR and the source line). `--deepspeed-version
// V` resolves a config as release V would: its defaults (labelled with the release that
// set them), the keys it does not know yet, the keys it refuses (removed features, strict
// blocks, out-of-range values) with its own message.
//
// [Note: version profiles] A change is in effect at V when since <= V. For a default, the
// value at V is the newest entry's "after" with since <= V, else the oldest entry's
// "before"; the loader's built-in default is the newest release's, so with no entry the
// two agree. Releases are compared numerically (0.19.10 > 0.19.9).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace zrepro {

struct VersionChange {
  std::string key, kind, since;  // kind: default | added | removed | strict | alias | behaviour
  nlohmann::json before, after;
  std::string message, pr, evidence, note;
  std::string effect;  // "numerics: ...", "refusal: ...", "host memory and speed: ..."
  nlohmann::json when;  // a behaviour's condition: {"dotted.key": value, ...} the config must have; null: none
};

// The table, loaded once (ZREPRO_DATA_DIR, else the source tree's configs/). Throws
// ConfigError when the file is missing or malformed.
const std::vector<VersionChange>& version_changes();
const std::vector<std::string>& deepspeed_releases();
const std::string& newest_deepspeed_version();

// The table's changes in (after, upto] that touch a config (the file as written): a key it
// sets, a default it leaves to the release, a behaviour of a block it has and whose "when"
// it meets. What bisect names beside a release and config --diff-versions prints.
std::vector<const VersionChange*> changes_touching(const nlohmann::json& config, const std::string& after,
                                                   const std::string& upto);

// -1, 0, 1 numerically by dotted parts.
int compare_versions(const std::string& a, const std::string& b);
// V itself when it is a known release; ConfigError naming `flag`, V and the range otherwise.
std::string check_deepspeed_version(const std::string& flag, const std::string& v);

// A versioned default at V: the value and what to say about it ("default since 0.19.5
// (deepspeedai/DeepSpeed#8207)" or "default before 0.19.5 ..."). nullopt: not versioned.
struct VersionedDefault {
  nlohmann::json value;
  std::string note;
};
std::optional<VersionedDefault> versioned_default(const std::string& key, const std::string& v);

// The change of `kind` for `key` in effect at V (the newest with since <= V), or null.
const VersionChange* change_in_effect(const std::string& key, const std::string& kind, const std::string& v);
// The "added" entry of a key V does not know yet (since > V), or null.
const VersionChange* not_yet_added(const std::string& key, const std::string& v);

}  // namespace zrepro
