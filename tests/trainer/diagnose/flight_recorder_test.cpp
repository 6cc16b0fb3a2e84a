// trainer/diagnose/flight_recorder.h: real Flight Recorder dumps PyTorch 2.11 wrote
// (tests/data/flight_recorder/make_dumps.py, two gloo ranks that stop agreeing) read by
// this LibTorch and diagnosed from every rank's last collective.
#include "trainer/diagnose/flight_recorder.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "device/base/errors.h"
#include "tests/support/process.h"
#include "trainer/diagnose/diagnose.h"

namespace {

using namespace zrepro;
using json = nlohmann::json;

const std::string kDumps = std::string(ZREPRO_SOURCE_DIR).append("/tests/data/flight_recorder/");

std::vector<WatchdogEntry> rows(const std::string& kind) {
  std::vector<WatchdogEntry> r;
  for (int rank : {0, 1}) {
    const std::string file = kDumps + kind + "/rank_" + std::to_string(rank);
    const std::string b = zrepro_test::read_text(file);
    EXPECT_TRUE(looks_like_pickle(b)) << file;
    r.push_back(*flight_recorder_row(read_flight_recorder(b, file), rank, "rank_" + std::to_string(rank)));
  }
  return r;
}

TEST(FlightRecorder, EachRanksLastCollectiveFromARealDump) {
  const std::vector<WatchdogEntry> r = rows("mismatched");
  EXPECT_EQ(r[0].seq, 4);
  EXPECT_EQ(r[0].op, "ALLGATHER");
  EXPECT_EQ(r[0].numel_in, 1024);
  EXPECT_EQ(r[0].numel_out, 2048);
  ASSERT_TRUE(r[0].recorded.has_value());
  EXPECT_EQ(r[0].recorded->entries, 4);
  EXPECT_EQ(r[1].op, "ALLREDUCE") << "rank 1's extra reduction";
}

// One rank issued a different collective at the same sequence number: mismatched; the
// same all-gather with different sizes: ZeRO-3 ranks gathering different parameters.
TEST(FlightRecorder, TheRanksLastCollectivesTellTheHangsApart) {
  const Diagnosis m = diagnose_flight_recorder(rows("mismatched"));
  EXPECT_EQ(m.checkpoint, "communication");
  EXPECT_EQ(m.scenario, "mismatched-collectives");
  EXPECT_EQ(m.confidence, "strong");
  ASSERT_EQ(m.evidence.size(), 2u);
  EXPECT_NE(m.evidence[1].text.find("rank 1: last collective #4 ALLREDUCE"), std::string::npos) << m.evidence[1].text;
  const Diagnosis d = diagnose_flight_recorder(rows("divergent"));
  EXPECT_EQ(d.cause, "divergent-zero3-gathers");
  EXPECT_EQ(d.scenario, "moe-divergent-gathers");
  EXPECT_NE(d.to_text().find("set_z3_leaf_modules"), std::string::npos);
}

TEST(FlightRecorder, APickleThatIsNotADumpIsRefusedNamingTheFile) {
  const std::string empty_list = std::string("\x80\x02]q\x00.", 6);  // pickle.dumps([], 2)
  ASSERT_TRUE(looks_like_pickle(empty_list));
  try {
    read_flight_recorder(empty_list, "x.pkl");
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("\"x.pkl\" is a pickle but not a Flight Recorder dump"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(looks_like_pickle("[rank0]: Watchdog caught collective operation timeout"));
}

}  // namespace
