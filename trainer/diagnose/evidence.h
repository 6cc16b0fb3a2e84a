// The evidence in a log: every line a fingerprint of the table in evidence.cpp matches
// (each fingerprint: a cheap substring, then its pattern), the numbers those lines carry
// (bytes, loss scale, collective sequence number and op, timeout, ranks, DeepSpeed's
// memory lines), the ranks seen, and the error-looking lines no fingerprint matched.
// Nothing is decided here (decide.h does).
#pragma once
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainer/diagnose/diagnose.h"

namespace zrepro::diagnosis {

using json = nlohmann::json;

struct Scan {
  std::map<std::string, std::vector<Evidence>> found;
  LogFigures numbers;  // the figures the matched lines carry, and the ranks seen
  std::vector<Evidence> error_lines;
  int last_line = 0;         // the line being read, then the log's last
  std::string last_label;    // the text of DeepSpeed's last see_memory_usage label line
};

// Reads the log line by line.
Scan scan(const std::string& text);

}  // namespace zrepro::diagnosis
