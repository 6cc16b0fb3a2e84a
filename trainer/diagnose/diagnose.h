// From a failed job's log to a diagnosis (`zrepro diagnose LOG`): every fingerprint of
// the failures of the scenario catalogue (configs/scenarios/) found in a DeepSpeed / PyTorch / NCCL log (or
// zrepro's own), with the line numbers that show it, the numbers it carries (bytes,
// loss scale, collective sequence number and op, timeout, ranks), and the answer in the
// diagnosis order of the five checkpoints: which checkpoint, which scenario and how sure,
// what else it could be and what would tell them apart, what to try. A log with none of
// them gets "no known fingerprint" and the lines that looked closest, never a guess.
// Pure: text in, a Diagnosis out (trainer/app/diagnose.cpp reads files and prints).
//
// The room: log_text.h (a log's bytes as text), evidence.h (the fingerprint table and the
// scan that finds its lines and numbers), decide.h (the decision, a walk over its rule
// table in the diagnosis order), log_figures.h (the figures a log carries), this file (the answer), flight_recorder.h (NCCL's Flight
// Recorder dumps as rows) and wall_clock.h (DeepSpeed's timer line, written by run).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "device/base/field_doc.h"
#include "trainer/diagnose/log_figures.h"

namespace zrepro {

// [Note: diagnose schema] as [Note: ab schema] (trainer/report/ab_doc.h): `zrepro diagnose
// --json` says which schema it follows; Diagnosis::from_json refuses another.
constexpr const char* kDiagnoseSchema = "zrepro.diagnose/1";

struct Evidence {
  std::string fingerprint;  // oom, overflow, loss_scale_minimum, watchdog_timeout, ...
  int line = 0;             // 1-based
  std::string text;         // the line, trimmed to 300 characters
};

// What `zrepro diagnose` read (trainer/app/diagnose.cpp): a text log's decompressed size,
// its encoding and, above --read-limit, what of it was read; or how many Flight Recorder
// dumps.
struct LogRead {
  std::optional<int64_t> log_bytes;
  std::optional<std::string> log_encoding, log_read;
  std::optional<int64_t> flight_recorder_ranks;
};

// With --config: the planner's answer for the job (`zrepro plan --json`) against what the
// log showed.
struct PlannerCheck {
  std::string planned_verdict;  // the plan's verdict (fits, oom, pinned-memory), or refused
  bool agrees = false;
  std::optional<std::string> refused;  // the planner refused the config: its message (then nothing else)
  std::optional<std::string> planned_phase, log_phase;
  std::optional<int64_t> planned_peak_bytes, capacity_bytes;
};

struct Diagnosis {
  std::string checkpoint;  // the catalogue's: config | zero-stage | offload-target | pinned-memory | numerics | communication | ""
  std::string scenario;    // the configs/scenarios folder it matches; "" when none
  // The cause in one word, finer than the scenario and named also where the catalogue has
  // no scenario yet: activations, model-states-at-init, optimizer-states, buckets,
  // fragmentation, memory-outside-pytorch, pinned-host-oom, zero3-live-params,
  // fp16-startup-search, fp16-collapse, fp16-scale-stuck, fp16-scale-minimum,
  // batch-triple, mismatched-collectives, divergent-zero3-gathers, rank-alone-in-collective,
  // slow-preprocessing, straggler, offload-link, pageable-copies, comm-bound,
  // allocator-cache-flushes; "" when none.
  std::string cause;
  std::string confidence;  // strong | likely | none
  std::string reason;      // why this scenario, in one sentence
  std::vector<std::string> alternatives;  // "scenario: what would show if it were this one"
  std::vector<std::string> try_next;      // fixes to verify, most likely first
  std::vector<Evidence> evidence;         // every fingerprint line (at most 12 per kind)
  std::vector<Evidence> closest;          // no fingerprint: error-looking lines
  LogFigures numbers;  // written as `numbers`: [Note: a log's figures are typed]
  LogRead read;        // written beside the diagnosis's own fields
  std::optional<PlannerCheck> planner;
  // [Note: one diagnose type] `zrepro diagnose --json` is this type's to_json, and a reader
  // takes it back through from_json (ConfigError on another schema, nlohmann::json's
  // exception on a wrong shape); docs/reference/diagnose-json.md is generated from
  // diagnose_field_docs() and checked against diagnose_example().
  nlohmann::json to_json() const;
  static Diagnosis from_json(const nlohmann::json& j);
  std::string to_text() const;
};

const std::vector<FieldDoc>& diagnose_field_docs();
Diagnosis diagnose_example();  // every field set, one element per list
std::string diagnose_reference_page();

// job_config: the job's DeepSpeed config when known (--config). Its ZeRO stage and offload
// settings stand in for the config print, which DeepSpeed >= 0.19 leaves out at its
// default log level (WARNING).
Diagnosis diagnose_log(const std::string& text, const nlohmann::json& job_config = nullptr);
// The same on a log already scanned line by line ([Note: a log read as a stream], evidence.h).
namespace diagnosis {
struct Scan;
}
Diagnosis diagnose_scan(diagnosis::Scan s, const nlohmann::json& job_config = nullptr);

// [Note: Flight Recorder dumps] (trainer/diagnose/flight_recorder.h): each rank's last collective, one row
// per rank, diagnosed as the watchdog's lines are: the hang's kind from what the ranks waited in.
Diagnosis diagnose_flight_recorder(const std::vector<WatchdogEntry>& rows);

}  // namespace zrepro
