// Chrome / Perfetto trace of a run (OUT/trace.json, open in ui.perfetto.dev or
// chrome://tracing): per rank a "compute" lane (data, forward, backward, step of every
// micro-step), a "comm" lane (every collective from the flight recorder, start to
// completion), a "copy" lane (offload's device<->host copies) and a device-memory counter. Timestamps are wall-clock microseconds so
// the ranks line up.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "offload/copy_engine.h"
#include "zero/comm/flight_recorder.h"

namespace zrepro {

// [Note: one trace event type] trace.json follows Chrome's trace event format (what
// Perfetto and chrome://tracing open): {"traceEvents": [...]}, each event a span ("X",
// with a duration), a counter ("C") or a lane's name ("M"). Every event is written
// through TraceEvent::to_json and read back (report.html's swimlanes, run_lanes.h)
// through from_json. Its args are the format's free-form details; arg_text reads one.
struct TraceEvent {
  std::string name, cat;   // cat: compute | comm | copy, "" for counters and names
  std::string ph = "X";    // X span, C counter, M metadata (process_name, thread_name)
  double ts_us = 0, dur_us = 0;  // microseconds since the epoch; dur for spans only
  int pid = 0;                   // the rank
  std::optional<int> tid;        // the lane; counters have none
  nlohmann::json args;           // null: none
  nlohmann::json to_json() const;
  static TraceEvent from_json(const nlohmann::json& j);  // nlohmann::json::exception on a wrong shape
  // args[key] as text (a string as itself, a number as written), "" when absent.
  std::string arg_text(const char* key) const;
};

// The events of a trace.json (its traceEvents, or a bare list of events).
std::vector<TraceEvent> trace_events_of(const nlohmann::json& trace);

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
