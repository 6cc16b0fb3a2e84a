// report.html from a summary: every rank, human bytes and percentages, no tables of zeros,
// the hang's per-rank collective table.
#include <gtest/gtest.h>

#include "trainer/report/html_report.h"

using namespace zrepro;
using json = nlohmann::json;

namespace {
bool has(const std::string& html, const std::string& what) { return html.find(what) != std::string::npos; }
}  // namespace

namespace {
SummaryRankMemory rank_peak(int rank, int64_t peak, int64_t params) {
  SummaryRankMemory r;
  r.rank = rank, r.peak_bytes = peak, r.peak_phase = "step";
  r.by_category = {{"params", params}, {"comm_buffers", 0}};
  return r;
}
}  // namespace

TEST(HtmlReport, BytesArePeopleSizedSharesArePercentagesAndZeroTablesAreLeftOut) {
  Summary s;
  s.status = "ok";
  s.memory = SummaryMemory{4294967296, {rank_peak(0, 1610612736, 1073741824), rank_peak(1, 1073741824, 536870912)}, {}, nullptr};
  s.offload = {{"host_link_gbps", 2.0},
               {"ranks", {{{"rank", 0}, {"d2h_bytes", 3145728}, {"h2d_bytes", 0}, {"copy_s", 1.0},
                           {"exposed_s", 0.1}, {"overlap_ratio", 0.9}, {"device_busy_fraction", 0.95},
                           {"host_pinned_bytes", 1024}, {"host_pageable_bytes", 0}}}}};
  s.comm = SummaryComm{{}, {{"all_reduce", {{"calls_per_step", 0.0}, {"bytes_per_step", 0.0}, {"seconds_per_step", 0.0},
                                                {"algbw_GBps", nullptr}, {"busbw_GBps", nullptr}}}}, std::nullopt, nlohmann::json()};
  s.time = SummaryTime{0.5, 100.0, {{"forward", 3.0}, {"backward", 1.0}, {"comm_wait", 0.0}}, {}, std::nullopt};
  const std::string html = html_report(s);
  EXPECT_TRUE(has(html, "<td>1.50 GiB</td><td>37.5%</td>")) << html;  // rank 0's peak, of capacity
  EXPECT_TRUE(has(html, "<td>512.00 MiB</td>"));                       // rank 1 shown too
  EXPECT_TRUE(has(html, "<td>3.00 MiB</td>"));                         // offload down
  EXPECT_TRUE(has(html, "<td>90.0%</td><td>95.0%</td>"));              // overlapped, device busy
  EXPECT_FALSE(has(html, "comm buffers</th>"));                        // zero on every rank
  EXPECT_FALSE(has(html, "Collectives (rank 0"));                      // no op was called
  EXPECT_TRUE(has(html, "<td>75.0%</td>"));                            // forward's share of the time
  EXPECT_FALSE(has(html, "comm_wait (s"));                             // zero
  EXPECT_FALSE(has(html, "cache flushes"));                            // the tracking allocator: no such column
}

// [Note: allocator retries]: under the caching allocator the reserved peak and the cache
// flushes stand beside the allocated peak, and flushes get their warning.
TEST(HtmlReport, CacheFlushesAreShownWithTheirWarning) {
  Summary s;
  s.status = "ok";
  SummaryRankMemory r = rank_peak(0, 262144 * 1024, 1 << 20);
  r.peak_reserved_bytes = 282 * (int64_t(1) << 20);
  r.alloc_retries = 11;
  s.memory = SummaryMemory{297000000, {r}, {}, nullptr};
  const std::string html = html_report(s);
  EXPECT_TRUE(has(html, "<th>reserved peak</th><th>cache flushes</th>")) << html;
  EXPECT_TRUE(has(html, "<td>282.00 MiB</td><td>11</td>")) << html;
  EXPECT_TRUE(has(html, "flushed its cache and retried 11 time(s)")) << html;
}

TEST(HtmlReport, AMultiRankFailureShowsEveryRanksViewAndAHangWhereEachRankWaits) {
  // Built through the file's shape, as a merged multi-process summary is read back.
  const Summary s = Summary::from_json(
      {{"status", "hang"},
            {"failure", {{"kind", "hang"}, {"rank", 1}, {"phase", "collective #7"}, {"message", "m"},
                         {"checkpoint", "c"}, {"hint", "h"},
                         {"ranks", {{{"rank", 0}, {"status", "oom"}, {"phase", "forward"}, {"allocated_bytes", 2048},
                                     {"capacity_bytes", 4096}, {"message", "CUDA out of memory"}}}},
                         {"ranks_reported", {0}}, {"ranks_without_a_view", {2}},
                         {"hang", {{"seq", 7}, {"culprit_ranks", {1}}, {"kind", "missing"}, {"text", "t"},
                                   {"suspects", {{{"rank", 1}, {"evidence", "no flight dump"}}}},
                                   {"ranks", {{{"rank", 0}, {"dumped", true}, {"last_completed_seq", 6},
                                               {"last_completed", "all_reduce(Float)"}, {"waiting_seq", 7},
                                               {"waiting_in", "all_gather(Float, in 8, out 16)"}, {"idle_s", 0.0}},
                                              {{"rank", 1}, {"dumped", false}, {"last_completed_seq", nullptr},
                                               {"last_completed", nullptr}, {"waiting_seq", nullptr},
                                               {"waiting_in", nullptr}, {"idle_s", nullptr}}}}}}}}});
  const std::string html = html_report(s);
  EXPECT_TRUE(has(html, "<td>0</td><td>oom</td><td>forward</td><td>2.00 KiB</td><td>4.00 KiB</td>")) << html;
  EXPECT_TRUE(has(html, "No summary from rank(s) [2]"));
  EXPECT_TRUE(has(html, "<li>rank 1: no flight dump</li>"));
  EXPECT_TRUE(has(html, "<td>#6 all_reduce(Float)</td><td>#7 all_gather(Float, in 8, out 16)</td>"));
  EXPECT_TRUE(has(html, "<td>1</td><td><b>none</b></td><td>–</td><td>–</td>"));
}
