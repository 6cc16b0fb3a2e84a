// trainer/bisect/release_env.h: the bisect cache is checked, never trusted ([Note: a cache
// entry is checked, never trusted]; issue 61): a cached run whose record names another release,
// or imported another DeepSpeed, is not returned under this release's name.
#include "trainer/bisect/release_env.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace zrepro {
namespace {

using json = nlohmann::json;

TEST(ReleaseRunner, ACachedRunOfAnotherReleaseIsNotThisOnes) {
  const std::string cache = testing::TempDir() + "/zrepro_bisect_cache_check";
  std::filesystem::remove_all(cache);
  const RunInputs in{"k1", "", "", 2, 3};
  const std::string dir = cache + "/runs/k1";
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& release, const json& rec) {
    std::ofstream(dir + "/deepspeed-" + release + "+torch-2.15.0.json") << rec.dump();
  };
  const json ran = {{"outcome", "ran"}, {"message", ""}, {"torch", "2.15.0"}, {"steps", json::array()},
                    {"bytes", json::object()}, {"comm_bytes", json::object()}};
  json good = ran, legacy = ran, renamed = ran, wrong_import = ran;
  good["release"] = "0.17.5", good["versions"] = {{"deepspeed", "0.17.5"}, {"torch", "2.15.0"}};
  renamed["release"] = "0.17.5";  // filed under 0.17.6
  wrong_import["release"] = "0.18.0", wrong_import["versions"] = {{"deepspeed", "0.19.8"}};  // an emptied env ran the venv's
  write("0.17.5", good);
  write("0.16.9", legacy);  // before records named their release: the file name says it
  write("0.17.6", renamed);
  write("0.18.0", wrong_import);
  ReleaseRunner runner(BisectPaths{cache, "/nonexistent/python", "/nonexistent"}, "", testing::TempDir());
  bool from_cache = false;
  EXPECT_EQ(runner.figures("0.17.5", in, from_cache).outcome, "ran");
  EXPECT_TRUE(from_cache);
  EXPECT_EQ(runner.figures("0.16.9", in, from_cache).outcome, "ran");
  EXPECT_TRUE(from_cache);
  for (const char* release : {"0.17.6", "0.18.0"}) {
    const ReleaseFigures f = runner.figures(release, in, from_cache);
    EXPECT_FALSE(from_cache) << release;
    EXPECT_EQ(f.outcome, "unavailable") << release << ": " << f.message;
    EXPECT_FALSE(std::filesystem::exists(dir + "/deepspeed-" + std::string(release) + "+torch-2.15.0.json")) << release;
  }
}

}  // namespace
}  // namespace zrepro
