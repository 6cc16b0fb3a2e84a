// PyTorch's Flight Recorder dumps read into what each rank last issued.
//
// [Note: Flight Recorder dumps] With TORCH_NCCL_DUMP_ON_TIMEOUT=1 (and
// TORCH_NCCL_TRACE_BUFFER_SIZE / TORCH_FR_BUFFER_SIZE > 0) every rank of a job whose
// collective timed out writes a pickle to TORCH_NCCL_DEBUG_INFO_TEMP_FILE<rank>: a dict
// whose "entries" list each collective the rank issued (collective_seq_id, profiling_name
// such as "nccl:all_gather", input_sizes, output_sizes, state). What separates a hang's
// causes is each rank's last collective: different sequence numbers (one rank issued
// more), one sequence number with different ops (ranks issued different collectives), or
// with the same op and different sizes (ZeRO-3 ranks gathering different parameters).
// `zrepro diagnose DIR` reads every dump in DIR (the rank from the file name's trailing
// digits) and diagnoses the rows as it does the NCCL watchdog's lines (diagnose.h).
// tests/data/flight_recorder/ holds real dumps PyTorch 2.11 wrote (make_dumps.py).
#pragma once
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "trainer/diagnose/log_figures.h"

namespace zrepro {

// The file's bytes start as a pickle (protocol 2 or later): a candidate dump.
bool looks_like_pickle(const std::string& bytes);
// The dump as JSON (dicts, lists, tuples as lists, strings, numbers, null); ConfigError
// naming `path` when it is a pickle but not one this reader understands or not a Flight
// Recorder dump (no "entries").
nlohmann::json read_flight_recorder(const std::string& bytes, const std::string& path);
// One rank's row, as diagnose's watchdog rows (log_figures.h), with the entry's state, the
// dump's entry count and its file; seq the highest collective_seq_id of its non-p2p
// entries. None without one.
std::optional<WatchdogEntry> flight_recorder_row(const nlohmann::json& dump, int rank, const std::string& file);

}  // namespace zrepro
