// ab.json as one C++ type: AbDocument and its parts. [Note: one ab type] compare_ab
// (ab.h) builds an AbDocument; ab.json is written only by AbDocument::to_json and read
// only through AbDocument::from_json (ab.html, scenario's grep check, tests): a field
// renamed or removed is a compile error in its readers, not a silent null. Every field is
// always written (null where the run did not say), so the shape does not depend on how a
// side ended. docs/reference/ab-json.md is generated from ab_field_docs() and checked
// against ab_example() (tests/trainer/report/ab_doc_test.cpp).
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "device/base/field_doc.h"
#include "trainer/report/gpu_fidelity.h"
#include "trainer/report/hang.h"
#include "trainer/report/summary.h"

namespace zrepro {

// [Note: ab schema] Every ab.json says which schema it follows; from_json refuses another
// (ConfigError naming what it has and what this zrepro reads). The number changes when a
// field is removed or changes meaning.
constexpr const char* kAbSchema = "zrepro.ab/1";

// One rank's peak as ab.html draws it.
struct AbRankMemory {
  int rank = 0;
  int64_t peak_bytes = 0;
  std::string peak_phase;
  SummaryCategories by_category;
  int64_t host_pinned_bytes = 0;
};

// A failing side's failure, as its summary wrote it, with the figures its kind is judged by.
struct AbFailure {
  std::string kind, message, hint;
  int rank = 0;
  std::optional<int64_t> needed_bytes, memlock_limit_bytes, locked_bytes;  // a pinned-memory failure's
  std::optional<HangDiagnosis> hang;                                      // a hang's
};

// The toy category whose share of capacity is furthest from the target's ([Note: a verdict
// at target scale says what it rests on], ab.cpp).
struct AbFidelityWorst {
  std::string category;
  std::optional<double> toy_share, target_share;
  double off_points = 0;
};

// One side at one rank count. A plan row (--plan-only) has the status, phase and memory
// figures; a side that left no summary has the first five fields.
struct AbRow {
  std::string side;  // "A" or "B"
  int ranks = 1, exit_code = 0;
  std::string log;     // where the run's output went
  std::string status;  // the summary's status, "no summary", or "oom (planned)" / "fits (planned)"
  std::optional<std::string> phase, checkpoint;  // the failure's
  std::optional<int> failed_ranks;
  std::optional<int64_t> steps;
  std::optional<double> final_loss;
  // Time: medians, shares of the accounted time, rank 0's offload overlap.
  std::optional<double> step_s_median, tokens_per_s, comm_wait_share, offload_copy_share, data_wait_share,
      comm_wait_s_max, device_busy_fraction, overlap_ratio, offload_wait_s_per_step;
  std::optional<int> straggler_rank;
  // Memory: the highest rank's peak, the spread to the lowest, the capacity.
  std::optional<double> capacity_bytes, peak_bytes_max, peak_bytes_spread, peak_share_of_capacity,
      alloc_retries_per_step;
  std::optional<SummaryCategories> by_category;  // the highest rank's, at its peak
  // At target scale (a scaled-down side).
  std::optional<double> target_peak_bytes_max, target_capacity_bytes, target_planned_peak_bytes;
  std::optional<std::string> target_planned_verdict, target_model;
  // The limits given, at target scale ([Note: a limit the user gives is the target's]):
  // "--host-memory: 14.96 GiB needed of 11.18 GiB at target scale (past it)", "; " between.
  std::optional<std::string> target_limits;
  std::optional<BandCall> target_band;  // [Note: a verdict inside the band]
  std::optional<AbFidelityWorst> fidelity_worst;
  std::optional<bool> fidelity_ok;
  // What ab.html draws besides.
  std::vector<AbRankMemory> rank_memory;
  std::vector<SummaryRankTime> rank_time;
  std::optional<std::string> device;
  std::optional<double> planned_peak_bytes, parameter_factor, host_link_gbps, interconnect_busbw_gbps;
  std::optional<AbFailure> failure;

  std::string label() const;  // "A x2"
  // A figure `--expect less:KEY:R` / `more:KEY:R` may name (ab_metric_keys, ab.h); nullopt
  // when the row has none.
  std::optional<double> figure(const std::string& key) const;

  nlohmann::json to_json() const;
  static AbRow from_json(const nlohmann::json& j);
};

// One rank count's verdict.
struct AbComparison {
  int ranks = 1;
  bool a_shows_symptom = false, b_fails = false, target_inside_band = false;
  std::optional<double> max_loss_rel_diff, max_grad_norm_rel_diff;
  std::string verdict;
};

// A side's larger rank count against its first ([Note: equivalence between rank counts]).
struct AbStateCheck {
  double measured = 0, expected = 0;
  bool holds = false;
};
struct AbEquivalence {
  std::string side;
  int base_ranks = 1, ranks = 1;
  std::optional<bool> holds;  // null: not compared (a run failed)
  std::optional<double> max_loss_rel_diff;  // null: different global batches, or not compared
  std::map<std::string, AbStateCheck> model_states;  // params, grads, optimizer_states; empty: not compared
  std::string line;
};

// Per run ("A x2"), its per-step figure; null where not finite.
using AbCurves = std::map<std::string, std::vector<std::optional<double>>>;

struct AbDocument {
  std::string schema = kAbSchema;
  bool plan_only = false;
  std::string expect = "failure";  // --expect as given
  std::string outcome;  // fixed | not fixed | nothing to fix | incomplete | interrupted (+ " on the toy; ...")
  int exit_code = 0;
  std::optional<std::string> message;  // an interrupted comparison's
  std::vector<AbRow> rows;             // A and B per rank count
  std::vector<AbComparison> comparisons;
  std::vector<AbEquivalence> equivalence;
  AbCurves loss_curves, grad_norm_curves;

  nlohmann::json to_json() const;
  // Throws ConfigError on another schema, nlohmann::json::exception on a wrong shape.
  static AbDocument from_json(const nlohmann::json& j);
};

// docs/reference/ab-json.md: one row per field path, rendered with the schema.
const std::vector<FieldDoc>& ab_field_docs();
AbDocument ab_example();  // every field set, one element per list
std::string ab_reference_page();

}  // namespace zrepro
