// A log's text before diagnosis: its encoding (UTF-16 converted, binary refused), a line as
// a terminal may show it, and the sizes PyTorch prints. No diagnosis here.
#pragma once
#include <cstdint>
#include <string>

namespace zrepro {

// What a log's bytes are, before diagnosis. UTF-16 (a BOM, or a NUL in every other byte,
// as Windows tools write) is converted to UTF-8 in place; other NUL bytes are gaps a crash
// left and are dropped ([Note: NUL bytes in a log], log_text.cpp); binary (more than a
// tenth of the first 64 KiB neither text nor terminal control) is not a log.
enum class LogKind { text, utf16, empty, binary };
LogKind normalise_log(std::string& text);
const char* log_kind_name(LogKind k);

// A log line as a terminal may show it: valid UTF-8 kept, other control bytes (ANSI
// escapes, carriage returns, NUL) and invalid sequences as U+FFFD.
std::string printable(const std::string& line);

// "1.86 GiB", "512 MB", "3.01 MiB" -> bytes (PyTorch prints GiB/MiB/KiB; GB = 1e9). -1 if not a size.
int64_t parse_printed_bytes(const std::string& number, const std::string& unit);

}  // namespace zrepro
