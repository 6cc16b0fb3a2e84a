// `zrepro env --json` and summary.json's "env" as one type: what a build and machine are.
// [Note: one environment type] trainer/app/env.cpp measures the machine into an Environment;
// the JSON is its to_json, the human block its text(), and readers (check's version rows,
// baselines) take a summary's or baseline's env through from_json. from_json is lenient
// where an older zrepro wrote less (a key it lacks is unknown, not an error), so a
// baseline saved before a field existed is still read.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "device/base/field_doc.h"

namespace zrepro {

struct EnvGpu {
  std::string name;
  int64_t total_bytes = 0;
  std::string compute_capability;  // "9.0"
};

// The planner's activation tapes ([Note: tapes of this LibTorch]): which LibTorch recorded
// them, oneDNN's bf16 GEMM scratch on this CPU, the file, how many problems it reported.
struct EnvTapes {
  std::string libtorch, file;
  int64_t bf16_gemm_scratch_bytes = 0, problems = 0;
};

// OpenBLAS's kernel set and who chose it ([Note: OpenBLAS on a CPU it does not know], env.h).
struct EnvBlasKernels {
  std::string core, openblas_detected;
  std::optional<std::string> set_by;  // "zrepro", "OPENBLAS_CORETYPE", or null (OpenBLAS itself)
};

struct Environment {
  std::optional<std::string> zrepro_version, zrepro_commit;
  // LibTorch
  std::optional<std::string> libtorch_version, libtorch_kind, libtorch_prefix, libtorch_source;
  bool libtorch_cuda = false, gpu_visible = false;
  int intra_op_threads = 0;
  std::optional<EnvTapes> tapes;
  std::string tapes_problem;  // why the tapes cannot be read (tapes then null)
  std::optional<std::string> blas;
  std::optional<EnvBlasKernels> blas_kernels;
  std::optional<std::string> mpi, nccl_version, cuda_runtime, cuda_driver, cuda_note;
  bool nccl_built = false;
  std::vector<EnvGpu> gpus;
  // Host
  int64_t memory_total_bytes = -1, memory_available_bytes = -1;
  std::optional<int64_t> memlock_limit_bytes;  // nullopt: unlimited
  bool cap_ipc_lock = false;
  std::optional<std::string> cpu_model;
  int cpu_cores = 0;
  std::vector<std::string> cpu_flags;

  nlohmann::json to_json() const;
  static Environment from_json(const nlohmann::json& j);  // null or not an object: everything unknown
  std::string text() const;                               // `zrepro env`'s block
  // The versions a check reports when they changed, by name ("libtorch.version", ...).
  std::vector<std::pair<std::string, std::optional<std::string>>> versions() const;
};

// docs/reference/env-json.md: the field table of `zrepro env --json` (and a summary's and a
// baseline's env), an example with every field set, and the page.
const std::vector<FieldDoc>& environment_field_docs();
Environment environment_example();
std::string environment_reference_page();

}  // namespace zrepro
