// trainer/app/check.h: the JUnit XML a CI shows for a check or a suite.
#include "trainer/app/check.h"

#include <gtest/gtest.h>

#include "device/base/utf8.h"
#include "device/device_memory.h"

namespace {

using namespace zrepro;

TEST(CheckJUnit, CountsCasesFailuresAndErrorsAndEscapesText) {
  CheckResult pass, moved;
  pass.rows.push_back({"steps", 4, 4, "exact", true, ""});
  moved.rows.push_back({"memory.rank0.params", 1000, 9000, "2%", false, "a <big> & \"odd\" move", RowKind::figure, "bytes"});
  moved.rows.push_back({"loss (worst step)", 4.1, 4.3, "0.01 relative", false, "", RowKind::figure, ""});
  const std::string xml = junit_xml("zrepro check suite/", {{"a", pass, "", 1.5, "w/a/run", "w/a/run.log"},
                                                            {"b", moved, "", 2.25, "w/b/run", "w/b/run.log"},
                                                            {"c", {}, "no baseline <x>", 0, "", ""}});
  EXPECT_EQ(xml.rfind("<?xml version=\"1.0\" encoding=\"UTF-8\"?>", 0), 0u);
  EXPECT_NE(xml.find("<testsuite name=\"zrepro check suite/\" tests=\"3\" failures=\"1\" errors=\"1\" time=\"3.750\">"),
            std::string::npos) << xml;
  // Issue 60: every case has its time and, in <system-out>, its run folder, log and what was
  // compared (a passing case too); a failure's message is its cause, not a count.
  EXPECT_NE(xml.find("<testcase classname=\"zrepro.check\" name=\"a\" time=\"1.500\">\n      <system-out>run folder: "
                     "w/a/run\nlog: w/a/run.log\n1 rows compared:"),
            std::string::npos) << xml;
  EXPECT_NE(xml.find("<failure message=\"REGRESSION: memory.rank0.params " + format_bytes(1000) + " -&gt; " +
                     format_bytes(9000) + " (tolerance 2%); 1 more row(s) moved\" type=\"REGRESSION\">"),
            std::string::npos) << xml;
  EXPECT_NE(xml.find("a &lt;big&gt; &amp; &quot;odd&quot; move"), std::string::npos) << xml;
  EXPECT_NE(xml.find("<error message=\"no baseline &lt;x&gt;\" type=\"error\"/>"), std::string::npos) << xml;
  EXPECT_EQ(xml.find("<big>"), std::string::npos);
}

// Issue 61 item 8: a case named with bytes that are no UTF-8 (a Latin-1 file name, an
// overlong form, a surrogate, U+FFFF) made JUnit that XML parsers refuse; each such byte
// is now U+FFFD and the document is well-formed UTF-8.
TEST(CheckJUnit, ANameThatIsNoUtf8StillGivesWellFormedXml) {
  const std::string name = "caf\xE9 \xC0\xAF \xED\xA0\x80 \xEF\xBF\xBF \xE2\x82\xAC";
  const std::string xml = junit_xml("suite", {{name, {}, "no baseline for caf\xE9", 0, "", ""}});
  for (size_t i = 0; i < xml.size();) {
    const size_t n = utf8_length(xml, i);
    ASSERT_GT(n, 0u) << "byte " << i << " starts no UTF-8 sequence:\n" << xml;
    i += n;
  }
  EXPECT_NE(xml.find("name=\"caf\xEF\xBF\xBD \xEF\xBF\xBD\xEF\xBF\xBD"), std::string::npos) << xml;
  EXPECT_NE(xml.find("\xE2\x82\xAC"), std::string::npos) << "valid text (the euro sign) is kept";
  EXPECT_EQ(xml.find("\xEF\xBF\xBF"), std::string::npos) << "U+FFFF is no XML character";
}


}  // namespace
