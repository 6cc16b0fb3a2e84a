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
  zrepro_test::expect_refuses_other_schema<BisectDocument>(bisect_example().to_json());
}

TEST(BisectDoc, EveryFieldHasItsRowAndEveryRowAField) {
  const std::set<std::string> paths = bisect_example_paths();
  EXPECT_GT(paths.size(), 20u);
  zrepro_test::expect_rows_match(paths, bisect_field_docs(), "BisectDocument");
}

TEST(BisectDoc, ThePageIsTheGeneratedText) {
  zrepro_test::expect_generated_page(kBisectPage, bisect_reference_page(), "ZREPRO_WRITE_BISECT_DOC", "BisectDoc.*");
}
