// summary.json as one C++ type. [Note: one summary type] `zrepro run` builds a Summary
// (build_summary, report.h) and writes its to_json; every reader (check's baseline, ab, verify, report.html, the
// merge of the ranks' views) takes it through read_summary (report.h) into a Summary and
// reads fields, not string keys: a field renamed or removed is a compile error in the
// reader, not a silent null. to_json gives back the same JSON, field for field
// (SummaryType.RoundTripsEveryRunsSummary over ok, offload, OOM, refused, diverged,
// virtual, scaled-down, hung and 2-process OOM runs), so the type is the schema:
// docs/reference/summary-json.md is generated from its field table (summary_doc.h) and
// SummaryReference checks the page against real runs. Parts whose shape belongs to
// another module stay JSON here (model: ModelSpec::to_json; memory.planned:
// MemoryPlan::to_json; env: zrepro env; effective_config: DsConfig::effective_json;
// offload: report.cpp; scale_down: ScaleDown::to_json; virtual_ranks: run.cpp; a failure's details:
// its kind's builder) until their readers need them typed.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "device/base/json_optional.h"

namespace zrepro {

// [Note: summary schema] Every summary.json says which schema it follows ("schema":
// kSummarySchema; docs/reference/summary-json.md). Readers take a summary through
// read_summary (report.h), which refuses one of another schema, or one without (written by a zrepro
// before the field), with ConfigError naming the file, what it has and what this zrepro
// reads: a comparison is never made across schemas by accident. The number changes when a
// field is removed or changes meaning; added fields keep it.
constexpr const char* kSummarySchema = "zrepro.summary/1";


// Bytes by memory category: params, grads, optimizer_states, activations, comm_buffers, other.
using SummaryCategories = std::map<std::string, int64_t>;
SummaryCategories categories_of(const nlohmann::json& j);  // {} for anything but an object
nlohmann::json categories_json(const SummaryCategories& c);

struct SummaryStep {
  int64_t step = 0;
  std::optional<double> loss, grad_norm;  // null when not finite (a skipped step's norm)
  double loss_scale = 1;
  bool skipped = false;
  double lr = 0;
  std::optional<double> step_s;            // the step's wall time; absent in summaries before 2026-12-05
  std::optional<bool> replicas_identical;  // only when checked (--verify-replicas)
};

struct SummaryPhasePeak {
  std::string phase;
  int64_t peak_bytes = 0, peak_reserved_bytes = 0;
};

struct SummaryRankMemory {
  int rank = 0;
  int64_t peak_bytes = 0;
  std::string peak_phase;
  int64_t peak_reserved_bytes = 0;
  SummaryCategories by_category;     // at the rank's peak
  SummaryCategories category_peaks;  // each category's own peak
  SummaryCategories model_states;    // the engine's persistent states: params, grads, optimizer_states
  std::vector<SummaryPhasePeak> phases;
  int64_t host_pinned_bytes = 0, host_pageable_bytes = 0;
  double comm_wait_s = 0;
  // PyTorch's num_alloc_retries over the run: allocations that flushed the caching
  // allocator's cache and tried again ([Note: allocator retries], device/caching_pool.cpp).
  int64_t alloc_retries = 0;
  // Bytes per step each category grows by after warm-up (the least-squares slope of its
  // bytes at step ends; a leak shows as a positive slope); empty with too few steps.
  std::map<std::string, double> growth_bytes_per_step;
};

// One point of memory.timeline ([Note: phase windows] in device/device_memory.h).
struct SummaryTimelinePoint {
  int64_t step = 0;
  std::string phase;
  int64_t peak_bytes = 0;
  SummaryCategories by_category;
  bool unfinished = false;  // the failing step's
};

struct SummaryPlanned;  // below, with the other views

struct SummaryMemory {
  std::optional<int64_t> device_capacity_bytes;  // null: no capacity
  std::vector<SummaryRankMemory> ranks;
  std::vector<SummaryTimelinePoint> timeline;  // rank 0's peak per step and phase
  nlohmann::json planned;  // zrepro plan's figures for this run; null when not planned (absent in the file)
  std::optional<SummaryPlanned> plan() const;  // planned, through its view
};

// One rank's own view of a multi-process failure (failure.ranks[]; [Note: every rank's
// view], rank_views.h). The fields a view's failure did not carry are null.
struct SummaryRankView {
  int rank = 0;
  std::string status;
  std::optional<std::string> kind, phase, message, checkpoint;
  std::optional<int64_t> allocated_bytes, capacity_bytes;  // an OOM's
};

struct SummaryRankViews {
  std::vector<SummaryRankView> ranks;   // failure.ranks
  std::vector<int> reported;            // failure.ranks_reported
  std::vector<int> without_a_view;      // failure.ranks_without_a_view
};

struct SummaryFailure {
  std::string kind, phase, message, checkpoint, hint;
  int rank = 0;
  std::optional<SummaryRankViews> views;  // a merged multi-process failure only
  // The kind's own fields: an OOM's bytes and planned fixes, a hang's diagnosis, an
  // interruption's signal and vanished peers.
  nlohmann::json details = nlohmann::json::object();
  // A failure record (make_failure's six fields, the kind's own, a merged failure's views).
  static SummaryFailure from_json(const nlohmann::json& j);
};

struct SummaryRankTime {
  int rank = 0;
  double comm_wait_s = 0, step_s = 0;  // medians over the run's steps
};

// [Note: step time against the machine] (trainer/loop/calibration.h).
struct SummaryCalibration {
  std::string kernel;
  int64_t samples = 0, steps = 0;
  double median_s = 0, spread = 0;            // the kernel's median and relative spread
  double step_s_median = 0, step_spread = 0;  // the steps after warm-up
  double step_over_calibration = 0;
  // StepCalibration::to_json's object; nullopt for null.
  static std::optional<SummaryCalibration> from_json(const nlohmann::json& j);
};

// The rank the others waited for ([Note: who is the straggler], report.cpp): their mean
// collective wait and its own.
struct SummaryStraggler {
  int rank = 0;
  double others_wait_s = 0, own_wait_s = 0;
};

struct SummaryTime {
  std::optional<double> step_s_median, tokens_per_s;  // null without a step
  std::map<std::string, double> breakdown_s;          // forward, backward, comm_wait, optimizer, offload_copy, data_wait
  std::vector<SummaryRankTime> ranks;
  std::optional<SummaryStraggler> straggler;  // null: no rank cost the others a quarter of a step
  std::optional<SummaryCalibration> calibration = std::nullopt;  // null without a step past warm-up
};

// One collective of comm.ops (report.cpp comm_of): rank 0's figures per step.
struct SummaryCommOp {
  double calls_per_step = 0, bytes_per_step = 0, seconds_per_step = 0;
  std::optional<double> algbw_GBps, busbw_GBps;  // null without time in it
};

struct SummaryComm {
  std::map<std::string, std::optional<double>> bytes_per_step;  // by collective; null without a step
  nlohmann::json ops;  // per collective: calls, bytes and seconds per step, algbw_GBps, busbw_GBps
  std::optional<double> modelled_busbw_GBps;  // --interconnect-gbps
  // {count, first}: same-sized collectives the ranks issued for different parameters
  // (zero/comm/communicator.h); null where the run had no communicator to ask.
  nlohmann::json paired_different_parameters;
  std::map<std::string, SummaryCommOp> op_figures() const;  // ops, through its view
};

// [Note: typed views of module-owned parts] Summary keeps the parts another module writes
// as that module's JSON (so to_json gives the file back field for field); a reader takes the
// figures it needs through a view's from_json below, never by string keys at its use
// site. A view reads only what readers use; a part of a wrong shape throws
// nlohmann::json::exception there.
//
// A plan's verdict and peak: memory.planned and scale_down.target_planned (MemoryPlan::to_json,
// ScaleDown::to_json), and `zrepro plan --json` itself.
struct SummaryPlanned {
  std::string verdict;  // fits | oom | pinned-memory
  std::optional<std::string> oom_phase;
  int64_t peak_bytes = 0;
  std::string peak_phase;
  std::optional<int64_t> device_capacity_bytes;  // a whole plan's; absent in scale_down.target_planned
  std::optional<SummaryCategories> by_category;  // likewise
  static SummaryPlanned from_json(const nlohmann::json& j);
};

// scale_down (ScaleDown::to_json, trainer/planner/scale_down.h).
struct SummaryScaleDown {
  std::string target_name;
  int64_t target_params = 0, toy_params = 0;
  double parameter_factor = 1;
  SummaryPlanned target_planned;
  struct Row {
    std::string category;
    double target_share = 0, toy_share = 0;
  };
  std::vector<Row> fidelity;
  nlohmann::json target_band;  // BandCall::to_json (gpu_fidelity.h) or null
  // limits[] (TargetLimit::to_json): each limit given, at target scale; absent in older summaries.
  struct Limit {
    std::string flag;
    int64_t target_limit = 0, target_need = 0;
    bool fits_at_target = true;
  };
  std::vector<Limit> limits;
  static SummaryScaleDown from_json(const nlohmann::json& j);
};

// offload (report.cpp offload_json): the host link and each rank's copies.
struct SummaryOffloadRank {
  int rank = 0;
  int64_t d2h_bytes = 0, h2d_bytes = 0, host_pinned_bytes = 0, host_pageable_bytes = 0;
  double copy_s = 0, exposed_s = 0;
  std::optional<double> overlap_ratio, device_busy_fraction;  // null without copies / steps
};
struct SummaryOffload {
  std::optional<double> host_link_gbps;  // null: not modelled
  std::vector<SummaryOffloadRank> ranks;
  static SummaryOffload from_json(const nlohmann::json& j);
};

// checkpoint (report.cpp checkpoint_json): what --save-every saved, what --resume resumed
// from, --zero-to-fp32's consolidation.
struct SummaryCheckpoint {
  std::string format;
  struct Saved {
    int64_t step = 0;
    std::string folder;
    double seconds = 0;
    int64_t consolidated_16bit_host_bytes = 0;
  };
  std::vector<Saved> saved;
  struct Resumed {
    std::string folder, tag;
    int64_t step = 0;
    bool universal = false;
  };
  std::optional<Resumed> resumed;
  struct ZeroToFp32 {
    std::string mode, tag;
    size_t files = 0;
    int64_t peak_anon_host_bytes = 0, mapped_bytes = 0;
  };
  std::optional<ZeroToFp32> zero_to_fp32;
  static SummaryCheckpoint from_json(const nlohmann::json& j);
};

// effective_config.entries[] (DsConfig::effective_json): a key, its value, where it came from.
struct SummaryConfigEntry {
  std::string key;
  nlohmann::json value;
  std::string source;
  std::optional<std::string> note;
};

// The model's sizes (ModelSpec::to_json) and --world-size's virtual ranks (run.cpp), as the
// report's header shows them.
struct SummaryModelSizes {
  std::string name, family;
  int64_t params = 0, layers = 0, hidden = 0, seq = 0;
};
struct SummaryVirtualRanks {
  int64_t world_size = 0, as_rank = 0;
  std::string data_rule, note;
};

// The data (report.cpp data_json): the lowest loss the synthetic data allows, the samples'
// lengths (--seq-len-dist) and the loss normalisation's kind.
struct SummaryData {
  double entropy_floor_nats = 0;
  std::string seq_len_dist = "fixed", loss_normalization = "mean";
};

// What the run was asked (`inputs`, app/run_spec.h run_inputs): its arguments, the config
// file's path and its JSON as written (null when unknown).
struct SummaryInputs {
  std::vector<std::string> args;
  nlohmann::json config_file, config;
  static SummaryInputs from_json(const nlohmann::json& j);
};

struct SummaryBatch {
  int64_t micro = 0, grad_accum = 0, global = 0;
};

struct Summary {
  std::string schema;  // kSummarySchema (report.h)
  std::string status;  // ok | oom | hang | diverged | config_error | pinned_memory | io_error | interrupted | error
  // Null until the config resolved (a config error).
  std::optional<int64_t> world_size, zero_stage;
  std::optional<std::string> precision, deepspeed_version, device;
  std::optional<SummaryBatch> batch;
  nlohmann::json model, env, data, effective_config;  // null until known
  // What the run was asked: `args` (its arguments, --out left out, --ranks N added for
  // several processes), `config_file` and `config` (the file's JSON as written); null in a
  // summary written before they were kept.
  nlohmann::json inputs;
  std::vector<SummaryStep> steps;
  std::optional<int64_t> skipped_steps;  // absent when no training started
  std::optional<SummaryTime> time;       // null when no training started
  std::optional<SummaryMemory> memory;   // null when no training started
  std::optional<SummaryComm> comm;       // null when no training started
  nlohmann::json offload;                // null without offload
  std::optional<SummaryFailure> failure;
  // Present only when they apply.
  nlohmann::json virtual_ranks, config_mismatch, scale_down;
  nlohmann::json checkpoint;  // --save-every / --resume (report.cpp summary_json)

  static Summary from_json(const nlohmann::json& j);  // throws nlohmann::json::exception on a wrong shape
  nlohmann::json to_json() const;

  // The views of module-owned parts ([Note: typed views of module-owned parts]); nullopt
  // where the summary has none.
  std::optional<SummaryPlanned> planned() const;  // memory.planned
  std::optional<SummaryScaleDown> scaled() const;
  std::optional<SummaryOffload> offloaded() const;
  std::optional<SummaryCheckpoint> checkpoints() const;
  std::vector<SummaryConfigEntry> config_entries() const;  // empty before the config resolved
  std::optional<SummaryModelSizes> model_sizes() const;
  // The DeepSpeed config as the run resolved it (DsConfig::effective_json's `resolved`): a
  // config, JSON by nature; an empty object before the config resolved.
  nlohmann::json resolved_config() const;
  std::optional<SummaryVirtualRanks> virtual_figures() const;
  std::optional<SummaryData> data_figures() const;
  std::optional<SummaryInputs> run_inputs() const;  // none in a summary written before inputs were kept

  const SummaryRankMemory* rank_memory(int rank) const;  // nullptr when not reported
  int64_t peak_bytes() const;                            // the highest rank's peak (0: none)
};

// The steps of a summary's JSON, read leniently (an object without steps, or a plan's
// JSON, has none): for readers that compare runs which may not all have trained.
std::vector<SummaryStep> steps_of(const nlohmann::json& summary);
// The largest relative difference of a per-step figure ("loss" or "grad_norm") over the
// steps both runs have where both are finite; NaN when there is none.
double max_step_rel_diff(const std::vector<SummaryStep>& a, const std::vector<SummaryStep>& b,
                         const std::string& figure);

}  // namespace zrepro
