// What a generated reference page's field table is checked with (summary_doc_test,
// ab_doc_test): the leaf paths of an output document's JSON, and whether a row's field
// ("a.b", "a[].b", or "a.*" for everything under a) names a path.
#pragma once
#include <set>
#include <string>

#include <nlohmann/json.hpp>

namespace zrepro_test {

// Every leaf path: objects to their fields, lists of objects to their first element as
// a[], an empty object or list (a module-owned part in an example) as itself.
inline void leaf_paths(const nlohmann::json& v, const std::string& path, std::set<std::string>& out) {
  if (v.is_object() && !v.empty()) {
    for (const auto& [k, x] : v.items()) leaf_paths(x, path.empty() ? k : path + "." + k, out);
  } else if (v.is_array() && !v.empty() && v[0].is_object()) {
    leaf_paths(v[0], path + "[]", out);
  } else {
    out.insert(path);
  }
}

inline bool starred(const std::string& field) {
  return field.size() > 2 && field.compare(field.size() - 2, 2, ".*") == 0;
}

// The row's field names the path: the same, or a.* above it.
inline bool names_path(const std::string& field, const std::string& path) {
  if (field == path) return true;
  if (!starred(field)) return false;
  const std::string root = field.substr(0, field.size() - 2);
  return path == root || path.compare(0, root.size() + 1, root + ".") == 0;
}

}  // namespace zrepro_test
