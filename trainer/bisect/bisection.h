// The search of `zrepro bisect`: over releases ordered oldest first, the first whose
// figures moved from the good release's, judging as few releases as it can.
//
// [Note: bisecting releases] releases[0] is the good release and releases.back() the bad
// one, already judged (the caller ran both and checked that the bad one moved). A judged
// release is Good (its figures agree with the good release's), Moved, or Skip (it cannot
// run here: refused for this machine or its install failed). Each round judges the
// unjudged, unskipped release nearest the middle of the open window (last Good, first
// Moved), as `git bisect` does, a skipped one widening the choice to its neighbours. It
// assumes one change in the window: a change that came and went between good and bad
// (0.17.6's ZeRO-2 regression, fixed in 0.18.3) makes good and bad agree, and the caller
// says so instead of searching. When every release left in the window was skipped, the
// answer is the window: "first moved is one of these".
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace zrepro {

enum class Verdict { kGood, kMoved, kSkip };
const char* verdict_name(Verdict v);  // "good", "moved", "skip"

struct Bisection {
  size_t last_good = 0, first_moved = 0;  // indices: the window the search closed on
  std::vector<size_t> skipped;            // releases inside the window that could not be judged
  std::vector<std::pair<size_t, Verdict>> judged;  // in the order judged (the ends not included)
  bool exact() const { return skipped.empty() && first_moved == last_good + 1; }
};

// n >= 2 releases; judge(i) for 0 < i < n-1 only.
Bisection bisect(size_t n, const std::function<Verdict(size_t)>& judge);

}  // namespace zrepro
