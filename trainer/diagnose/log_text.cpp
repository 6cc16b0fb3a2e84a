// See log_text.h.
#include "trainer/diagnose/log_text.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>

#include "device/base/utf8.h"

namespace zrepro {

namespace {

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string from_utf16(const std::string& bytes, bool little) {
  std::string out;
  const size_t start = bytes.size() >= 2 && ((little && bytes.compare(0, 2, "\xFF\xFE") == 0) ||
                                             (!little && bytes.compare(0, 2, "\xFE\xFF") == 0))
                           ? 2
                           : 0;
  auto unit = [&](size_t i) {
    const auto lo = static_cast<unsigned char>(bytes[i + (little ? 0 : 1)]);
    const auto hi = static_cast<unsigned char>(bytes[i + (little ? 1 : 0)]);
    return static_cast<uint32_t>(hi) << 8 | lo;
  };
  for (size_t i = start; i + 1 < bytes.size(); i += 2) {
    uint32_t cp = unit(i);
    if (cp >= 0xD800 && cp < 0xDC00 && i + 3 < bytes.size()) {
      const uint32_t low = unit(i + 2);
      if (low >= 0xDC00 && low < 0xE000) {
        cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
        i += 2;
      } else {
        cp = 0xFFFD;
      }
    } else if (cp >= 0xD800 && cp < 0xE000) {
      cp = 0xFFFD;
    }
    append_utf8(out, cp);
  }
  return out;
}

}  // namespace

// UTF-16's byte order (true: little-endian) when text is UTF-16: a BOM, or NULs on one parity
// of the first 64 KiB's bytes (nearly all there, nearly none on the other).
static std::optional<bool> utf16_order(const std::string& text) {
  const bool bom_le = text.compare(0, 2, "\xFF\xFE") == 0, bom_be = text.compare(0, 2, "\xFE\xFF") == 0;
  if (bom_le || bom_be) return bom_le;
  const size_t n = std::min<size_t>(text.size(), 64 * 1024), pairs = n / 2;
  size_t zero_odd = 0, zero_even = 0;
  for (size_t i = 0; i < n; ++i)
    if (text[i] == '\0') ++(i % 2 ? zero_odd : zero_even);
  auto most = [&](size_t zeros) { return zeros * 10 > pairs * 9; };
  auto few = [&](size_t zeros) { return zeros * 10 < pairs; };
  if (pairs > 0 && most(zero_odd) && few(zero_even)) return true;
  if (pairs > 0 && most(zero_even) && few(zero_odd)) return false;
  return std::nullopt;
}

// [Note: NUL bytes in a log] A log a crash cut short holds blocks of NUL bytes (space the file
// system gave the file and nobody wrote), anywhere, the start included: gaps, not content, so
// they are dropped before the log is read. UTF-16 puts a NUL beside every ASCII character, on
// one parity of the bytes only; a gap puts them on both, and binary data holds other bytes that
// are not text (a .pt file, a gzip read raw), which the count of those decides.
LogKind normalise_log(std::string& text) {
  if (text.empty()) return LogKind::empty;
  if (const std::optional<bool> little = utf16_order(text)) {
    text = from_utf16(text, *little);
    return LogKind::utf16;
  }
  text.erase(std::remove(text.begin(), text.end(), '\0'), text.end());  // the gaps
  if (text.empty()) return LogKind::empty;
  const size_t m = std::min<size_t>(text.size(), 64 * 1024);
  size_t odd = 0;
  for (size_t i = 0; i < m;) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 && c != '\n' && c != '\r' && c != '\t' && c != 0x1B && c != '\b') ++odd;
    const size_t len = utf8_length(text, i);
    if (len == 0) ++odd;  // not UTF-8: Latin-1 text counts a little, binary a lot
    i += len ? len : 1;
  }
  return odd * 10 > m ? LogKind::binary : LogKind::text;
}

const char* log_kind_name(LogKind k) {
  switch (k) {
    case LogKind::text: return "text";
    case LogKind::utf16: return "UTF-16 text";
    case LogKind::empty: return "empty";
    case LogKind::binary: return "binary";
  }
  return "?";
}

std::string printable(const std::string& line) {
  std::string out;
  for (size_t i = 0; i < line.size();) {
    const size_t len = utf8_length(line, i);
    const unsigned char c = static_cast<unsigned char>(line[i]);
    if (len == 0 || (len == 1 && ((c < 0x20 && c != '\t') || c == 0x7F))) {
      out += "\xEF\xBF\xBD";  // U+FFFD
      i += 1;
    } else {
      out.append(line, i, len);
      i += len;
    }
  }
  return out;
}

int64_t parse_printed_bytes(const std::string& number, const std::string& unit) {
  double x = -1;
  try {
    x = std::stod(number);
  } catch (const std::exception&) {
    return -1;
  }
  if (x < 0) return -1;
  static const std::map<std::string, double> units = {
      {"bytes", 1},           {"B", 1},          {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0},
      {"TiB", 1099511627776.0}, {"KB", 1e3},     {"MB", 1e6},     {"GB", 1e9},        {"TB", 1e12}};
  const auto it = units.find(unit);
  if (it == units.end()) return -1;
  const double bytes = x * it->second;
  // A size no device has (the log fuzzer found "2.7e69 GiB": its cast to int64 was
  // undefined behaviour) is not a size.
  return bytes < 9.2e18 ? static_cast<int64_t>(bytes) : -1;
}

}  // namespace zrepro
