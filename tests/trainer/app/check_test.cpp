// trainer/app/check.h: the JUnit XML a CI shows for a check or a suite.
#include "trainer/app/check.h"

#include <gtest/gtest.h>

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

}  // namespace
