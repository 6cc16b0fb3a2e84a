// See watchdog.h.
#include "zero/comm/watchdog.h"

#include <chrono>

namespace zrepro {

Watchdog::Watchdog(const FlightRecorder& recorder, double timeout_s, Handler handler)
    : recorder_(recorder), timeout_s_(timeout_s), handler_(std::move(handler)) {
  thread_ = std::thread([this] { loop(); });
}

Watchdog::~Watchdog() {
  stop_ = true;
  thread_.join();
}

void Watchdog::loop() {
  // Poll often enough that a short test timeout is honoured within ~5%.
  const auto period = std::chrono::milliseconds(std::max(10, std::min(200, static_cast<int>(timeout_s_ * 50))));
  while (!stop_) {
    std::this_thread::sleep_for(period);
    auto e = recorder_.oldest_incomplete();
    if (e && wall_seconds() - e->t_scheduled > timeout_s_) {
      handler_(*e);
      return;
    }
  }
}

}  // namespace zrepro
