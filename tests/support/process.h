// Running the zrepro binary from tests, as a user would: a command with a time
// limit (a regression that hangs fails its test instead of the suite), its exit
// code and output; `zrepro run` with a config written to a fresh folder and its
// summary.json / metrics.jsonl read back.
#pragma once
#include <stdlib.h>
#include <sys/wait.h>

#include <array>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace zrepro_test {

// [Note: test environment] Every child a test starts gets one intra-op thread per rank
// and Open MPI's switches for running as root and oversubscribing this machine's cores
// (CI and this VM run as root). The tests set them themselves: CMake 3.25's
// gtest_discover_tests passes only the first element of a list-valued ENVIRONMENT
// property. setenv(..., 0): a value the caller set wins.
inline const bool kTestEnvironment = [] {
  for (const char* kv : {"OMP_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1", "OMPI_ALLOW_RUN_AS_ROOT=1",
                         "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1", "OMPI_MCA_mpi_yield_when_idle=1",
                         "OMPI_MCA_rmaps_base_oversubscribe=1"}) {
    const std::string s = kv;
    ::setenv(s.substr(0, s.find('=')).c_str(), s.substr(s.find('=') + 1).c_str(), 0);
  }
  return true;
}();

struct Process {
  int code;
  std::string output;  // stdout (+ stderr unless discarded)
};

// A shell command line, with its output.
inline Process shell(const std::string& cmd) {
  Process r{-1, ""};
  FILE* p = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), p)) r.output.append(buf.data(), n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// `zrepro ARGS`, killed after timeout_s. keep_stderr false: stdout only.
inline Process zrepro_cmd(const std::string& args, int timeout_s = 120, bool keep_stderr = true) {
  return shell("timeout -k 5 " + std::to_string(timeout_s) + " " + std::string(ZREPRO_BIN).append(" ") + args +
               (keep_stderr ? " 2>&1" : " 2>/dev/null"));
}

// A string parameter as a test name (gtest takes letters, digits and '_').
inline std::string param_name(const testing::TestParamInfo<std::string>& i) {
  std::string n = i.param;
  for (char& c : n)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
}

inline std::string fresh_dir(const std::string& name) {
  const std::string dir = testing::TempDir() + "/zrepro_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// The path of a scenario's file in the source tree (configs/scenarios/NAME/FILE).
inline std::string scenario_path(const std::string& name, const std::string& file = "ds_config.json") {
  return std::string(ZREPRO_SOURCE_DIR).append("/configs/scenarios/") + name + "/" + file;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

struct RunResult {
  std::string dir;  // holds ds.json and out/
  int code;
  std::string output;
  nlohmann::json summary;
  std::vector<nlohmann::json> metrics;
};

// `zrepro run --config DIR/ds.json --out DIR/out ARGS` with config_json written to DIR.
inline RunResult zrepro_run(const std::string& name, const std::string& config_json, const std::string& args) {
  const std::string dir = fresh_dir("run_" + name);
  std::ofstream(dir + "/ds.json") << config_json;
  const Process p = zrepro_cmd("run --config " + dir + "/ds.json --out " + dir + "/out " + args, 180);
  RunResult r{dir, p.code, p.output, nullptr, {}};
  std::ifstream s(dir + "/out/summary.json");
  if (s) r.summary = nlohmann::json::parse(s);
  std::ifstream m(dir + "/out/metrics.jsonl");
  for (std::string line; std::getline(m, line);) r.metrics.push_back(nlohmann::json::parse(line));
  return r;
}

// Same loss (relative tol) and grad norm (10 x tol) at every step of two completed runs.
inline void expect_same_losses(const RunResult& ref, const RunResult& r, double tol, const std::string& what) {
  ASSERT_EQ(ref.code, 0) << ref.output;
  ASSERT_EQ(r.code, 0) << what << "\n" << r.output;
  const auto& a = ref.summary["steps"];
  const auto& b = r.summary["steps"];
  ASSERT_EQ(a.size(), b.size()) << what;
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double la = a[i]["loss"], lb = b[i]["loss"];
    worst = std::max(worst, std::abs(la - lb) / std::abs(la));
    EXPECT_NEAR(double(a[i]["grad_norm"]), double(b[i]["grad_norm"]), 10 * tol * double(a[i]["grad_norm"]))
        << what << " step " << i;
  }
  EXPECT_LE(worst, tol) << what;
}

}  // namespace zrepro_test
