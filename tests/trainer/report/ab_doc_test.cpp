// [Note: one ab type] (trainer/report/ab_doc.h): ab.json reads back as what was written,
// another schema is refused, every `--expect` figure names a field of the row, and
// docs/reference/ab-json.md is the page generated from the type's field table.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "device/base/errors.h"
#include "tests/support/doc_fields.h"
#include "trainer/report/ab.h"
#include "trainer/report/ab_doc.h"

using namespace zrepro;
using json = nlohmann::json;

namespace {

const std::string kAbPage = std::string(ZREPRO_SOURCE_DIR).append("/docs/reference/ab-json.md");

}  // namespace

TEST(AbDoc, ReadsBackAsWritten) {
  const json written = ab_example().to_json();
  EXPECT_EQ(AbDocument::from_json(written).to_json(), written);
  AbDocument interrupted;
  interrupted.outcome = "interrupted", interrupted.exit_code = 143, interrupted.message = "SIGTERM";
  EXPECT_EQ(AbDocument::from_json(interrupted.to_json()).to_json(), interrupted.to_json());
  // Every field is written, null where unknown: a row of a side that left no summary has them all.
  AbRow bare;
  bare.side = "B", bare.status = "no summary";
  std::set<std::string> full, lean;
  zrepro_test::leaf_paths(ab_example().rows[0].to_json(), "", full);
  const json bare_json = bare.to_json();
  for (const auto& [k, v] : bare_json.items()) lean.insert(k);
  for (const auto& p : full) EXPECT_TRUE(lean.count(p.substr(0, p.find_first_of(".["))) > 0) << p;
}

TEST(AbDoc, RefusesAnotherSchema) {
  zrepro_test::expect_refuses_other_schema<AbDocument>(ab_example().to_json());
}

TEST(AbDoc, EveryExpectFigureIsARowField) {
  const AbRow r = ab_example().rows[0];
  for (const auto& k : ab_metric_keys()) EXPECT_TRUE(r.figure(k).has_value()) << k;
  EXPECT_FALSE(r.figure("no_such_figure").has_value());
}

TEST(AbDoc, EveryFieldOfTheTypeHasItsRowAndEveryRowAField) {
  std::set<std::string> paths;
  zrepro_test::leaf_paths(ab_example().to_json(), "", paths);
  EXPECT_GT(paths.size(), 60u);
  zrepro_test::expect_rows_match(paths, ab_field_docs(), "AbDocument");
}

TEST(AbDoc, ThePageIsTheGeneratedText) {
  zrepro_test::expect_generated_page(kAbPage, ab_reference_page(), "ZREPRO_WRITE_AB_DOC", "AbDoc.*");
}
