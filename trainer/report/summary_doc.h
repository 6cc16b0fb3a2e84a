// docs/reference/summary-json.md, generated from the Summary type (summary.h).
//
// [Note: the summary page is generated] Every field of summary.json has one row in
// summary_field_docs(): the section it is listed in, its path(s), what it means and, for
// the parts whose shape belongs to another module (summary.h keeps them JSON), which
// module writes them. summary_reference_page() renders the page from that table and the
// schema constant; tests/trainer/report/summary_doc_test.cpp fails when the page in the
// repository is not that text (ZREPRO_WRITE_SUMMARY_DOC=1 rewrites it), when a field of
// summary_example() - every typed field set - has no row, or when a typed row names a
// field the type no longer writes. summary_reference_process_test.cpp walks real runs'
// summaries against the same page, which covers the module-owned parts.
#pragma once
#include <string>
#include <vector>

#include "trainer/report/summary.h"

namespace zrepro {

struct SummaryFieldDoc {
  std::string section;              // "The run", "Steps", "Time", ...
  std::vector<std::string> fields;  // paths: a.b, a[].b; a.b.* for everything under a.b
  std::string meaning;
  std::string owner;                // empty: typed in Summary; else the module whose JSON it is
};

const std::vector<SummaryFieldDoc>& summary_field_docs();
// A Summary with every typed field set (optionals present, one element per list, the
// module-owned parts as empty objects): the shape the table must cover.
Summary summary_example();
// The page's text.
std::string summary_reference_page();

}  // namespace zrepro
