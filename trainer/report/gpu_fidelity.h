// What zrepro's memory plan is worth on a real GPU, read from the GPU records
// (conformance/results/gpu/*.json, written by scripts/gpu-check.sh; docs/lab/GPU.md): over the
// recorded cases, the range of the plan's error against real DeepSpeed with Hugging Face's
// models, for the whole run's peak and per phase. Where the record has a replan beside it
// (NAME.replan.json: today's planner on the record's cases, against the same measured
// DeepSpeed figures; conformance/gpu/fidelity.py replan, kept current by
// tests/conformance/gpu_record_process_test.cpp) the ranges are the replan's, else the
// plan the record was made with. `zrepro plan` prints it under every plan, so a verdict
// says what it rests on; nothing here is a number of its own.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "trainer/planner/planner.h"

namespace zrepro {

struct GpuFidelity {
  std::string record;    // the file it was read from
  std::string machine;   // "NVIDIA H200, torch 2.11.0+cu130"
  std::string recorded;  // its date
  std::string deepspeed; // the DeepSpeed release measured
  std::string replan;    // the replan the ranges come from ("" : the record's own plan)
  std::string replanned; // its date
  int cases = 0;
  std::pair<double, double> peak{0, 0};                          // (plan - DeepSpeed) / DeepSpeed, min and max
  std::map<std::string, std::pair<double, double>> by_phase;     // init, forward, backward, step
  // The caching allocator's reserved peak over the run, the plan's emulated replay against
  // DeepSpeed's torch.cuda.max_memory_reserved (from the replan; none without one).
  std::optional<std::pair<double, double>> reserved_peak;
  nlohmann::json to_json() const;
};

// The newest record in dir (ZREPRO_GPU_RECORDS overrides dir); none when there is none or
// it cannot be read.
std::optional<GpuFidelity> load_gpu_fidelity(const std::string& dir);

// Lines for the plan's text output.
std::string format_gpu_fidelity(const GpuFidelity& f);

// [Note: a verdict inside the band] Where real DeepSpeed's peak may lie, given a plan's
// peak for a GPU and the band its errors fell in (real = plan / (1 + error)), and whether
// the capacity is inside that range: then neither "fits" nor "OOM" is a verdict to trust,
// and run, ab and plan say so instead of calling the plan's side.
// On a GPU the capacity binds on reserved bytes ([Note: the capacity binds where PyTorch's
// OOM does]), and the record has a band for the reserved peak with room to spare too: real
// DeepSpeed's lies in the plan's unbounded replay / (1 + error). Past the capacity that
// means cache flushes, not an OOM: PyTorch releases its cached free segments and retries,
// and only what fragments inside live segments can still fail, which the record does not
// measure. So the reserved range decides the call only where the plan itself is at the
// allocator's edge (its replay under the capacity flushes its cache or runs out): a
// capacity below that range's high end is then not called either. Elsewhere a fitting plan
// is called, and the text says that real DeepSpeed may flush its cache.
struct BandCall {
  double planned = 0, capacity = 0;
  double deepspeed_low = 0, deepspeed_high = 0;  // allocated peak, bytes
  // The reserved peak with room to spare (the plan's unbounded replay), and real
  // DeepSpeed's range for it; 0 where the verdict binds on allocated bytes or the record
  // has no reserved band.
  double planned_reserved = 0, reserved_low = 0, reserved_high = 0;
  bool allocator_edge = false;  // the plan's replay under the capacity flushes its cache or runs out
  bool inside = false;
  nlohmann::json to_json() const;
  static BandCall from_json(const nlohmann::json& j);
  std::string text() const;  // "real DeepSpeed's peak, by the planner's measured band: 95% .. 99% of capacity: ..."
};
// What a plan gives the call: its allocated peak and the capacity; where its verdict binds on
// reserved bytes, its unbounded reserved peak and whether its replay under the capacity
// flushed or ran out (else 0 and false).
struct BandInputs {
  double planned_peak = 0, capacity = 0, planned_reserved = 0;
  bool allocator_edge = false;
};
BandCall band_call(const GpuFidelity& f, const BandInputs& in);
BandInputs band_inputs(const MemoryPlan& plan);
// load_gpu_fidelity(ZREPRO_GPU_RECORDS_DIR, or $ZREPRO_GPU_RECORDS), read once per process.
const std::optional<GpuFidelity>& gpu_band();

}  // namespace zrepro
