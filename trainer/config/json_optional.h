// json_of: an optional value as JSON, its value or null (how configs and summaries
// write a figure that may be unknown).
#pragma once
#include <optional>

#include <nlohmann/json.hpp>

namespace zrepro {

template <class T>
nlohmann::json json_of(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

}  // namespace zrepro
