// See bisection.h.
#include "trainer/bisect/bisection.h"

#include <set>
#include <stdexcept>

namespace zrepro {

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::kGood: return "good";
    case Verdict::kMoved: return "moved";
    case Verdict::kSkip: return "skip";
  }
  return "?";
}

Bisection bisect(size_t n, const std::function<Verdict(size_t)>& judge) {
  if (n < 2) throw std::logic_error("bisect: needs the good and the bad release");
  Bisection b;
  b.first_moved = n - 1;
  std::set<size_t> skipped;
  for (;;) {
    // [Note: bisecting releases] the unskipped release nearest the middle of the window.
    const size_t mid = (b.last_good + b.first_moved) / 2;
    size_t pick = 0;
    for (size_t d = 0; d < n && pick == 0; ++d) {
      for (size_t c : {mid - d, mid + d + 1}) {  // mid - d wraps past 0: out of the window
        if (c > b.last_good && c < b.first_moved && !skipped.count(c)) {
          pick = c;
          break;
        }
      }
    }
    if (pick == 0) break;
    const Verdict v = judge(pick);
    b.judged.push_back({pick, v});
    if (v == Verdict::kGood) b.last_good = pick;
    else if (v == Verdict::kMoved) b.first_moved = pick;
    else skipped.insert(pick);
  }
  for (size_t s : skipped)
    if (s > b.last_good && s < b.first_moved) b.skipped.push_back(s);
  return b;
}

}  // namespace zrepro
