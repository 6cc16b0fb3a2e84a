// See flight_recorder.h.
#include "zero/comm/flight_recorder.h"

#include <chrono>

namespace zrepro {

const char* coll_op_name(CollOp op) {
  switch (op) {
    case CollOp::all_reduce: return "all_reduce";
    case CollOp::reduce_scatter: return "reduce_scatter";
    case CollOp::all_gather: return "all_gather";
    case CollOp::broadcast: return "broadcast";
    case CollOp::barrier: return "barrier";
  }
  return "?";
}

const char* flight_state_name(FlightEntry::State s) {
  switch (s) {
    case FlightEntry::scheduled: return "scheduled";
    case FlightEntry::started: return "started";
    case FlightEntry::completed: return "completed";
    case FlightEntry::failed: return "failed";
  }
  return "?";
}

int64_t FlightRecorder::record(FlightEntry e) {
  std::lock_guard<std::mutex> lock(mu_);
  e.seq = next_seq_++;
  e.t_scheduled = wall_seconds();
  ring_.push_back(std::move(e));
  if (ring_.size() > capacity_) ring_.pop_front();
  return ring_.back().seq;
}

FlightEntry* FlightRecorder::find(int64_t seq) {
  if (ring_.empty() || seq < ring_.front().seq) return nullptr;
  const size_t i = static_cast<size_t>(seq - ring_.front().seq);
  return i < ring_.size() ? &ring_[i] : nullptr;
}

void FlightRecorder::set_state(int64_t seq, FlightEntry::State s) {
  std::lock_guard<std::mutex> lock(mu_);
  FlightEntry* e = find(seq);
  if (!e) return;
  e->state = s;
  if (s == FlightEntry::started) e->t_started = wall_seconds();
  if (s == FlightEntry::completed || s == FlightEntry::failed) e->t_completed = wall_seconds();
}

std::vector<FlightEntry> FlightRecorder::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {ring_.begin(), ring_.end()};
}

std::optional<FlightEntry> FlightRecorder::oldest_incomplete() const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& e : ring_)
    if (e.state != FlightEntry::completed) return e;
  return std::nullopt;
}

}  // namespace zrepro
