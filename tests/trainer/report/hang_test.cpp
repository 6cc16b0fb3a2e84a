// The hang diagnosis that merges flight-recorder dumps of every rank.
#include <gtest/gtest.h>

#include <numeric>

#include "trainer/report/hang.h"
#include "zero/comm/communicator.h"
#include "zero/schedule/partition.h"

using namespace zrepro;

namespace {
FlightEntry flight_entry(int64_t seq, CollOp op, int64_t n, int64_t micro = 0, FlightEntry::State st = FlightEntry::completed) {
  FlightEntry e;
  e.seq = seq;
  e.op = op;
  e.dtype = "Float";
  e.in_numel = e.out_numel = n;
  e.micro_step = micro;
  e.step = 0;
  e.state = st;
  e.label = "x";
  return e;
}
}  // namespace

TEST(HangDiagnosis, NamesTheRankThatIssuedADifferentCollective) {
  std::vector<std::vector<FlightEntry>> ranks(4);
  for (int r = 0; r < 4; ++r) {
    ranks[r].push_back(flight_entry(0, CollOp::reduce_scatter, 100));
    ranks[r].push_back(r == 2 ? flight_entry(1, CollOp::reduce_scatter, 100, 1, FlightEntry::started)
                              : flight_entry(1, CollOp::all_reduce, 3, 0, FlightEntry::started));
  }
  HangDiagnosis d = diagnose_hang(ranks, 1);
  EXPECT_EQ(d.kind, "mismatch");
  EXPECT_EQ(d.seq, 1);
  EXPECT_EQ(d.culprits, std::vector<int>{2});
  // Two ranks: a tie, broken by the collective from a micro-step the config does not have.
  std::vector<std::vector<FlightEntry>> two = {ranks[0], ranks[2]};
  EXPECT_EQ(diagnose_hang(two, 1).culprits, std::vector<int>{1});
  // hang_report.json reads back as rank 0 wrote it, the differing config keys with it.
  const HangReport report{"timeout", 20, d, {"rank 1: gradient_accumulation_steps=2, others 1"}};
  const HangReport back = HangReport::from_json(nlohmann::json::parse(report.to_json().dump()));
  EXPECT_EQ(back.to_json(), report.to_json());
  EXPECT_EQ(back.diagnosis.culprits, std::vector<int>{2});
  EXPECT_EQ(back.config_mismatch, report.config_mismatch);
  const HangReport agreeing{"timeout", 20, d, {}};
  EXPECT_FALSE(agreeing.to_json().contains("config_mismatch")) << "absent when the ranks agree";
}

TEST(HangDiagnosis, MissingAndStuckRanks) {
  std::vector<std::vector<FlightEntry>> ranks(3);
  for (int r = 0; r < 3; ++r) ranks[r].push_back(flight_entry(0, CollOp::all_reduce, 3));
  for (int r : {0, 2}) ranks[r].push_back(flight_entry(1, CollOp::all_gather, 8, 0, FlightEntry::started));
  HangDiagnosis d = diagnose_hang(ranks, 1);
  EXPECT_EQ(d.kind, "missing");
  EXPECT_EQ(d.seq, 1);
  EXPECT_EQ(d.culprits, std::vector<int>{1});
  ranks[1].push_back(flight_entry(1, CollOp::all_gather, 8, 0, FlightEntry::completed));
  d = diagnose_hang(ranks, 1);
  EXPECT_EQ(d.kind, "stuck");
  EXPECT_EQ(d.culprits, (std::vector<int>{0, 2}));
  // Dumps round-trip through JSON.
  auto back = flight_from_json(flight_json(ranks[0]));
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[1].op, CollOp::all_gather);
  EXPECT_EQ(back[1].state, FlightEntry::started);
}

// Issue 14: a frozen rank (SIGSTOP) leaves no dump; it is the first suspect, not the rank
// that reported.
TEST(HangDiagnosis, ARankWithNoDumpOrTheOldestActivityIsTheFirstSuspect) {
  std::vector<std::vector<FlightEntry>> ranks(2);
  ranks[0].push_back(flight_entry(0, CollOp::all_reduce, 3));
  ranks[0].push_back(flight_entry(1, CollOp::all_reduce, 3, 0, FlightEntry::started));
  HangDiagnosis d = diagnose_hang(ranks, 1);  // rank 1 frozen: no dump
  ASSERT_FALSE(d.suspects.empty());
  EXPECT_EQ(d.suspects[0].rank, 1);
  EXPECT_NE(d.suspects[0].evidence.find("no flight dump"), std::string::npos);
  EXPECT_EQ(d.culprits.front(), 1);
  EXPECT_NE(d.text.find("Suspects, most likely first: rank 1"), std::string::npos) << d.text;
  // Both dumped, both wait in #1; rank 1's last activity is 30 s older: it stopped first.
  std::vector<std::vector<FlightEntry>> both(2);
  for (int r = 0; r < 2; ++r) {
    FlightEntry e = flight_entry(1, CollOp::all_reduce, 3, 0, FlightEntry::started);
    e.t_scheduled = e.t_started = r == 0 ? 1000.0 : 970.0;
    both[r].push_back(e);
  }
  d = diagnose_hang(both, 1);
  EXPECT_EQ(d.kind, "stuck");
  EXPECT_EQ(d.culprits.front(), 1) << d.text;
  EXPECT_NE(d.suspects[0].evidence.find("older"), std::string::npos);
  EXPECT_EQ(d.to_json()["suspects"].size(), 2u);
}

TEST(HangDiagnosis, EachRanksViewSaysItsLastCompletedCollectiveAndWhereItWaits) {
  std::vector<std::vector<FlightEntry>> ranks(3);
  for (int r = 0; r < 2; ++r) {
    ranks[r].push_back(flight_entry(0, CollOp::all_reduce, 3));
    ranks[r].push_back(flight_entry(1, CollOp::all_gather, 8, 0, r == 0 ? FlightEntry::started : FlightEntry::completed));
  }
  const HangDiagnosis d = diagnose_hang(ranks, 1);  // rank 2 sent no dump
  ASSERT_EQ(d.ranks.size(), 3u);
  EXPECT_TRUE(d.ranks[0].dumped);
  EXPECT_EQ(d.ranks[0].last_completed_seq, 0);
  EXPECT_EQ(d.ranks[0].waiting_seq, 1);
  EXPECT_EQ(d.ranks[0].waiting_in.rfind("all_gather(Float, in 8, out 8)", 0), 0u) << d.ranks[0].waiting_in;
  EXPECT_EQ(d.ranks[1].last_completed_seq, 1);
  EXPECT_EQ(d.ranks[1].waiting_seq, -1);
  EXPECT_FALSE(d.ranks[2].dumped);
  const auto j = d.to_json();
  EXPECT_TRUE(j["ranks"][1]["waiting_seq"].is_null());
  EXPECT_TRUE(j["ranks"][2]["idle_s"].is_null());
  EXPECT_EQ(j["ranks"][0]["waiting_seq"], 1);
}
