// The evidence in a log: every line a fingerprint of the table in evidence.cpp matches
// (each fingerprint: a cheap substring, then its pattern), the numbers those lines carry
// (bytes, loss scale, collective sequence number and op, timeout, ranks, DeepSpeed's
// memory lines), the ranks seen, and the error-looking lines no fingerprint matched.
// Nothing is decided here (decide.h does).
#pragma once
#include <map>
#include <set>
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
  std::map<std::string, int> last_at;  // each fingerprint's last line (`found` keeps its first 12)
};

// [Note: a log read as a stream] The log is read one line at a time and what a line adds
// is kept bounded (at most 12 lines per fingerprint, 5 closest lines, 200 memory lines, 64
// ranks' watchdog lines, 1024 ranks), so a scan holds the same memory for a log of 1 MB or
// of 10 GB and every line of it is read: trainer/app/diagnose.cpp streams a file (plain or
// gzip) through it without holding it.
class LogScanner {
 public:
  // `ignored`: fingerprint ids read as if their row were not in the table (the corpus
  // test's question: which logs need a rule, [Note: a rule no log needs is dead]).
  explicit LogScanner(std::set<std::string> ignored = {}) : ignored_(std::move(ignored)) {}
  void line(std::string line);  // the next line, without its newline
  Scan finish();                // what the lines showed (the scanner is spent)

 private:
  // Where the scan is within the log: the phase the last traceback frame named, the last
  // pinned-allocation frame, the previous lines (for a message wrapped over three), the
  // lines left that may carry the figures of an OOM message wrapped after its first line.
  struct Position {
    int no = 0, last_pinned = 0, oom_follow = 0;
    std::string last_hint, prev, prev2;  // the two lines before, as read
    bool batch_words = false, prev_batch_words = false;  // one of the last two lines / the last names a *_size
  };
  bool match_line(const std::string& line, const std::vector<int>& hit);
  Scan s_;
  Position at_;
  std::set<std::string> ignored_;
};

// A whole text, line by line (tests, the fuzzer, a UTF-16 log converted whole).
Scan scan(const std::string& text, const std::set<std::string>& ignored = {});
// Every fingerprint id of the table, once each, in table order.
std::vector<std::string> fingerprint_ids();

}  // namespace zrepro::diagnosis
