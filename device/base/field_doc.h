// A generated reference page's field table (docs/reference/ab-json.md, bisect-json.md, diagnose-json.md):
// one row per group of field paths and what they mean, rendered as a markdown table. The
// tests check a document type's table against the paths its example writes
// (tests/support/doc_fields.h). Lives in device/base, below every layer, so that each room's
// output type (report's, bisect's, diagnose's) generates its page beside itself.
#pragma once
#include <sstream>
#include <string>
#include <vector>

namespace zrepro {

struct FieldDoc {
  std::vector<std::string> fields;  // paths: a.b, a[].b, a.* for everything under a
  std::string meaning;
};

// "| field | meaning |" and one line per row, the paths in backquotes.
inline std::string field_table_markdown(const std::vector<FieldDoc>& docs) {
  std::ostringstream o;
  o << "| field | meaning |\n|---|---|\n";
  for (const auto& d : docs) {
    std::string names;
    for (const auto& f : d.fields) names += (names.empty() ? "`" : ", `") + f + "`";
    o << "| " << names << " | " << d.meaning << " |\n";
  }
  return o.str();
}

// A reference page: its title, what the document is (the words before the table), the
// schema rule and the field table. Every page generated from a type says the same about
// its schema.
inline std::string reference_page(const std::string& title, const std::string& intro, const std::string& schema,
                                  const std::vector<FieldDoc>& docs) {
  return "# " + title + "\n\n" + intro + "\n\n`schema` is `" + schema +
         "`; a reader refuses another schema. The number changes when a field is removed or changes meaning; added "
         "fields keep it.\n\n" + field_table_markdown(docs);
}

}  // namespace zrepro
