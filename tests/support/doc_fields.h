// What a generated reference page's field table is checked with (summary_doc_test,
// ab_doc_test): the leaf paths of an output document's JSON, and whether a row's field
// ("a.b", "a[].b", or "a.*" for everything under a) names a path.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "device/base/errors.h"
#include "device/base/field_doc.h"

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

inline bool any_names(const std::vector<zrepro::FieldDoc>& docs, const std::string& path) {
  return std::any_of(docs.begin(), docs.end(), [&](const zrepro::FieldDoc& d) {
    return std::any_of(d.fields.begin(), d.fields.end(), [&](const std::string& f) { return names_path(f, path); });
  });
}

// Every path the type's examples write has a row in its field table, and every row names
// a path they write.
inline void expect_rows_match(const std::set<std::string>& paths, const std::vector<zrepro::FieldDoc>& docs,
                              const std::string& type) {
  for (const auto& p : paths) EXPECT_TRUE(any_names(docs, p)) << type << " writes `" << p << "` and its table has no row";
  for (const auto& d : docs)
    for (const auto& f : d.fields) {
      const bool found = std::any_of(paths.begin(), paths.end(), [&](const std::string& p) { return names_path(f, p); });
      EXPECT_TRUE(found) << "the row `" << f << "` names a field " << type << " does not write";
    }
}

// The page in the repository is the generated text; with `env`=1 the test rewrites it.
inline void expect_generated_page(const std::string& path, const std::string& page, const char* env,
                                  const std::string& filter) {
  if (const char* w = std::getenv(env); w && std::string(w) == "1") std::ofstream(path) << page;
  std::ifstream in(path);
  std::stringstream have;
  have << in.rdbuf();
  EXPECT_EQ(have.str(), page) << path << " differs from the generated page: `" << env
                              << "=1 build/zrepro_unit_tests --gtest_filter=" << filter << "` rewrites it";
}

// A document of another schema, or of none (written before schemas), is refused.
template <class Document>
void expect_refuses_other_schema(nlohmann::json j) {
  j["schema"] = "zrepro.other/0";
  EXPECT_THROW(Document::from_json(j), zrepro::ConfigError);
  j.erase("schema");
  EXPECT_THROW(Document::from_json(j), zrepro::ConfigError);
}

}  // namespace zrepro_test
