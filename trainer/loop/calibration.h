// Step time against this machine's speed: a fixed calibration kernel timed between the
// run's own steps, so `zrepro check` compares step time as a ratio that a busy machine
// does not move.
//
// [Note: step time against the machine] Seconds per step say as much about the machine's
// load as about zrepro: on a shared 2-core runner an identical rerun took 1.5-2x the
// baseline's time. A calibration kernel (fp32 128x128 matmuls on the run's intra-op threads, repeated for
// 20 ms: several of the scheduler's time slices, as a step spans) is therefore timed
// inside the run, between steps, so that both see the same load: the summary keeps
// the step time's median over the calibration's (`step_over_calibration`), and the
// relative spread of each (interquartile range over median) from which check derives its
// tolerance. The samples are interleaved with the steps under a budget (at most 10% of
// the steps' time, and at least kMinSamples once past warm-up), every rank taking its own
// so that no rank waits for another's. Step 0 (warm-up: first allocations, lazy
// optimizer states) is neither timed against nor followed by a sample.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

namespace zrepro {

// One timing of the kernel: seconds per unit (8 matmuls), over at least
// kCalibrationSampleS of repetitions, on the run's intra-op threads (host memory).
inline constexpr double kCalibrationSampleS = 0.02;
double calibration_sample();
// What the kernel is, as the summary says it.
const char* calibration_kernel();

// Median and relative spread ((q3 - q1) / median) of a sample; none when empty.
struct Spread {
  double median = 0, rel_spread = 0;
  int64_t n = 0;
};
std::optional<Spread> spread_of(std::vector<double> xs);

class StepCalibration {
 public:
  static constexpr double kBudget = 0.10;  // of the steps' own time
  static constexpr int kMinSamples = 5;
  // After step `step` took step_s: times one sample when the budget allows.
  void after_step(int64_t step, double step_s);
  const std::vector<double>& samples() const { return samples_; }
  // summary.json's time.calibration for steps' times (step 0 left out); null without a
  // sample or a step past warm-up.
  nlohmann::json to_json(const std::vector<double>& step_s) const;

 private:
  std::vector<double> samples_;
  double steps_s_ = 0, spent_s_ = 0;
};

}  // namespace zrepro
