// docs/reference/env-json.md from the Environment type (environment.h): its field table,
// an example with every field set (what the table must cover) and the page's text.
#include "trainer/report/environment.h"

namespace zrepro {

const std::vector<FieldDoc>& environment_field_docs() {
  static const std::vector<FieldDoc> docs = {
      {{"zrepro.version", "zrepro.commit"}, "this zrepro's version and the commit it was built from"},
      {{"libtorch.version", "libtorch.kind", "libtorch.prefix", "libtorch.source"},
       "the LibTorch it runs on: version, kind (cpu or cuda), where it is and how it was chosen"},
      {{"libtorch.cuda", "libtorch.gpu_visible", "libtorch.intra_op_threads"},
       "whether that LibTorch has CUDA, whether a GPU is visible, and the intra-op threads per rank"},
      {{"libtorch.activation_tapes.libtorch", "libtorch.activation_tapes.file", "libtorch.activation_tapes.bf16_gemm_scratch_bytes",
        "libtorch.activation_tapes.problems"},
       "the planner's recorded activation tapes: the LibTorch they were recorded on, the file, bf16 GEMM scratch bytes "
       "and problems found; a string instead (why they cannot be read) when there are none"},
      {{"blas"}, "the BLAS LibTorch calls"},
      {{"blas_kernels.core", "blas_kernels.openblas_detected", "blas_kernels.set_by"},
       "OpenBLAS's kernel core in use, the one it detected, and who chose it (zrepro, OPENBLAS_CORETYPE, or null: "
       "OpenBLAS itself); null without OpenBLAS"},
      {{"mpi"}, "the MPI library"},
      {{"nccl.built", "nccl.version"}, "whether NCCL is built in, and its version"},
      {{"cuda.runtime", "cuda.driver", "cuda.note"}, "the CUDA runtime and driver, and why they are unknown"},
      {{"cuda.gpus[].name", "cuda.gpus[].total_bytes", "cuda.gpus[].compute_capability"}, "every visible GPU"},
      {{"host.memory_total_bytes", "host.memory_available_bytes"}, "the host's memory and what is available (-1: "
                                                                   "unknown)"},
      {{"host.memlock_limit_bytes", "host.cap_ipc_lock"}, "the memlock limit (`unlimited`) and whether the process "
                                                          "holds CAP_IPC_LOCK: what pinned memory may take"},
      {{"cpu.model", "cpu.cores", "cpu.flags"}, "the CPU, its cores and its flags (AVX-512, AMX, ...)"},
  };
  return docs;
}

Environment environment_example() {
  Environment e;
  e.zrepro_version = e.zrepro_commit = e.libtorch_version = e.libtorch_kind = e.libtorch_prefix = e.libtorch_source =
      e.blas = e.mpi = e.nccl_version = e.cuda_runtime = e.cuda_driver = e.cuda_note = e.cpu_model = "x";
  e.libtorch_cuda = e.gpu_visible = e.nccl_built = e.cap_ipc_lock = true;
  e.intra_op_threads = 1;
  e.tapes = EnvTapes{"2.15.0", "tapes.json", 1, 0};
  e.blas_kernels = EnvBlasKernels{"Haswell", "SkylakeX", std::string("zrepro")};
  e.gpus = {EnvGpu{"H100", 1, "9.0"}};
  e.memory_total_bytes = e.memory_available_bytes = 1;
  e.memlock_limit_bytes = 1;
  e.cpu_cores = 2;
  e.cpu_flags = {"avx2"};
  return e;
}

std::string environment_reference_page() {
  return std::string("# zrepro env --json\n\n") +
         "What `zrepro env --json` prints, and what a run's summary.json (`env`) and check's baseline keep of the "
         "machine: versions a moved figure is blamed on, and what the host allows. One C++ type, Environment "
         "(trainer/report/environment.h), writes and reads it (leniently: an older file's missing fields are "
         "unknown). This page is generated from the type's field table (trainer/report/environment_doc.cpp); "
         "tests/trainer/report/environment_test.cpp fails when a field of the type has no row or the page is not "
         "this text (`ZREPRO_WRITE_ENV_DOC=1 build/zrepro_unit_tests --gtest_filter=EnvDoc.*` rewrites it).\n\n" +
         field_table_markdown(environment_field_docs());
}

}  // namespace zrepro
