// Hang diagnosis: when the watchdog fires (or a collective fails), every rank
// dumps its flight recorder to OUT/flight/rank<r>.json; rank 0 merges the dumps,
// finds the first sequence id where ranks disagree (a rank that never issued it,
// or a different op / size / dtype) and names the culprit, writes
// OUT/hang_report.json and summary.json (status "hang"), and every rank exits 4.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "zero/comm/flight_recorder.h"

namespace zrepro {

nlohmann::json flight_json(const std::vector<FlightEntry>& entries);
std::vector<FlightEntry> flight_from_json(const nlohmann::json& j);

// One rank's OUT/flight/rank<r>.json: its flight recorder when the watchdog fired, and why.
// Written by the hanging rank, read by rank 0's diagnosis and report.html's swimlanes.
struct FlightDump {
  int rank = 0;
  std::string reason;
  std::vector<FlightEntry> entries;
  nlohmann::json to_json() const;
  static FlightDump from_json(const nlohmann::json& j);  // nlohmann::json::exception on a wrong shape
};
// "all_gather(BFloat16, in 4096, out 8192) [unshard embed.wte, step 1 micro-step 1, started]"
std::string describe_flight_entry(const FlightEntry& e);

struct HangDiagnosis {
  int64_t seq = -1;                // first sequence id where ranks disagree (-1: none found)
  std::vector<int> culprits;       // the suspects' ranks, most likely first
  struct Suspect {
    int rank;
    std::string evidence;
  };
  // [Note: hang suspects] Most likely first: a rank with no flight dump (it never
  // answered: frozen, killed, or blocked outside a collective); when every rank waits in
  // the same collective, the rank whose last collective activity is oldest (it stopped
  // first); then the ranks the sequence comparison names (missing, mismatched, stuck).
  // The rank that reported is never blamed for reporting.
  std::vector<Suspect> suspects;
  // Where each rank stands, for the per-rank collective table (report.html): its last
  // completed collective and the first one it has not completed (where it waits).
  struct RankView {
    int rank = 0;
    bool dumped = false;                 // its flight dump arrived
    int64_t last_completed_seq = -1;     // -1: none in the recorder's window
    std::string last_completed;          // op(dtype, in, out) [label, step, micro-step, state]
    int64_t waiting_seq = -1;            // -1: every recorded collective completed
    std::string waiting_in;
    double idle_s = 0;                   // how long before the newest activity of any rank it last acted
  };
  std::vector<RankView> ranks;
  std::string kind;                // "missing" | "mismatch" | "stuck" | "unknown"
  std::string text;                // one paragraph for humans
  nlohmann::json to_json() const;
  // The way back (report.html and ab read a summary's failure.hang through it); throws
  // nlohmann::json::exception on a wrong shape.
  static HangDiagnosis from_json(const nlohmann::json& j);
};

// OUT/hang_report.json, rank 0's when the watchdog fired: why, after how long, the
// diagnosis, and the keys where the ranks' effective configs differ (the likely cause).
struct HangReport {
  std::string reason;
  double timeout_s = 0;
  HangDiagnosis diagnosis;
  std::vector<std::string> config_mismatch;  // absent in the file when the ranks agree
  nlohmann::json to_json() const;
  static HangReport from_json(const nlohmann::json& j);  // nlohmann::json::exception on a wrong shape
};

// A failure's hang diagnosis (summary.json failure.hang: a failure record's own fields, the
// kind's details), nullopt when it has none.
std::optional<HangDiagnosis> hang_in(const nlohmann::json& failure_details);

// per_rank[r]: rank r's flight entries (empty when its dump is missing). gas:
// micro-steps per step, to recognise a collective issued from an extra micro-step.
HangDiagnosis diagnose_hang(const std::vector<std::vector<FlightEntry>>& per_rank, int64_t gas);

}  // namespace zrepro
