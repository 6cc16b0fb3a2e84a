// See environment.h.
#include "trainer/report/environment.h"

#include <sstream>

#include "device/device_memory.h"
#include "device/base/json_optional.h"

namespace zrepro {

using json = nlohmann::json;

namespace environment_doc {

// An object's member, or null where an older zrepro did not write it.
const json& member(const json& j, const char* key) {
  static const json none;
  return j.is_object() && j.contains(key) ? j[key] : none;
}

// A member of its type, else unknown (absent, null, or of another type in a file zrepro did
// not write): an environment is reported, never a reason to refuse a baseline.
template <class T>
std::optional<T> maybe(const json& j, const char* key) {
  try {
    return j.is_object() ? optional_of<T>(j, key) : std::nullopt;
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

json tapes_json(const Environment& e) {
  if (!e.tapes) return e.tapes_problem;
  return {{"libtorch", e.tapes->libtorch}, {"bf16_gemm_scratch_bytes", e.tapes->bf16_gemm_scratch_bytes},
          {"file", e.tapes->file}, {"problems", e.tapes->problems}};
}

void libtorch_of(const json& t, Environment& e) {
  e.libtorch_version = maybe<std::string>(t, "version");
  e.libtorch_kind = maybe<std::string>(t, "kind");
  e.libtorch_prefix = maybe<std::string>(t, "prefix");
  e.libtorch_source = maybe<std::string>(t, "source");
  e.libtorch_cuda = maybe<bool>(t, "cuda").value_or(false);
  e.gpu_visible = maybe<bool>(t, "gpu_visible").value_or(false);
  e.intra_op_threads = maybe<int>(t, "intra_op_threads").value_or(0);
  const json& tapes = member(t, "activation_tapes");
  if (tapes.is_object())
    e.tapes = EnvTapes{maybe<std::string>(tapes, "libtorch").value_or(""), maybe<std::string>(tapes, "file").value_or(""),
                       maybe<int64_t>(tapes, "bf16_gemm_scratch_bytes").value_or(0), maybe<int64_t>(tapes, "problems").value_or(0)};
  else if (tapes.is_string())  // why they could not be read
    e.tapes_problem = tapes.get<std::string>();
}

void host_of(const json& j, Environment& e) {
  const json& h = member(j, "host");
  e.memory_total_bytes = maybe<int64_t>(h, "memory_total_bytes").value_or(-1);
  e.memory_available_bytes = maybe<int64_t>(h, "memory_available_bytes").value_or(-1);
  const json& limit = member(h, "memlock_limit_bytes");
  if (limit.is_number()) e.memlock_limit_bytes = limit.get<int64_t>();
  e.cap_ipc_lock = maybe<bool>(h, "cap_ipc_lock").value_or(false);
  const json& cpu = member(j, "cpu");
  e.cpu_model = maybe<std::string>(cpu, "model");
  e.cpu_cores = maybe<int>(cpu, "cores").value_or(0);
  if (member(cpu, "flags").is_array())
    for (const auto& f : cpu["flags"])
      if (f.is_string()) e.cpu_flags.push_back(f.get<std::string>());
}

std::string shown(const std::optional<std::string>& v) { return v ? *v : "-"; }

// One "  key....... value" line of the block.
void row(std::ostringstream& o, const std::string& k, const std::string& v) {
  o << "  " << k << std::string(k.size() < 18 ? 18 - k.size() : 1, '.') << " " << v << "\n";
}

void libtorch_rows(std::ostringstream& o, const Environment& e) {
  row(o, "libtorch", shown(e.libtorch_version) + " " + shown(e.libtorch_kind) + ", " + std::to_string(e.intra_op_threads) +
                         " intra-op thread(s)");
  row(o, "libtorch from", shown(e.libtorch_source) + " (" + shown(e.libtorch_prefix) + ")");
  if (e.tapes) {
    const int64_t scratch = e.tapes->bf16_gemm_scratch_bytes;
    row(o, "planner tapes", "recorded with LibTorch " + e.tapes->libtorch + " at build, " + e.tapes->file);
    row(o, "bf16 gemm", scratch > 0 ? "oneDNN on this CPU: " + format_bytes(scratch) +
                                          " of transient scratch per [800 x 256] x [256 x 1024] matmul (not planned)"
                                    : "allocates only its output on this CPU");
  } else {
    row(o, "planner tapes", e.tapes_problem.empty() ? "-" : e.tapes_problem);
  }
  const std::string blas = shown(e.blas);
  row(o, "blas", blas + (blas.find("openblas") == std::string::npos && blas.find("MKL") == std::string::npos
                             ? "  (not OpenBLAS: LibTorch's reference BLAS is about 25x slower)"
                             : ""));
  if (e.blas_kernels) {
    const EnvBlasKernels& k = *e.blas_kernels;
    const std::string by = shown(k.set_by);
    row(o, "blas kernels", "OpenBLAS " + k.core +
                               (by == "zrepro" ? "  (chosen by zrepro: OpenBLAS took this CPU for a " + k.openblas_detected + ")"
                                : by == "OPENBLAS_CORETYPE" ? "  (OPENBLAS_CORETYPE)" : ""));
  }
}

void machine_rows(std::ostringstream& o, const Environment& e) {
  row(o, "mpi", shown(e.mpi));
  row(o, "nccl", e.nccl_built ? "backend built, NCCL " + shown(e.nccl_version) : "backend not built");
  row(o, "cuda", "runtime " + shown(e.cuda_runtime) + ", driver " + shown(e.cuda_driver));
  for (const auto& g : e.gpus)
    row(o, "gpu", g.name + ", " + format_bytes(g.total_bytes) + ", sm " + g.compute_capability);
  if (e.gpus.empty()) row(o, "gpu", "none (" + shown(e.cuda_note) + ")");
  row(o, "host memory", format_bytes(e.memory_total_bytes) + " total, " + format_bytes(e.memory_available_bytes) + " available");
  row(o, "memlock", (e.memlock_limit_bytes ? format_bytes(*e.memlock_limit_bytes) : std::string("unlimited")) +
                        (e.cap_ipc_lock ? ", CAP_IPC_LOCK held (no limit applies)" : ", no CAP_IPC_LOCK"));
  std::string flags;
  for (const auto& f : e.cpu_flags) flags += " " + f;
  row(o, "cpu", shown(e.cpu_model) + ", " + std::to_string(e.cpu_cores) + " cores, flags:" + (flags.empty() ? " -" : flags));
}

}  // namespace environment_doc

json Environment::to_json() const {
  using namespace environment_doc;
  json gpus_j = json::array();
  for (const auto& g : gpus)
    gpus_j.push_back({{"name", g.name}, {"total_bytes", g.total_bytes}, {"compute_capability", g.compute_capability}});
  return {{"zrepro", {{"version", json_of(zrepro_version)}, {"commit", json_of(zrepro_commit)}}},
          {"libtorch", {{"version", json_of(libtorch_version)}, {"cuda", libtorch_cuda}, {"gpu_visible", gpu_visible},
                        {"kind", json_of(libtorch_kind)}, {"intra_op_threads", intra_op_threads},
                        {"prefix", json_of(libtorch_prefix)}, {"source", json_of(libtorch_source)},
                        {"activation_tapes", tapes_json(*this)}}},
          {"blas", json_of(blas)},
          {"blas_kernels", blas_kernels ? json{{"core", blas_kernels->core},
                                               {"openblas_detected", blas_kernels->openblas_detected},
                                               {"set_by", json_of(blas_kernels->set_by)}}
                                        : json(nullptr)},
          {"mpi", json_of(mpi)},
          {"nccl", {{"built", nccl_built}, {"version", json_of(nccl_version)}}},
          {"cuda", {{"runtime", json_of(cuda_runtime)}, {"driver", json_of(cuda_driver)}, {"gpus", gpus_j},
                    {"note", json_of(cuda_note)}}},
          {"host", {{"memory_total_bytes", memory_total_bytes},
                    {"memory_available_bytes", memory_available_bytes},
                    {"memlock_limit_bytes", memlock_limit_bytes ? json(*memlock_limit_bytes) : json("unlimited")},
                    {"cap_ipc_lock", cap_ipc_lock}}},
          {"cpu", {{"model", json_of(cpu_model)}, {"cores", cpu_cores}, {"flags", cpu_flags}}}};
}

Environment Environment::from_json(const json& j) {
  using namespace environment_doc;
  Environment e;
  const json& z = member(j, "zrepro");
  e.zrepro_version = maybe<std::string>(z, "version");
  e.zrepro_commit = maybe<std::string>(z, "commit");
  libtorch_of(member(j, "libtorch"), e);
  e.blas = maybe<std::string>(j, "blas");
  const json& k = member(j, "blas_kernels");
  if (k.is_object())
    e.blas_kernels = EnvBlasKernels{maybe<std::string>(k, "core").value_or(""),
                                    maybe<std::string>(k, "openblas_detected").value_or(""), maybe<std::string>(k, "set_by")};
  e.mpi = maybe<std::string>(j, "mpi");
  const json &nccl = member(j, "nccl"), &cuda = member(j, "cuda");
  e.nccl_built = maybe<bool>(nccl, "built").value_or(false);
  e.nccl_version = maybe<std::string>(nccl, "version");
  e.cuda_runtime = maybe<std::string>(cuda, "runtime");
  e.cuda_driver = maybe<std::string>(cuda, "driver");
  e.cuda_note = maybe<std::string>(cuda, "note");
  if (member(cuda, "gpus").is_array())
    for (const auto& g : cuda["gpus"])
      e.gpus.push_back({maybe<std::string>(g, "name").value_or(""), maybe<int64_t>(g, "total_bytes").value_or(0),
                        maybe<std::string>(g, "compute_capability").value_or("")});
  host_of(j, e);
  return e;
}

std::string Environment::text() const {
  using namespace environment_doc;
  std::ostringstream o;
  o << "zrepro environment\n";
  row(o, "zrepro", shown(zrepro_version) + " (commit " + shown(zrepro_commit) + ")");
  libtorch_rows(o, *this);
  machine_rows(o, *this);
  return o.str();
}

std::vector<std::pair<std::string, std::optional<std::string>>> Environment::versions() const {
  return {{"libtorch.version", libtorch_version}, {"nccl.version", nccl_version}, {"cuda.runtime", cuda_runtime},
          {"mpi", mpi},                           {"cpu.model", cpu_model},       {"zrepro.commit", zrepro_commit}};
}

}  // namespace zrepro
