// Chrome / Perfetto trace of a run (OUT/trace.json, open in ui.perfetto.dev or
// chrome://tracing): per rank a "compute" lane (data, forward, backward, step of every
// micro-step), a "comm" lane (every collective from the flight recorder, start to
// completion), a "copy" lane (offload's device<->host copies) and a device-memory counter. Timestamps are wall-clock microseconds so
// the ranks line up.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "offload/copy_engine.h"
#include "zero/comm/flight_recorder.h"

namespace zrepro {

class TraceRecorder {
 public:
  explicit TraceRecorder(int rank) : rank_(rank) {}
  // A span on the compute lane, from t0 to t1 (seconds since the epoch).
  void span(const std::string& name, double t0, double t1, nlohmann::json args = nullptr);
  void memory(double t, int64_t allocated, int64_t reserved);
  // Adds the collectives of the flight recorder on the comm lane.
  void add_collectives(const std::vector<FlightEntry>& entries);
  // Adds offload's copies (copy engine records) on the copy lane.
  void add_copies(const std::vector<CopyRecord>& copies);
  nlohmann::json events() const { return events_; }

 private:
  int rank_;
  nlohmann::json events_ = nlohmann::json::array();
};

// {"traceEvents": [...]} with process names "rank r" and lane names.
nlohmann::json merge_traces(const std::vector<nlohmann::json>& per_rank_events);

}  // namespace zrepro
