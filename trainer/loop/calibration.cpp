// See calibration.h.
#include "trainer/loop/calibration.h"

#include <algorithm>
#include <chrono>

#include <torch/torch.h>

#include "device/device_memory.h"

namespace zrepro {

double calibration_sample() {
  torch::NoGradGuard no_grad;
  // Host memory, never the emulated device's: a real rank that calibrates must not hold
  // 128 KiB of "other" a virtual rank does not (VirtualRanks.EqualRealProcesses...). And
  // the run's own intra-op threads, left as they are: the calibration changes no setting of
  // the run it measures against.
  DeviceMemory::HostScope host;
  static const torch::Tensor a = torch::full({128, 128}, 0.5), b = torch::full({128, 128}, 0.25);
  const auto t0 = std::chrono::steady_clock::now();
  double elapsed = 0;
  int64_t units = 0;
  // Repeated for kSampleS at least: a sample shorter than the scheduler's time slice runs
  // uninterrupted on a busy machine while the steps do not, and would not see the load.
  while (elapsed < kCalibrationSampleS) {
    torch::Tensor c;
    for (int i = 0; i < 8; ++i) c = torch::mm(a, b);
    (void)c.sum().item<float>();
    ++units;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return elapsed / static_cast<double>(units);
}

const char* calibration_kernel() {
  return "8 fp32 128x128 matmuls on the run's intra-op threads (seconds per 8, over at least 20 ms)";
}

std::optional<Spread> spread_of(std::vector<double> xs) {
  if (xs.empty()) return std::nullopt;
  std::sort(xs.begin(), xs.end());
  auto at = [&](double q) {  // linear interpolation between order statistics
    const double pos = q * static_cast<double>(xs.size() - 1);
    const size_t lo = static_cast<size_t>(pos);
    const size_t hi = std::min(lo + 1, xs.size() - 1);
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - static_cast<double>(lo));
  };
  const double med = at(0.5);
  return Spread{med, med > 0 ? (at(0.75) - at(0.25)) / med : 0.0, static_cast<int64_t>(xs.size())};
}

void StepCalibration::after_step(int64_t step, double step_s) {
  if (step == 0) return;  // warm-up
  steps_s_ += step_s;
  if (static_cast<int>(samples_.size()) >= kMinSamples && spent_s_ > kBudget * steps_s_) return;
  const auto t0 = std::chrono::steady_clock::now();
  samples_.push_back(calibration_sample());
  spent_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

nlohmann::json StepCalibration::to_json(const std::vector<double>& step_s) const {
  const std::vector<double> timed(step_s.size() > 1 ? step_s.begin() + 1 : step_s.end(), step_s.end());
  const std::optional<Spread> k = spread_of(samples_), s = spread_of(timed);
  if (!k || !s || k->median <= 0) return nullptr;
  return {{"kernel", calibration_kernel()},
          {"samples", k->n},
          {"median_s", k->median},
          {"spread", k->rel_spread},
          {"steps", s->n},
          {"step_s_median", s->median},
          {"step_spread", s->rel_spread},
          {"step_over_calibration", s->median / k->median}};
}

}  // namespace zrepro
