// Watchdog: a thread per rank that looks at the flight recorder and, when the
// oldest unfinished collective has waited longer than the timeout, calls the
// handler once (which dumps, diagnoses and ends the process). PyTorch's NCCL
// watchdog does the same with a 10 min default; DeepSpeed's is 30 min.
#pragma once
#include <atomic>
#include <functional>
#include <thread>

#include "zero/comm/flight_recorder.h"

namespace zrepro {

class Watchdog {
 public:
  using Handler = std::function<void(const FlightEntry& stuck)>;
  Watchdog(const FlightRecorder& recorder, double timeout_s, Handler handler);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  void loop();
  const FlightRecorder& recorder_;
  double timeout_s_;
  Handler handler_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace zrepro
