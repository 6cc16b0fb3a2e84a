// See env.h.
#include "trainer/app/env.h"

#include <ATen/Version.h>
#include <dlfcn.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "device/cuda_memory.h"
#include "device/device_memory.h"
#include "offload/host_memory.h"
#include "trainer/app/cli.h"
#include "trainer/planner/gpt_memory.h"
#include "trainer/report/report.h"
#include "zero/comm/runtime_info.h"
#include "zrepro_git.h"  // generated: ZREPRO_VERSION, ZREPRO_GIT_COMMIT

namespace zrepro {

using json = nlohmann::json;

namespace {

std::string torch_version() {
  return std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
         std::to_string(TORCH_VERSION_PATCH);
}

struct CpuInfo {
  std::string model;
  std::string flags;  // " avx2 fma ... ": every flag between spaces
  bool has(const char* flag) const { return flags.find(std::string(" ") + flag + " ") != std::string::npos; }
};

CpuInfo cpu_info() {
  std::ifstream in("/proc/cpuinfo");
  CpuInfo c;
  for (std::string line; std::getline(in, line) && (c.model.empty() || c.flags.empty());) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    const std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "model name" && c.model.empty()) c.model = value;
    if (key == "flags" && c.flags.empty()) c.flags = " " + value + " ";
  }
  return c;
}

constexpr const char* kDetectedEnv = "ZREPRO_OPENBLAS_DETECTED";  // set for the re-executed process

}  // namespace

int blas_core_level(std::string core) {
  std::transform(core.begin(), core.end(), core.begin(), [](unsigned char ch) { return std::tolower(ch); });
  for (const char* k : {"skylakex", "cooperlake", "sapphirerapids"})
    if (core.find(k) != std::string::npos) return 3;
  for (const char* k : {"haswell", "skylake", "zen", "excavator"})
    if (core.find(k) != std::string::npos) return 2;
  for (const char* k : {"sandybridge", "bulldozer", "piledriver", "steamroller"})
    if (core.find(k) != std::string::npos) return 1;
  return 0;
}

std::string best_blas_core() {
  const CpuInfo c = cpu_info();
  if (c.has("avx512f") && c.has("avx512vl") && c.has("avx512bw") && c.has("avx512dq"))
    return c.has("avx512_bf16") ? "COOPERLAKE" : "SKYLAKEX";
  if (c.has("avx2") && c.has("fma")) return "HASWELL";
  if (c.has("avx")) return "SANDYBRIDGE";
  return "";
}

std::string blas_core() {
  using Fn = char* (*)();
  const auto get = reinterpret_cast<Fn>(::dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  const char* name = get ? get() : nullptr;
  return name ? std::string(name) : std::string();
}

void ensure_blas_kernels(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE")) return;
  const std::string core = blas_core();
  if (core.empty()) return;
  const std::string want = best_blas_core();
  if (want.empty() || blas_core_level(core) >= blas_core_level(want)) return;
  ::setenv("OPENBLAS_CORETYPE", want.c_str(), 1);
  ::setenv(kDetectedEnv, core.c_str(), 1);
  std::fflush(nullptr);
  ::execv("/proc/self/exe", argv);
  ::unsetenv("OPENBLAS_CORETYPE");  // could not re-execute: carry on with OpenBLAS's choice
  ::unsetenv(kDetectedEnv);
}

std::string blas_library() {
  // LibTorch's build configuration names its BLAS: pip's wheels link MKL into
  // libtorch_cpu; Debian's calls the system libblas.so.3 (an alternative: OpenBLAS or
  // the reference BLAS).
  const std::string config = at::show_config();
  const auto pos = config.find("BLAS_INFO=");
  const std::string info =
      pos == std::string::npos ? "" : config.substr(pos + 10, config.find_first_of(", \n", pos + 10) - pos - 10);
  if (info.find("mkl") != std::string::npos) return "MKL (inside LibTorch)";
  std::error_code ec;
  const auto target = std::filesystem::canonical("/etc/alternatives/libblas.so.3-x86_64-linux-gnu", ec);
  return ec ? (info.empty() ? "unknown" : info) : target.string();
}

int64_t meminfo_bytes(const std::string& key) {
  std::ifstream in("/proc/meminfo");
  for (std::string k; in >> k;) {
    int64_t kb = 0;
    in >> kb;
    if (k == key) return kb * 1024;
    in.ignore(1 << 10, '\n');
  }
  return -1;
}

int cpu_slots() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return std::max(1u, std::thread::hardware_concurrency());
}

std::string libtorch_kind() {
  if (!cuda_memory_supported()) return "CPU";
  return torch::cuda::is_available() ? "CUDA" : "CUDA (no GPU visible)";
}

std::string version_line() {
  return std::string("zrepro ") + ZREPRO_VERSION + " (commit " + ZREPRO_GIT_COMMIT + "), LibTorch " + torch_version() +
         " " + libtorch_kind();
}

namespace {

// The planner's activation tapes ([Note: tapes of this LibTorch]): which LibTorch and CPU
// they were recorded with, or why they cannot be read.
void activation_tapes(Environment& e) {
  try {
    const TapeTable& t = planner_tapes();
    e.tapes = EnvTapes{t.libtorch, t.source, t.bf16_gemm_scratch_bytes, static_cast<int64_t>(t.problems.size())};
  } catch (const std::exception& x) {
    e.tapes_problem = x.what();
  }
}

// OpenBLAS's kernel set, and whether zrepro chose it ([Note: OpenBLAS on a CPU it does not know]).
std::optional<EnvBlasKernels> blas_kernels() {
  const std::string core = blas_core();
  if (core.empty()) return std::nullopt;
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  const char* detected = std::getenv(kDetectedEnv);
  return EnvBlasKernels{core, detected ? detected : core,
                        detected  ? std::optional<std::string>("zrepro")
                        : forced ? std::optional<std::string>("OPENBLAS_CORETYPE")
                                 : std::nullopt};
}

std::optional<std::string> unless_empty(const std::string& s) { return s.empty() ? std::nullopt : std::optional<std::string>(s); }

// The CPU's model name and the flags that decide kernel speed (bf16 matmuls, fused Adam),
// the host's memory and the memlock limit.
void host(Environment& e) {
  const CpuInfo c = cpu_info();
  for (const char* name : {"avx2", "fma", "f16c", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile"})
    if (c.has(name)) e.cpu_flags.push_back(name);
  e.cpu_model = unless_empty(c.model);
  e.cpu_cores = static_cast<int>(std::thread::hardware_concurrency());
  const MemlockInfo m = memlock_info();
  e.memory_total_bytes = meminfo_bytes("MemTotal:");
  e.memory_available_bytes = meminfo_bytes("MemAvailable:");
  if (m.limit_bytes >= 0) e.memlock_limit_bytes = m.limit_bytes;
  e.cap_ipc_lock = m.cap_ipc_lock;
}

}  // namespace

Environment environment() {
  Environment e;
  e.zrepro_version = ZREPRO_VERSION, e.zrepro_commit = ZREPRO_GIT_COMMIT;
  e.libtorch_version = torch_version(), e.libtorch_kind = libtorch_kind();
  e.libtorch_prefix = ZREPRO_TORCH_PREFIX, e.libtorch_source = ZREPRO_TORCH_SOURCE;
  e.libtorch_cuda = cuda_memory_supported(), e.gpu_visible = torch::cuda::is_available();
  e.intra_op_threads = at::get_num_threads();
  activation_tapes(e);
  e.blas = blas_library();
  e.blas_kernels = blas_kernels();
  const CommRuntimeInfo c = comm_runtime_info();
  for (const auto& g : c.gpus)
    e.gpus.push_back({g.name, g.total_bytes, std::to_string(g.cc_major) + "." + std::to_string(g.cc_minor)});
  e.mpi = unless_empty(c.mpi), e.nccl_version = unless_empty(c.nccl), e.nccl_built = c.nccl_built;
  e.cuda_runtime = unless_empty(c.cuda_runtime), e.cuda_driver = unless_empty(c.cuda_driver);
  e.cuda_note = unless_empty(c.cuda_error);
  host(e);
  return e;
}

int env_command(int argc, char** argv) {
  cxxopts::Options o("zrepro env", "What this build and machine are (as DeepSpeed's ds_report).");
  o.add_options("env")("json", "print JSON")("h,help", "show this help");
  return command_main(o, argc, argv, [&](const cxxopts::ParseResult& r) -> int {
    const Environment e = environment();
    std::cout << (r.count("json") ? json_text(e.to_json()) + "\n" : e.text());
    return kExitOk;
  });
}

}  // namespace zrepro
