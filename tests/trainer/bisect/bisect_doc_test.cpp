// [Note: one bisect type] (trainer/bisect/bisect_doc.h): bisect.json reads back as what was
// written, another schema is refused, and docs/reference/bisect-json.md is the page
// generated from the type's field table.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "device/base/errors.h"
#include "tests/support/doc_fields.h"
#include "trainer/bisect/bisect_doc.h"

using namespace zrepro;
using json = nlohmann::json;

namespace {

const std::string kBisectPage = std::string(ZREPRO_SOURCE_DIR).append("/docs/reference/bisect-json.md");

std::set<std::string> bisect_example_paths() {
  std::set<std::string> paths;
  zrepro_test::leaf_paths(bisect_example().to_json(), "", paths);
  return paths;
}

}  // namespace

TEST(BisectDoc, ReadsBackAsWritten) {
  const json written = bisect_example().to_json();
  EXPECT_EQ(BisectDocument::from_json(written).to_json(), written);
  // Nothing to bisect: the same fields, the window's ends null.
  BisectDocument none;
  none.outcome = "no move";
  const json j = none.to_json();
  EXPECT_TRUE(j.at("first_moved").is_null());
  EXPECT_EQ(BisectDocument::from_json(j).to_json(), j);
  for (const auto& [k, v] : written.items()) EXPECT_TRUE(j.contains(k)) << k;
  // A release zrepro's run left no summary for.
  BisectRelease r = bisect_example().judged[0];
  r.zrepro.reset(), r.zrepro_differs.reset();
  EXPECT_EQ(BisectRelease::from_json(r.to_json()).to_json(), r.to_json());
}

TEST(BisectDoc, RefusesAnotherSchema) {
  json j = bisect_example().to_json();
  j["schema"] = "zrepro.bisect/0";
  EXPECT_THROW(BisectDocument::from_json(j), ConfigError);
  j.erase("schema");  // a bisect.json written before the schema
  EXPECT_THROW(BisectDocument::from_json(j), ConfigError);
}

TEST(BisectDoc, EveryFieldHasItsRowAndEveryRowAField) {
  const std::set<std::string> paths = bisect_example_paths();
  EXPECT_GT(paths.size(), 20u);
  for (const auto& p : paths) {
    const bool covered = std::any_of(bisect_field_docs().begin(), bisect_field_docs().end(), [&](const FieldDoc& d) {
      return std::any_of(d.fields.begin(), d.fields.end(), [&](const std::string& f) { return zrepro_test::names_path(f, p); });
    });
    EXPECT_TRUE(covered) << "BisectDocument writes `" << p << "` and bisect_field_docs() has no row for it";
  }
  for (const auto& d : bisect_field_docs())
    for (const auto& f : d.fields) {
      const bool found = std::any_of(paths.begin(), paths.end(), [&](const std::string& p) { return zrepro_test::names_path(f, p); });
      EXPECT_TRUE(found) << "the row `" << f << "` names a field BisectDocument does not write";
    }
}

TEST(BisectDoc, ThePageIsTheGeneratedText) {
  const std::string page = bisect_reference_page();
  if (const char* w = std::getenv("ZREPRO_WRITE_BISECT_DOC"); w && std::string(w) == "1") std::ofstream(kBisectPage) << page;
  std::ifstream in(kBisectPage);
  std::stringstream have;
  have << in.rdbuf();
  EXPECT_EQ(have.str(), page) << kBisectPage << " differs from the generated page: "
                              << "`ZREPRO_WRITE_BISECT_DOC=1 build/zrepro_unit_tests --gtest_filter=BisectDoc.*` rewrites it";
}
