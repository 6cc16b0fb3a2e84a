// `zrepro bisect` as a user runs it, without network or DeepSpeed: a bisect recorded on
// this CPU (tests/data/bisect/zero2-regression/: DeepSpeed 0.16.0 .. 0.18.2 at ZeRO-2,
// DeepSpeed #7718) replayed from its cache names 0.17.6 and places zrepro beside each
// release; the releases and inputs it cannot run are refused with the reason (exit 2).
// zrepro's own runs are 2 ranks under mpirun, hence the mpi label.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/support/process.h"

namespace {

namespace fs = std::filesystem;

const std::string kData = std::string(ZREPRO_SOURCE_DIR) + "/tests/data/bisect/zero2-regression";

nlohmann::json read(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// bisect with the recorded cache (copied: a replay must not need to write to it) and no
// Python, so nothing can be installed or run but zrepro itself.
zrepro_test::Process offline_bisect(const std::string& name, const std::string& flags, bool with_cache = true) {
  const std::string dir = zrepro_test::fresh_dir(name);
  const std::string cache = dir + "/cache";
  if (with_cache) fs::copy(kData + "/cache", cache, fs::copy_options::recursive);
  return zrepro_test::zrepro_cmd("bisect --config " + kData + "/ds_config.json --cache " + cache +
                                     " --python /nonexistent/python --out " + dir + "/out " + flags,
                                 300);
}

TEST(Bisect, ReplaysARecordedBisectOfTheZero2RegressionOffline) {
  const auto r = offline_bisect("bisect_replay", "--good 0.16.0 --bad 0.18.2");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("no Python with torch at /nonexistent/python): cached runs only"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("first release whose figures moved: 0.17.6 (last good: 0.17.5)"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("step 1 grad norm 1.434137 -> 0.7802409 (-45.6%)"), std::string::npos) << r.output;
  // The version table's entry for the release it names.
  EXPECT_NE(r.output.find("0.17.6 behaviour zero_optimization.stage"), std::string::npos) << r.output;
  // zrepro beside: it trains as the releases before 0.17.6 (a conformance finding, not the user's).
  EXPECT_NE(r.output.find("zrepro as 0.17.5: agrees"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("zrepro as 0.17.6: DIFFERS"), std::string::npos) << r.output;
  const nlohmann::json j = read(testing::TempDir() + "/zrepro_bisect_replay/out/bisect.json");
  EXPECT_EQ(j["first_moved"], "0.17.6");
  EXPECT_EQ(j["last_good"], "0.17.5");
  EXPECT_TRUE(j["exact"].get<bool>());
  // Binary search: the ends and 4 releases of the 18 between them.
  EXPECT_EQ(j["judged"].size(), 6u);
  for (const auto& row : j["judged"]) EXPECT_TRUE(row["from_cache"].get<bool>()) << row["release"];
}

TEST(Bisect, RefusesWhatCannotRunHereWithTheReason) {
  const auto old = offline_bisect("bisect_old", "--good 0.14.0 --bad 0.18.2");
  EXPECT_EQ(old.code, 2) << old.output;
  EXPECT_NE(old.output.find("--good 0.14.0: cannot run here"), std::string::npos) << old.output;
  EXPECT_NE(old.output.find("intel_extension_for_pytorch"), std::string::npos) << old.output;
  const auto order = offline_bisect("bisect_order", "--good 0.18.2 --bad 0.16.0");
  EXPECT_EQ(order.code, 2) << order.output;
  EXPECT_NE(order.output.find("the good release must be older"), std::string::npos) << order.output;
  const auto unknown = offline_bisect("bisect_unknown", "--good 0.16.0 --bad 0.99.0");
  EXPECT_EQ(unknown.code, 2) << unknown.output;
  EXPECT_NE(unknown.output.find("--bad"), std::string::npos) << unknown.output;
  // No network, no Python and nothing cached: said, not guessed.
  const auto nothing = offline_bisect("bisect_nothing", "--good 0.16.0 --bad 0.18.2", false);
  EXPECT_EQ(nothing.code, 2) << nothing.output;
  EXPECT_NE(nothing.output.find("--good 0.16.0: it did not train this config here: unavailable: not in the cache"),
            std::string::npos)
      << nothing.output;
}

}  // namespace
