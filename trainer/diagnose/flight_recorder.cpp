// See flight_recorder.h.
#include "trainer/diagnose/flight_recorder.h"

#include <torch/csrc/jit/serialization/pickle.h>

#include <algorithm>
#include <cctype>

#include "device/base/errors.h"

namespace zrepro {

using json = nlohmann::json;

namespace {

json to_json(const c10::IValue& v, int depth = 0) {
  if (depth > 32) return nullptr;  // no dump nests deeper
  if (v.isNone()) return nullptr;
  if (v.isBool()) return v.toBool();
  if (v.isInt()) return v.toInt();
  if (v.isDouble()) return v.toDouble();
  if (v.isString()) return v.toStringRef();
  if (v.isList() || v.isTuple()) {
    json a = json::array();
    if (v.isList())
      for (const c10::IValue& x : v.toListRef()) a.push_back(to_json(x, depth + 1));
    else
      for (const c10::IValue& x : v.toTupleRef().elements()) a.push_back(to_json(x, depth + 1));
    return a;
  }
  if (v.isGenericDict()) {
    json o = json::object();
    for (const auto& kv : v.toGenericDict()) {
      const c10::IValue& k = kv.key();
      o[k.isString() ? k.toStringRef() : k.isInt() ? std::to_string(k.toInt()) : std::string("?")] =
          to_json(kv.value(), depth + 1);
    }
    return o;
  }
  return nullptr;  // tensors and objects: not in a dump's fields we read
}

int64_t numel(const json& sizes) {  // [[2, 1024]] -> 2048 (every tensor of the collective)
  int64_t total = 0;
  if (!sizes.is_array()) return -1;
  for (const auto& shape : sizes) {
    int64_t n = 1;
    for (const auto& d : shape) n *= d.is_number_integer() ? d.get<int64_t>() : 0;
    total += n;
  }
  return total;
}

}  // namespace

bool looks_like_pickle(const std::string& bytes) {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x80 && static_cast<unsigned char>(bytes[1]) >= 2 &&
         static_cast<unsigned char>(bytes[1]) <= 5;
}

json read_flight_recorder(const std::string& bytes, const std::string& path) {
  json dump;
  try {
    dump = to_json(torch::jit::unpickle(bytes.data(), bytes.size()));
  } catch (const std::exception& e) {
    throw ConfigError("LOG: \"" + path + "\" is a pickle this zrepro cannot read (" + std::string(e.what()).substr(0, 120) +
                      "); expected a PyTorch Flight Recorder dump (TORCH_NCCL_DUMP_ON_TIMEOUT=1) or a text log");
  }
  if (!dump.is_object() || !dump.contains("entries") || !dump["entries"].is_array())
    throw ConfigError("LOG: \"" + path + "\" is a pickle but not a Flight Recorder dump (no \"entries\" list); give the "
                      "files TORCH_NCCL_DEBUG_INFO_TEMP_FILE names, or a text log");
  return dump;
}

std::optional<WatchdogEntry> flight_recorder_row(const json& dump, int rank, const std::string& file) {
  const json* last = nullptr;
  if (!dump.contains("entries") || !dump["entries"].is_array()) return std::nullopt;
  for (const auto& e : dump.at("entries"))  // a reference: `last` points into it
    if (e.is_object() && !e.value("is_p2p", false) && e.value("collective_seq_id", json()).is_number_integer() &&
        (!last || e["collective_seq_id"].get<int64_t>() >= (*last)["collective_seq_id"].get<int64_t>()))
      last = &e;
  if (!last) return std::nullopt;
  // "nccl:all_gather" -> "ALLGATHER", the watchdog's OpType spelling.
  std::string op = last->value("profiling_name", std::string("?"));
  op = op.substr(op.find(':') == std::string::npos ? 0 : op.find(':') + 1);
  op.erase(std::remove(op.begin(), op.end(), '_'), op.end());
  std::transform(op.begin(), op.end(), op.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  WatchdogEntry row;
  row.rank = rank;
  row.seq = (*last)["collective_seq_id"].get<int64_t>();
  row.op = op;
  row.numel_in = numel(last->value("input_sizes", json()));
  row.numel_out = numel(last->value("output_sizes", json()));
  const json state = last->value("state", json());
  row.recorded = WatchdogEntry::Recorded{state.is_string() ? std::optional<std::string>(state.get<std::string>())
                                                           : std::nullopt,
                                         static_cast<int64_t>(dump["entries"].size()), file};
  return row;
}

}  // namespace zrepro
