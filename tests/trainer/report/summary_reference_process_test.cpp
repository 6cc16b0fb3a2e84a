// docs/reference/summary-json.md names every field a run writes: an ordinary run, an
// offloaded ZeRO-3 run and an OOM are walked three levels deep (arrays of objects as `[]`,
// `a.b.*` in the page covering everything under a.b), and a field the page does not name
// fails the test. A new field therefore comes with its line in the reference.
#include <gtest/gtest.h>

#include <set>

#include "tests/support/process.h"

namespace {

void walk(const nlohmann::json& v, const std::string& path, int depth, std::set<std::string>& out) {
  if (v.is_object() && depth < 3) {
    for (const auto& [k, x] : v.items()) walk(x, path.empty() ? k : path + "." + k, depth + 1, out);
  } else if (v.is_array() && !v.empty() && v[0].is_object() && depth < 3) {
    walk(v[0], path + "[]", depth, out);
  } else {
    out.insert(path);
  }
}

bool documented(const std::string& page, const std::string& path) {
  // The field itself, or (a null object, an empty array) the fields under it.
  for (const char* tail : {"`", ".", "[]"})
    if (page.find("`" + path + tail) != std::string::npos) return true;
  for (size_t dot = path.rfind('.'); dot != std::string::npos; dot = path.rfind('.', dot - 1)) {
    if (page.find("`" + path.substr(0, dot) + ".*`") != std::string::npos) return true;
    if (dot == 0) break;
  }
  return false;
}

}  // namespace

TEST(SummaryReference, EveryFieldARunWritesIsInThePage) {
  const std::string page = zrepro_test::read_text(std::string(ZREPRO_SOURCE_DIR).append("/docs/reference/summary-json.md"));
  ASSERT_FALSE(page.empty());
  const std::string src = ZREPRO_SOURCE_DIR;
  std::set<std::string> paths;
  const auto ok = zrepro_test::zrepro_run("sumref_ok", zrepro_test::read_text(src + "/configs/examples/stage0_fp32.json"),
                                          "--steps 2");
  ASSERT_EQ(ok.code, 0) << ok.output;
  walk(ok.summary, "", 0, paths);
  const auto off = zrepro_test::zrepro_run(
      "sumref_offload", zrepro_test::read_text(src + "/configs/examples/zero3_offload.json"), "--steps 2");
  ASSERT_EQ(off.code, 0) << off.output;
  walk(off.summary, "", 0, paths);
  const auto oom = zrepro_test::zrepro_run(
      "sumref_oom", zrepro_test::read_text(src + "/configs/scenarios/optimizer-partition-oom/ds_config.json"),
      "--model small --device-memory 48MB --steps 2");
  ASSERT_EQ(oom.code, 3) << oom.output;
  walk(oom.summary, "", 0, paths);
  EXPECT_GT(paths.size(), 100u);
  for (const auto& p : paths) EXPECT_TRUE(documented(page, p)) << "summary.json field `" << p << "` is not in docs/reference/summary-json.md";
}
