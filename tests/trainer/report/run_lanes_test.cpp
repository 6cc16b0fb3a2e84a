// report.html's swimlanes from a run's files: trace.json's lanes windowed to the last
// two steps, a hang's flight dumps with the stuck collective open, the failing rank
// highlighted.
#include <gtest/gtest.h>

#include "trainer/loop/trace.h"
#include "trainer/report/run_lanes.h"

using namespace zrepro;
using json = nlohmann::json;

namespace {
json span(int pid, int tid, const std::string& name, double ts_us, double dur_us) {
  return {{"ph", "X"}, {"pid", pid}, {"tid", tid}, {"name", name}, {"ts", ts_us}, {"dur", dur_us}, {"args", {{"step", 0}}}};
}
json lane_name(int pid, int tid, const std::string& name) {
  return {{"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}};
}
}  // namespace

TEST(RunLanes, TheTraceIsWindowedToTheLastTwoSteps) {
  json ev = json::array({lane_name(0, 0, "compute"), lane_name(0, 1, "comm"), lane_name(1, 0, "compute")});
  for (int s = 0; s < 5; ++s) {  // step s: forward [10s, 10s+5), step [10s+5, 10s+6) (in ms)
    ev.push_back(span(0, 0, "forward", 1e4 * s, 5e3));
    ev.push_back(span(0, 0, "step", 1e4 * s + 5e3, 1e3));
    ev.push_back(span(0, 1, "all_reduce", 1e4 * s + 5e3, 5e2));
    ev.push_back(span(1, 0, "forward", 1e4 * s, 5e3));
  }
  const std::vector<Lane> lanes = lanes_from_trace(json{{"traceEvents", ev}}, {1});
  ASSERT_EQ(lanes.size(), 3u);
  EXPECT_EQ(lanes[0].label, "rank 0 compute");
  EXPECT_EQ(lanes[1].label, "rank 0 comm");
  EXPECT_EQ(lanes[2].label, "rank 1 compute");
  EXPECT_TRUE(lanes[2].highlight);
  EXPECT_FALSE(lanes[0].highlight);
  // From the end of step 2 on: steps 3 and 4 (2 spans each on rank 0's compute lane).
  EXPECT_EQ(lanes[0].spans.size(), 4u);
  for (const LaneSpan& s : lanes[0].spans) EXPECT_GE(s.t0, 0.026 - 1e-9);
}

TEST(RunLanes, AHangsFlightDumpsShowTheCollectiveThatNeverCompleted) {
  auto entry = [](int seq, FlightEntry::State state, double t0, double t1) {
    FlightEntry e;
    e.seq = seq, e.op = CollOp::all_reduce, e.label = "bucket", e.state = state, e.t_started = t0, e.t_completed = t1;
    return e;
  };
  // Written and read as the ranks write them (FlightDump's to_json and from_json).
  std::vector<FlightDump> dumps;
  for (const FlightDump& d :
       {FlightDump{0, "timeout", {entry(0, FlightEntry::completed, 100.0, 100.5), entry(1, FlightEntry::failed, 101.0, 0.0)}},
        FlightDump{1, "timeout",
                   {entry(0, FlightEntry::completed, 100.0, 100.5), entry(1, FlightEntry::completed, 100.6, 102.0)}}})
    dumps.push_back(FlightDump::from_json(json::parse(d.to_json().dump())));
  const std::vector<Lane> lanes = lanes_from_flight(dumps, {0});
  ASSERT_EQ(lanes.size(), 2u);
  EXPECT_TRUE(lanes[0].highlight);
  ASSERT_EQ(lanes[0].spans.size(), 2u);
  EXPECT_TRUE(lanes[0].spans[1].open);
  EXPECT_EQ(lanes[0].spans[1].t1, 102.0) << "drawn to the latest activity";
  EXPECT_FALSE(lanes[1].spans[1].open);
  EXPECT_TRUE(run_lanes("/nonexistent-dir", {}).empty());
}

// [Note: one trace event type]: what TraceRecorder writes is what the swimlanes read back.
TEST(RunLanes, TheRecordersEventsReadBackAsTheyWereWritten) {
  TraceRecorder r0(0);
  r0.span("forward", 100.0, 100.5, json{{"step", 3}});
  r0.memory(100.2, 7, 9);
  FlightEntry c;
  c.op = CollOp::all_gather, c.state = FlightEntry::completed, c.t_started = 100.1, c.t_completed = 100.3,
  c.label = "unshard h.0";
  r0.add_collectives({c});
  const json trace = merge_traces({r0.events()});
  const std::vector<TraceEvent> back = trace_events_of(trace);
  ASSERT_EQ(back.size(), trace["traceEvents"].size());
  for (size_t i = 0; i < back.size(); ++i) EXPECT_EQ(back[i].to_json(), trace["traceEvents"][i]) << i;
  EXPECT_EQ(back[4].ph, "X");
  EXPECT_EQ(back[4].arg_text("step"), "3");
  EXPECT_FALSE(back[5].tid.has_value()) << "a counter has no lane";
  const std::vector<Lane> lanes = lanes_from_trace(trace, {});
  ASSERT_EQ(lanes.size(), 2u);
  EXPECT_EQ(lanes[0].label, "rank 0 compute");
  EXPECT_EQ(lanes[0].spans[0].tooltip, "forward (step 3)");
  EXPECT_EQ(lanes[1].label, "rank 0 comm");
  EXPECT_EQ(lanes[1].spans[0].tooltip, "all_gather unshard h.0 (step -1)");
}
