// Flight recorder: a per-rank ring buffer of the collectives this rank issued,
// each with its sequence id, op, dtype, sizes, state (scheduled / started /
// completed / failed), timestamps and the training position that issued it.
// Merging the rings of all ranks by sequence id finds where they disagree.
#pragma once
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "device/device.h"  // wall_seconds

namespace zrepro {

enum class CollOp { all_reduce, reduce_scatter, all_gather, broadcast, barrier };
constexpr int kNumCollOps = 5;
const char* coll_op_name(CollOp op);

struct FlightEntry {
  enum State { scheduled, started, completed, failed };
  int64_t seq = 0;
  CollOp op = CollOp::barrier;
  std::string dtype;
  int64_t in_numel = 0, out_numel = 0;
  State state = scheduled;
  double t_scheduled = 0, t_started = 0, t_completed = 0;  // seconds since the Unix epoch
  int64_t step = -1, micro_step = -1;
  std::string label;  // what issued it, e.g. "reduce_grad bucket 3"
};
const char* flight_state_name(FlightEntry::State s);

class FlightRecorder {
 public:
  explicit FlightRecorder(size_t capacity = 4096) : capacity_(capacity) {}
  int64_t record(FlightEntry e);  // assigns and returns the sequence id
  void set_state(int64_t seq, FlightEntry::State s);
  std::vector<FlightEntry> snapshot() const;
  // The oldest collective that was scheduled but has not completed.
  std::optional<FlightEntry> oldest_incomplete() const;

 private:
  FlightEntry* find(int64_t seq);
  size_t capacity_;
  mutable std::mutex mu_;
  std::deque<FlightEntry> ring_;
  int64_t next_seq_ = 0;
};

}  // namespace zrepro
