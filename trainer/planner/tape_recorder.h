// Recording the planner's activation tapes (gpt_memory.h) from the LibTorch this build
// links, on this CPU: one micro-step of a small surrogate model (two blocks, stage 0, one
// rank) under the tracking allocator's log, cut at the engine's marks (acquire /
// after_forward / use / recomputed) and written in the planner's symbols. Recording two
// surrogates of different dimensions and getting the same symbols shows that every size
// is the symbol's, not a coincidence of the surrogate.
//
// [Note: tapes of this LibTorch] Kernels save and free differently across LibTorch
// releases (2.x's LayerNorm backward frees one temporary fewer than 1.13's) and across
// CPUs (where the bf16 GEMM goes through oneDNN, AVX512-BF16 or AMX, it allocates
// reorder buffers around each matmul, of sizes its own heuristics choose per shape). So
// the tapes are not checked in as the planner's truth: the build records them from its
// own LibTorch (zrepro_record_tapes, a build step that reruns whenever the model, engine
// or allocator code is relinked) into <build>/generated/gpt_tapes.json, which the planner
// reads. They are recorded with oneDNN off (OneDnnOff), so that a GEMM allocates only its
// output, as a GPU's does: the tapes are the same on every CPU. oneDNN's scratch is an
// artefact of emulating the device on a CPU, not of the job: zrepro measures it
// (bf16_gemm_scratch_bytes), says so wherever a bf16 plan of the CPU-emulated device is
// compared with a run, and does not plan it. tests/data/tapes/ keeps the recordings of
// known LibTorch releases as test references.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainer/config/model_spec.h"

namespace zrepro {

struct TapeTable {
  std::string libtorch;                 // "2.15.0": the release the tapes were recorded with
  int64_t bf16_gemm_scratch_bytes = 0;  // what one bf16 matmul allocated beyond its output
  std::map<std::string, std::string> tapes;  // gpt_tape_key -> tape
  std::vector<std::string> problems;         // sizes that were no symbol, surrogates that disagreed, ...
  std::string source;                        // where the table was read from (a file), or "recorded"
};

// Records every tape (family x attention x tied x fp32|bf16 x B1|BN x part) on this build.
// Uses the process's DeviceMemory: call it in a process of its own (the build step, a test).
TapeTable record_gpt_tapes();

// Bytes a bf16 matmul of [800 x 256] x [256 x 1024] allocates beyond its output here
// (0 where LibTorch's bf16 GEMM does not go through oneDNN, or oneDNN is off).
int64_t bf16_matmul_scratch_bytes();

// oneDNN off for LibTorch's CPU kernels in this scope (restored after): a bf16 GEMM then
// allocates only its output, about 190x slower on an AMX CPU (measured: 283 ms vs 1.5 ms
// for [800 x 256] x [256 x 1024]), so only for small models (the recorder, tests).
class OneDnnOff {
 public:
  OneDnnOff();
  ~OneDnnOff();
  OneDnnOff(const OneDnnOff&) = delete;
  OneDnnOff& operator=(const OneDnnOff&) = delete;

 private:
  bool was_;
};

nlohmann::json tapes_to_json(const TapeTable& t);
// Throws std::runtime_error naming `source` when the document is not a tape table.
TapeTable tapes_from_json(const nlohmann::json& j, const std::string& source);

// The two surrogate models a family's tapes are recorded on (which: 0 or 1; two blocks).
ModelSpec tape_surrogate(Family f, Attention a, bool tied, int which);

// The LibTorch release this build links ("2.15.0").
std::string linked_libtorch_version();

}  // namespace zrepro
