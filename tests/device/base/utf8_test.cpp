// device/base/utf8.h: which byte sequences are UTF-8 (RFC 3629), and text made valid.
#include "device/base/utf8.h"

#include <gtest/gtest.h>

namespace {

using namespace zrepro;

TEST(Utf8, OnlyWellFormedSequencesHaveALength) {
  EXPECT_EQ(utf8_length("a", 0), 1u);
  EXPECT_EQ(utf8_length("\xC3\xA9", 0), 2u);
  EXPECT_EQ(utf8_length("\xF0\x9F\x98\x80", 0), 4u);
  for (const char* bad : {"\xC0\xAF", "\xC1\xBF", "\xE0\x80\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xF5\x80\x80\x80",
                          "\x80", "\xC3"})
    EXPECT_EQ(utf8_length(bad, 0), 0u) << bad;
  EXPECT_EQ(valid_utf8("a\xE9" "b"), "a\xEF\xBF\xBD" "b");
}

}  // namespace
