// JSON files, read and written whole: every output document (summary, ab, baseline, env,
// bisect, diagnose) and every JSON input zrepro reads goes through these, below the rooms
// that define the documents, so that a room that only reads or writes JSON needs no report.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace zrepro {

// A JSON file, or null when it is missing, a folder, or not valid JSON.
nlohmann::json read_json_file(const std::string& path);
// JSON as text for any output (indent as json::dump): a string that is not valid UTF-8
// (a path, a log line, a config value the user gave) has its bad bytes replaced by U+FFFD
// instead of ending the process.
std::string json_text(const nlohmann::json& j, int indent = 2);
// json_text(j) and a newline, written atomically (write_file_atomic: IoError on failure).
void write_json_file(const std::string& path, const nlohmann::json& j);

}  // namespace zrepro
