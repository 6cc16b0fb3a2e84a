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

// The CPU's model name and the flags that decide kernel speed (bf16 matmuls, fused Adam).
json cpu_json() {
  const CpuInfo c = cpu_info();
  json f = json::array();
  for (const char* name : {"avx2", "fma", "f16c", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile"})
    if (c.has(name)) f.push_back(name);
  const std::string& model = c.model;
  return {{"model", model.empty() ? json(nullptr) : json(model)},
          {"cores", std::thread::hardware_concurrency()},
          {"flags", f}};
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
json activation_tapes_json() {
  try {
    const TapeTable& t = planner_tapes();
    return {{"libtorch", t.libtorch}, {"bf16_gemm_scratch_bytes", t.bf16_gemm_scratch_bytes}, {"file", t.source},
            {"problems", t.problems.size()}};
  } catch (const std::exception& e) {
    return e.what();
  }
}

// OpenBLAS's kernel set, and whether zrepro chose it ([Note: OpenBLAS on a CPU it does not know]).
json blas_kernels_json() {
  const std::string core = blas_core();
  if (core.empty()) return nullptr;
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  const char* detected = std::getenv(kDetectedEnv);
  return {{"core", core},
          {"openblas_detected", detected ? json(detected) : json(core)},
          {"set_by", detected ? json("zrepro") : forced ? json("OPENBLAS_CORETYPE") : json(nullptr)}};
}

}  // namespace

json environment_json() {
  const CommRuntimeInfo c = comm_runtime_info();
  json gpus = json::array();
  for (const auto& g : c.gpus)
    gpus.push_back({{"name", g.name}, {"total_bytes", g.total_bytes},
                    {"compute_capability", std::to_string(g.cc_major) + "." + std::to_string(g.cc_minor)}});
  const MemlockInfo m = memlock_info();
  auto or_null = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  return {{"zrepro", {{"version", ZREPRO_VERSION}, {"commit", ZREPRO_GIT_COMMIT}}},
          {"libtorch", {{"version", torch_version()}, {"cuda", cuda_memory_supported()},
                        {"gpu_visible", torch::cuda::is_available()}, {"kind", libtorch_kind()},
                        {"intra_op_threads", at::get_num_threads()},
                        {"prefix", ZREPRO_TORCH_PREFIX}, {"source", ZREPRO_TORCH_SOURCE},
                        {"activation_tapes", activation_tapes_json()}}},
          {"blas", blas_library()},
          {"blas_kernels", blas_kernels_json()},
          {"mpi", or_null(c.mpi)},
          {"nccl", {{"built", c.nccl_built}, {"version", or_null(c.nccl)}}},
          {"cuda", {{"runtime", or_null(c.cuda_runtime)}, {"driver", or_null(c.cuda_driver)},
                    {"gpus", gpus}, {"note", or_null(c.cuda_error)}}},
          {"host", {{"memory_total_bytes", meminfo_bytes("MemTotal:")},
                    {"memory_available_bytes", meminfo_bytes("MemAvailable:")},
                    {"memlock_limit_bytes", m.limit_bytes < 0 ? json("unlimited") : json(m.limit_bytes)},
                    {"cap_ipc_lock", m.cap_ipc_lock}}},
          {"cpu", cpu_json()}};
}

std::string format_environment(const json& e) {
  std::ostringstream o;
  auto row = [&](const std::string& k, const std::string& v) {
    o << "  " << k << std::string(k.size() < 18 ? 18 - k.size() : 1, '.') << " " << v << "\n";
  };
  auto str = [](const json& v) { return v.is_string() ? v.get<std::string>() : v.is_null() ? "-" : v.dump(); };
  o << "zrepro environment\n";
  row("zrepro", str(e["zrepro"]["version"]) + " (commit " + str(e["zrepro"]["commit"]) + ")");
  row("libtorch", str(e["libtorch"]["version"]) + " " + str(e["libtorch"]["kind"]) + ", " +
                      str(e["libtorch"]["intra_op_threads"]) + " intra-op thread(s)");
  row("libtorch from", str(e["libtorch"]["source"]) + " (" + str(e["libtorch"]["prefix"]) + ")");
  if (e["libtorch"]["activation_tapes"].is_object()) {
    const json& t = e["libtorch"]["activation_tapes"];
    const int64_t scratch = t["bf16_gemm_scratch_bytes"].get<int64_t>();
    row("planner tapes", "recorded with LibTorch " + str(t["libtorch"]) + " at build, " + str(t["file"]));
    row("bf16 gemm", scratch > 0 ? "oneDNN on this CPU: " + format_bytes(scratch) +
                                       " of transient scratch per [800 x 256] x [256 x 1024] matmul (not planned)"
                                 : "allocates only its output on this CPU");
  } else {
    row("planner tapes", str(e["libtorch"]["activation_tapes"]));
  }
  const std::string blas = str(e["blas"]);
  row("blas", blas + (blas.find("openblas") == std::string::npos && blas.find("MKL") == std::string::npos
                          ? "  (not OpenBLAS: LibTorch's reference BLAS is about 25x slower)"
                          : ""));
  if (e.contains("blas_kernels") && e["blas_kernels"].is_object()) {
    const json& k = e["blas_kernels"];
    const std::string by = str(k["set_by"]);
    row("blas kernels", "OpenBLAS " + str(k["core"]) +
                            (by == "zrepro" ? "  (chosen by zrepro: OpenBLAS took this CPU for a " +
                                                  str(k["openblas_detected"]) + ")"
                             : by == "OPENBLAS_CORETYPE" ? "  (OPENBLAS_CORETYPE)" : ""));
  }
  row("mpi", str(e["mpi"]));
  row("nccl", e["nccl"]["built"].get<bool>() ? "backend built, NCCL " + str(e["nccl"]["version"]) : "backend not built");
  row("cuda", "runtime " + str(e["cuda"]["runtime"]) + ", driver " + str(e["cuda"]["driver"]));
  for (const auto& g : e["cuda"]["gpus"])
    row("gpu", g["name"].get<std::string>() + ", " + format_bytes(g["total_bytes"].get<int64_t>()) + ", sm " +
                   g["compute_capability"].get<std::string>());
  if (e["cuda"]["gpus"].empty()) row("gpu", "none (" + str(e["cuda"]["note"]) + ")");
  const json& h = e["host"];
  row("host memory", format_bytes(h["memory_total_bytes"].get<int64_t>()) + " total, " +
                         format_bytes(h["memory_available_bytes"].get<int64_t>()) + " available");
  row("memlock", (h["memlock_limit_bytes"].is_string() ? std::string("unlimited")
                                                       : format_bytes(h["memlock_limit_bytes"].get<int64_t>())) +
                     (h["cap_ipc_lock"].get<bool>() ? ", CAP_IPC_LOCK held (no limit applies)" : ", no CAP_IPC_LOCK"));
  std::string flags;
  for (const auto& f : e["cpu"]["flags"]) flags += " " + f.get<std::string>();
  row("cpu", str(e["cpu"]["model"]) + ", " + str(e["cpu"]["cores"]) + " cores, flags:" + (flags.empty() ? " -" : flags));
  return o.str();
}

int env_command(int argc, char** argv) {
  cxxopts::Options o("zrepro env", "What this build and machine are (as DeepSpeed's ds_report).");
  o.add_options("env")("json", "print JSON")("h,help", "show this help");
  return command_main(o, argc, argv, [&](const cxxopts::ParseResult& r) -> int {
    const json e = environment_json();
    std::cout << (r.count("json") ? json_text(e) + "\n" : format_environment(e));
    return kExitOk;
  });
}

}  // namespace zrepro
