// The search of zrepro bisect on recorded verdicts: it names the first release that moved,
// judges about log2(n) releases, steps around releases that cannot run, and reports a
// window when the ones it needs were all skipped.
#include <gtest/gtest.h>

#include <set>

#include "trainer/bisect/bisection.h"

namespace zrepro {
namespace {

// Releases 0..n-1 where every release from `first` on moved; `skips` cannot run.
Bisection search_recorded(size_t n, size_t first, std::set<size_t> skips, std::vector<size_t>* judged = nullptr) {
  return bisect(n, [&](size_t i) {
    EXPECT_GT(i, 0u);
    EXPECT_LT(i, n - 1);
    if (judged) judged->push_back(i);
    if (skips.count(i)) return Verdict::kSkip;
    return i >= first ? Verdict::kMoved : Verdict::kGood;
  });
}

TEST(Bisection, FindsTheFirstMovedReleaseForEveryPosition) {
  for (size_t n : {2u, 3u, 5u, 17u, 41u}) {
    for (size_t first = 1; first < n; ++first) {
      std::vector<size_t> judged;
      const Bisection b = search_recorded(n, first, {}, &judged);
      EXPECT_TRUE(b.exact()) << n << " " << first;
      EXPECT_EQ(b.first_moved, first) << n;
      EXPECT_EQ(b.last_good, first - 1) << n;
      // Binary: at most ceil(log2(n - 1)) judgments.
      size_t bound = 0;
      while ((size_t{1} << bound) < n - 1) ++bound;
      EXPECT_LE(judged.size(), bound) << n << " " << first;
      EXPECT_EQ(std::set<size_t>(judged.begin(), judged.end()).size(), judged.size()) << "judged twice";
    }
  }
}

TEST(Bisection, StepsAroundReleasesThatCannotRun) {
  // 0.15.0 .. 0.19.8 is 41 releases; the middle one and its neighbour cannot run.
  const Bisection b = search_recorded(41, 30, {20, 21});
  EXPECT_TRUE(b.exact());
  EXPECT_EQ(b.first_moved, 30u);
  // The move is right after a skipped release: the answer is the window with it.
  const Bisection w = search_recorded(9, 5, {4});
  EXPECT_FALSE(w.exact());
  EXPECT_EQ(w.last_good, 3u);
  EXPECT_EQ(w.first_moved, 5u);
  EXPECT_EQ(w.skipped, std::vector<size_t>{4});
}

TEST(Bisection, GoodAndBadAloneNeedNoRun) {
  std::vector<size_t> judged;
  const Bisection b = search_recorded(2, 1, {}, &judged);
  EXPECT_TRUE(judged.empty());
  EXPECT_TRUE(b.exact());
  EXPECT_EQ(b.first_moved, 1u);
  EXPECT_THROW(bisect(1, [](size_t) { return Verdict::kGood; }), std::logic_error);
}

}  // namespace
}  // namespace zrepro
