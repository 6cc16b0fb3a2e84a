// [Note: the summary page is generated] (trainer/report/summary_doc.h): the page in the
// repository is the generated text, every field of the type has its row, and no typed row
// names a field the type does not write.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "tests/support/doc_fields.h"
#include "trainer/report/summary_doc.h"

using namespace zrepro;
using json = nlohmann::json;

namespace {

const std::string kSummaryPage = std::string(ZREPRO_SOURCE_DIR).append("/docs/reference/summary-json.md");

// A row covers a path when it names it, or names a.b.* above it.
bool covered(const std::string& path) {
  for (const auto& d : summary_field_docs())
    for (const auto& f : d.fields)
      if (zrepro_test::names_path(f, path)) return true;
  return false;
}

}  // namespace

TEST(SummaryDoc, EveryFieldOfTheTypeHasItsRow) {
  std::set<std::string> paths;
  zrepro_test::leaf_paths(summary_example().to_json(), "", paths);
  EXPECT_GT(paths.size(), 50u);
  for (const auto& p : paths) EXPECT_TRUE(covered(p)) << "Summary writes `" << p << "` and summary_field_docs() has no row for it";
}

TEST(SummaryDoc, EveryTypedRowNamesAFieldTheTypeWrites) {
  std::set<std::string> paths;
  zrepro_test::leaf_paths(summary_example().to_json(), "", paths);
  for (const auto& d : summary_field_docs()) {
    if (!d.owner.empty()) continue;  // a module-owned part: real runs check it (SummaryReference)
    for (const auto& f : d.fields) {
      const bool found = std::any_of(paths.begin(), paths.end(), [&](const std::string& p) { return zrepro_test::names_path(f, p); });
      EXPECT_TRUE(found) << "the row `" << f << "` is typed, and the Summary type does not write it";
    }
  }
}

TEST(SummaryDoc, ThePageIsTheGeneratedText) {
  const std::string page = summary_reference_page();
  if (const char* w = std::getenv("ZREPRO_WRITE_SUMMARY_DOC"); w && std::string(w) == "1") {
    std::ofstream(kSummaryPage) << page;
  }
  std::ifstream in(kSummaryPage);
  std::stringstream have;
  have << in.rdbuf();
  EXPECT_EQ(have.str(), page) << kSummaryPage << " differs from the generated page: "
                              << "`ZREPRO_WRITE_SUMMARY_DOC=1 build/zrepro_unit_tests --gtest_filter=SummaryDoc.*` rewrites it";
}
