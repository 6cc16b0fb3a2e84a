// [Note: one environment type] (trainer/report/environment.h): an environment an older
// zrepro wrote, or a damaged one, reads as what it says and unknown for the rest; the
// versions a check reports come from the typed fields.
#include <gtest/gtest.h>

#include "tests/support/doc_fields.h"
#include "trainer/report/environment.h"

using namespace zrepro;
using json = nlohmann::json;

TEST(Environment, AnOlderOrDamagedBlockReadsAsFarAsItGoes) {
  const Environment old = Environment::from_json(json{{"libtorch", {{"version", "2.4.0"}}}, {"mpi", "Open MPI v4.1.4"}});
  EXPECT_EQ(old.libtorch_version, "2.4.0");
  EXPECT_EQ(old.mpi, "Open MPI v4.1.4");
  EXPECT_FALSE(old.nccl_version.has_value());
  EXPECT_FALSE(old.blas_kernels.has_value());
  const Environment damaged = Environment::from_json(json{{"libtorch", {{"version", 7}}}, {"cpu", "a string"}, {"host", nullptr}});
  EXPECT_FALSE(damaged.libtorch_version.has_value()) << "a version of the wrong type is unknown, not an abort";
  EXPECT_FALSE(damaged.cpu_model.has_value());
  EXPECT_NO_THROW(Environment::from_json(json()).text());
  EXPECT_NO_THROW(Environment::from_json(json::array()).text());
}

TEST(Environment, WritesAndReadsEveryField) {
  Environment e;
  e.zrepro_version = "0.1.0", e.zrepro_commit = "abc", e.libtorch_version = "2.15.0", e.libtorch_kind = "CPU";
  e.libtorch_prefix = "/p", e.libtorch_source = "pip", e.intra_op_threads = 2;
  e.tapes = EnvTapes{"2.15.0", "tapes.json", 4096, 0};
  e.blas = "MKL (inside LibTorch)";
  e.blas_kernels = EnvBlasKernels{"Cooperlake", "Prescott", "zrepro"};
  e.mpi = "Open MPI", e.nccl_version = "2.21", e.nccl_built = true, e.cuda_runtime = "12.4", e.cuda_driver = "550";
  e.gpus = {EnvGpu{"NVIDIA H200", 150000000000, "9.0"}};
  e.memory_total_bytes = 1 << 30, e.memory_available_bytes = 1 << 29, e.memlock_limit_bytes = 65536, e.cap_ipc_lock = true;
  e.cpu_model = "Xeon", e.cpu_cores = 2, e.cpu_flags = {"avx2", "fma"};
  const json j = e.to_json();
  EXPECT_EQ(Environment::from_json(j).to_json(), j);
  const std::string text = Environment::from_json(j).text();
  EXPECT_NE(text.find(". NVIDIA H200, 139.70 GiB, sm 9.0"), std::string::npos) << text;
  EXPECT_NE(text.find("chosen by zrepro: OpenBLAS took this CPU for a Prescott"), std::string::npos) << text;
  EXPECT_NE(text.find(". 64.00 KiB, CAP_IPC_LOCK held"), std::string::npos) << text;
  Environment unlimited = e;
  unlimited.memlock_limit_bytes.reset();
  EXPECT_EQ(unlimited.to_json()["host"]["memlock_limit_bytes"], "unlimited");
  EXPECT_FALSE(Environment::from_json(unlimited.to_json()).memlock_limit_bytes.has_value());
  const auto v = e.versions();
  ASSERT_EQ(v.size(), 6u);
  EXPECT_EQ(v[0].first, "libtorch.version");
  EXPECT_EQ(v[0].second, "2.15.0");
}

// [Note: one environment type]: docs/reference/env-json.md is the page generated from the
// type's field table, and every field the type writes has its row.
TEST(EnvDoc, EveryFieldHasItsRowAndThePageIsTheGeneratedText) {
  const nlohmann::json written = environment_example().to_json();
  EXPECT_EQ(Environment::from_json(written).to_json(), written);
  std::set<std::string> paths;
  zrepro_test::leaf_paths(written, "", paths);
  EXPECT_GT(paths.size(), 20u);
  zrepro_test::expect_rows_match(paths, environment_field_docs(), "Environment");
  zrepro_test::expect_generated_page(std::string(ZREPRO_SOURCE_DIR).append("/docs/reference/env-json.md"),
                                     environment_reference_page(), "ZREPRO_WRITE_ENV_DOC", "EnvDoc.*");
}
