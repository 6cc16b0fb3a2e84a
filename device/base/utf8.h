// UTF-8 as the well-formed byte sequences of RFC 3629: utf8_length says how long the
// valid sequence at a position is (0: none there: a stray continuation byte, a cut
// sequence, an overlong form, a surrogate, past U+10FFFF), and valid_utf8 keeps the valid
// ones and puts U+FFFD for each byte that starts none. The log reader (trainer/diagnose/
// log_text.h) decides a log's encoding with it; JUnit XML and other text outputs stay
// well-formed with it whatever bytes a name held.
#pragma once
#include <cstddef>
#include <string>

namespace zrepro {

// The sequence's length from its lead byte c (0: c leads none).
inline size_t utf8_lead_length(unsigned char c) {
  return c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
}

// A multi-byte sequence of n bytes led by c, d is the code point's shortest form and in
// range: no overlong form, no surrogate, nothing past U+10FFFF.
inline bool utf8_in_range(unsigned char c, unsigned char d, size_t n) {
  if (n == 2) return c >= 0xC2;
  if (n == 3) return !(c == 0xE0 && d < 0xA0) && !(c == 0xED && d >= 0xA0);
  return !(c == 0xF0 && d < 0x90) && !(c == 0xF4 && d >= 0x90) && c <= 0xF4;
}

inline size_t utf8_length(const std::string& text, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const size_t n = utf8_lead_length(b(i));
  if (n == 0 || i + n > text.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((b(i + k) & 0xC0) != 0x80) return 0;
  return n == 1 || utf8_in_range(b(i), b(i + 1), n) ? n : 0;
}

inline std::string valid_utf8(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t n = utf8_length(text, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD
      ++i;
    } else {
      out.append(text, i, n);
      i += n;
    }
  }
  return out;
}

}  // namespace zrepro
