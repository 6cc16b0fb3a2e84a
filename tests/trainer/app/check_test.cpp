// trainer/app/check.h: the JUnit XML a CI shows for a check or a suite.
#include "trainer/app/check.h"

#include <gtest/gtest.h>

#include "device/base/utf8.h"

namespace {

using namespace zrepro;

TEST(CheckJUnit, CountsCasesFailuresAndErrorsAndEscapesText) {
  CheckResult pass, moved;
  pass.rows.push_back({"steps", 4, 4, "exact", true, ""});
  moved.rows.push_back({"memory.rank0.params", 1000, 9000, "2%", false, "a <big> & \"odd\" move", RowKind::figure, "bytes"});
  const std::string xml = junit_xml("zrepro check suite/", {{"a", pass, ""}, {"b", moved, ""}, {"c", {}, "no baseline <x>"}});
  EXPECT_EQ(xml.rfind("<?xml version=\"1.0\" encoding=\"UTF-8\"?>", 0), 0u);
  EXPECT_NE(xml.find("<testsuite name=\"zrepro check suite/\" tests=\"3\" failures=\"1\" errors=\"1\">"), std::string::npos) << xml;
  EXPECT_NE(xml.find("<testcase classname=\"zrepro.check\" name=\"a\"/>"), std::string::npos) << xml;
  EXPECT_NE(xml.find("<failure message=\"REGRESSION: 1 figure(s) moved past their tolerance\" type=\"REGRESSION\">"),
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
  const std::string xml = junit_xml("suite", {{name, {}, "no baseline for caf\xE9"}});
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
