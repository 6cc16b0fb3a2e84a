// json_of: an optional value as JSON, its value or null (how configs and summaries
// write a figure that may be unknown); optional_of: the way back, a key absent or null
// as nullopt. In device/base, below every layer: every room's output type reads and
// writes its optional figures with them.
#pragma once
#include <cmath>
#include <optional>

#include <string>

#include <nlohmann/json.hpp>

#include "device/base/errors.h"

namespace zrepro {

template <class T>
nlohmann::json json_of(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

// A figure JSON can carry: the value when finite, else unknown (JSON has no NaN or inf).
inline std::optional<double> finite_value(double v) { return std::isfinite(v) ? std::optional<double>(v) : std::nullopt; }

template <class T>
std::optional<T> optional_of(const nlohmann::json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  return j[key].get<T>();
}

// [Note: ab schema] and its siblings: a document says which schema it follows, and its
// from_json refuses another (ConfigError naming the document, what it has, what this
// zrepro reads and `redo`, what makes one it reads).
inline void require_schema(const nlohmann::json& j, const char* expected, const std::string& document,
                           const std::string& redo) {
  const std::string schema = j.is_object() ? j.value("schema", "") : "";
  if (schema != expected)
    throw ConfigError(document + ": schema \"" + schema + "\", this zrepro reads " + expected + ": " + redo);
}

}  // namespace zrepro
