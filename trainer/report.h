// Machine-readable outputs of a run: summary.json (DESIGN.md contract) and
// metrics.jsonl (one line per optimizer step), both written atomically: a file
// appears complete under its final name or not at all.
#pragma once
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "trainer/ds_config.h"
#include "trainer/model_spec.h"
#include "trainer/train.h"

namespace zrepro {

// Writes content to path through a temporary file in the same folder + rename.
void write_file_atomic(const std::string& path, const std::string& content);

// Appends step lines to DIR/metrics.jsonl.partial (flushed per line, so a killed
// run leaves evidence) and renames it to DIR/metrics.jsonl on close().
class MetricsWriter {
 public:
  explicit MetricsWriter(const std::string& dir);
  ~MetricsWriter();
  void append(const nlohmann::json& line);
  void close();

 private:
  std::string final_path_, partial_path_;
  std::ofstream out_;
};

nlohmann::json step_json(const StepRecord& s);

struct SummaryInput {
  std::string status = "ok";  // ok | oom | hang | diverged | config_error | error
  const DsConfig* config = nullptr;
  const ModelSpec* model = nullptr;
  std::string device;
  const TrainResult* result = nullptr;
  nlohmann::json failure;  // null or {kind, rank, phase, message, checkpoint, hint}
};
nlohmann::json build_summary(const SummaryInput& in);

nlohmann::json make_failure(const std::string& kind, int rank, const std::string& phase, const std::string& message,
                            const std::string& checkpoint, const std::string& hint);

}  // namespace zrepro
