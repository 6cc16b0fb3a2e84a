// See trace.h.
#include "trainer/loop/trace.h"

namespace zrepro {

using json = nlohmann::json;

namespace {
constexpr int kComputeLane = 0, kCommLane = 1, kCopyLane = 2;
double us(double seconds) { return seconds * 1e6; }
}  // namespace

void TraceRecorder::span(const std::string& name, double t0, double t1, json args) {
  json e = {{"name", name}, {"cat", "compute"}, {"ph", "X"}, {"ts", us(t0)},
            {"dur", us(t1 - t0)}, {"pid", rank_}, {"tid", kComputeLane}};
  if (!args.is_null()) e["args"] = std::move(args);
  events_.push_back(std::move(e));
}

void TraceRecorder::memory(double t, int64_t allocated, int64_t reserved) {
  events_.push_back({{"name", "device memory (bytes)"}, {"ph", "C"}, {"ts", us(t)}, {"pid", rank_},
                     {"args", {{"allocated", allocated}, {"reserved", reserved}}}});
}

void TraceRecorder::add_collectives(const std::vector<FlightEntry>& entries) {
  for (const auto& e : entries) {
    if (e.state != FlightEntry::completed) continue;
    events_.push_back({{"name", coll_op_name(e.op)},
                       {"cat", "comm"},
                       {"ph", "X"},
                       {"ts", us(e.t_started)},
                       {"dur", us(e.t_completed - e.t_started)},
                       {"pid", rank_},
                       {"tid", kCommLane},
                       {"args", {{"seq", e.seq},
                                 {"label", e.label},
                                 {"dtype", e.dtype},
                                 {"in_numel", e.in_numel},
                                 {"out_numel", e.out_numel},
                                 {"queued_us", us(e.t_started - e.t_scheduled)},
                                 {"step", e.step},
                                 {"micro_step", e.micro_step}}}});
  }
}

void TraceRecorder::add_copies(const std::vector<CopyRecord>& copies) {
  for (const auto& c : copies)
    events_.push_back({{"name", std::string(copy_dir_name(c.dir)) + (c.pinned ? "" : " (pageable)")},
                       {"cat", "copy"},
                       {"ph", "X"},
                       {"ts", us(c.t_start)},
                       {"dur", us(c.t_end - c.t_start)},
                       {"pid", rank_},
                       {"tid", kCopyLane},
                       {"args", {{"bytes", c.bytes}, {"label", c.label}, {"queued_us", us(c.t_start - c.t_submit)}}}});
}

json merge_traces(const std::vector<json>& per_rank) {
  json all = json::array();
  for (size_t r = 0; r < per_rank.size(); ++r) {
    const int rank = static_cast<int>(r);
    all.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", rank}, {"args", {{"name", "rank " + std::to_string(rank)}}}});
    all.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank}, {"tid", kComputeLane}, {"args", {{"name", "compute"}}}});
    all.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank}, {"tid", kCommLane}, {"args", {{"name", "comm"}}}});
    all.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank}, {"tid", kCopyLane}, {"args", {{"name", "copy"}}}});
    for (const auto& e : per_rank[r]) all.push_back(e);
  }
  return {{"traceEvents", all}, {"displayTimeUnit", "ms"}};
}

}  // namespace zrepro
