// See trace.h.
#include "trainer/loop/trace.h"

namespace zrepro {

using json = nlohmann::json;

namespace {
constexpr int kComputeLane = 0, kCommLane = 1, kCopyLane = 2;
double us(double seconds) { return seconds * 1e6; }
}  // namespace

json TraceEvent::to_json() const {
  json e = {{"name", name}, {"ph", ph}, {"pid", pid}};
  if (!cat.empty()) e["cat"] = cat;
  if (ph != "M") e["ts"] = ts_us;
  if (ph == "X") e["dur"] = dur_us;
  if (tid) e["tid"] = *tid;
  if (!args.is_null()) e["args"] = args;
  return e;
}

TraceEvent TraceEvent::from_json(const json& j) {
  TraceEvent e;
  e.name = j.at("name").get<std::string>();
  e.ph = j.at("ph").get<std::string>();
  e.pid = j.at("pid").get<int>();
  e.cat = j.value("cat", "");
  e.ts_us = j.value("ts", 0.0);
  e.dur_us = j.value("dur", 0.0);
  if (j.contains("tid")) e.tid = j.at("tid").get<int>();
  e.args = j.value("args", json());
  return e;
}

std::string TraceEvent::arg_text(const char* key) const {
  if (!args.is_object() || !args.contains(key)) return "";
  const json& v = args.at(key);
  return v.is_string() ? v.get<std::string>() : v.dump();
}

std::vector<TraceEvent> trace_events_of(const json& trace) {
  std::vector<TraceEvent> out;
  for (const auto& e : trace.is_object() ? trace.at("traceEvents") : trace) out.push_back(TraceEvent::from_json(e));
  return out;
}

void TraceRecorder::span(const std::string& name, double t0, double t1, json args) {
  events_.push_back(TraceEvent{name, "compute", "X", us(t0), us(t1 - t0), rank_, kComputeLane, std::move(args)}.to_json());
}

void TraceRecorder::memory(double t, int64_t allocated, int64_t reserved) {
  events_.push_back(TraceEvent{"device memory (bytes)", "", "C", us(t), 0, rank_, std::nullopt,
                               {{"allocated", allocated}, {"reserved", reserved}}}
                        .to_json());
}

void TraceRecorder::add_collectives(const std::vector<FlightEntry>& entries) {
  for (const auto& e : entries) {
    if (e.state != FlightEntry::completed) continue;
    const json args = {{"seq", e.seq},           {"label", e.label},
                       {"dtype", e.dtype},       {"in_numel", e.in_numel},
                       {"out_numel", e.out_numel}, {"queued_us", us(e.t_started - e.t_scheduled)},
                       {"step", e.step},         {"micro_step", e.micro_step}};
    events_.push_back(
        TraceEvent{coll_op_name(e.op), "comm", "X", us(e.t_started), us(e.t_completed - e.t_started), rank_, kCommLane, args}
            .to_json());
  }
}

void TraceRecorder::add_copies(const std::vector<CopyRecord>& copies) {
  for (const auto& c : copies)
    events_.push_back(TraceEvent{std::string(copy_dir_name(c.dir)) + (c.pinned ? "" : " (pageable)"), "copy", "X",
                                 us(c.t_start), us(c.t_end - c.t_start), rank_, kCopyLane,
                                 {{"bytes", c.bytes}, {"label", c.label}, {"queued_us", us(c.t_start - c.t_submit)}}}
                          .to_json());
}

json merge_traces(const std::vector<json>& per_rank) {
  json all = json::array();
  auto lane_name = [&](int rank, const char* what, std::optional<int> tid, const std::string& name) {
    all.push_back(TraceEvent{what, "", "M", 0, 0, rank, tid, {{"name", name}}}.to_json());
  };
  for (size_t r = 0; r < per_rank.size(); ++r) {
    const int rank = static_cast<int>(r);
    lane_name(rank, "process_name", std::nullopt, "rank " + std::to_string(rank));
    lane_name(rank, "thread_name", kComputeLane, "compute");
    lane_name(rank, "thread_name", kCommLane, "comm");
    lane_name(rank, "thread_name", kCopyLane, "copy");
    for (const auto& e : per_rank[r]) all.push_back(e);
  }
  return {{"traceEvents", all}, {"displayTimeUnit", "ms"}};
}

}  // namespace zrepro
