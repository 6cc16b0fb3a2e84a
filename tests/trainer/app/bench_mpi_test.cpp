// `zrepro bench comm` (exact checks of the blocking and the stream form, nccl-tests columns) and `bench adam` through the binary.
#include <gtest/gtest.h>

#include "tests/support/process.h"


#include <nlohmann/json.hpp>

using json = nlohmann::json;


TEST(Bench, CommIsExactAndAdamReportsEveryColumn) {
  auto run = [](const std::string& args) {
    const zrepro_test::Process p = zrepro_test::zrepro_cmd(args, 120, false);
    return std::make_pair(p.code, p.output);
  };
  auto [code, out] = run("bench comm --ranks 4 --min-bytes 4K --max-bytes 256K --iters 2 --json");
  ASSERT_EQ(code, 0) << out;
  json rows = json::parse(out);
  EXPECT_EQ(rows.size(), 4u * 7u);  // 4 ops x 4K..256K
  for (const auto& r : rows) {
    EXPECT_EQ(r["wrong"], 0) << r.dump();
    EXPECT_EQ(r["ranks"], 4);
    EXPECT_GT(r["busbw_GBps"].get<double>(), 0);
    EXPECT_GT(r["stream_time_us"].get<double>(), 0);  // the comm stream's form, checked too
  }
  // Reduce-scatter on both sides of [Note: reduce-scatter over MPI]'s 1 MiB switch (MPI's
  // own below it, an all-reduce plus the rank's slice from it), 3 ranks: exact on each.
  auto [rcode, rout] = run("bench comm --ranks 3 --op reduce_scatter --min-bytes 512K --max-bytes 2M --iters 2 --json");
  ASSERT_EQ(rcode, 0) << rout;
  json rs = json::parse(rout);
  ASSERT_EQ(rs.size(), 3u);
  for (const auto& r : rs) EXPECT_EQ(r["wrong"], 0) << r.dump();
  auto [acode, aout] = run("bench adam --sizes 64K --reps 1 --threads 1 --json");
  ASSERT_EQ(acode, 0) << aout;
  json a = json::parse(aout);
  ASSERT_EQ(a.size(), 1u);
  for (const char* k : {"fused_mparams_per_s", "torch_adamw_mparams_per_s", "triad_gbps", "fused_fraction_of_triad"})
    EXPECT_GT(a[0][k].get<double>(), 0) << k;
}
