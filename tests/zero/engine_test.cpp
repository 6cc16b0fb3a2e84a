// [Note: the engine's training state] (zero/engine.h): the engine moves idle -> forward ->
// backward -> idle per micro-step and idle -> step -> idle at the boundary, files bytes
// under the phase it is in, and refuses a move out of order.
#include <gtest/gtest.h>

#include <stdexcept>

#include "device/device_memory.h"
#include "zero/engine.h"

using namespace zrepro;

namespace {

// One layer of one 4x4 weight, its value a ramp.
struct OneLayer {
  SelfCommunicator comm;
  ZeroEngine engine{{LayerSpec{"block.0", {ParamSpec{"w", {4, 4}}}}}, {torch::arange(16, torch::kFloat)}, EngineConfig{},
                    comm};
};

}  // namespace

TEST(EngineState, EachMoveSetsThePhaseItsBytesAreFiledUnder) {
  DeviceMemory& mem = DeviceMemory::instance();
  mem.install(0);
  OneLayer one;
  ZeroEngine& e = one.engine;
  EXPECT_EQ(e.training_state(), TrainingState::idle);
  e.begin_micro_step(0, 0);
  e.begin_forward();
  EXPECT_EQ(e.training_state(), TrainingState::forward);
  EXPECT_EQ(mem.phase(), Phase::forward);
  torch::Tensor loss = (e.acquire(0)[0] * 2).sum();
  e.begin_backward();
  EXPECT_EQ(mem.phase(), Phase::backward);
  loss.backward();
  e.end_backward();
  EXPECT_EQ(e.training_state(), TrainingState::idle);
  const StepResult r = e.step(loss.item<double>());
  EXPECT_EQ(mem.phase(), Phase::step);
  EXPECT_EQ(e.training_state(), TrainingState::idle);
  EXPECT_NEAR(r.grad_norm, 8.0, 1e-5);  // d(2 sum w)/dw = 2 for 16 values: norm 8
}

TEST(EngineState, AMoveOutOfOrderIsRefusedNamingBothStates) {
  DeviceMemory::instance().install(0);
  OneLayer one;
  ZeroEngine& e = one.engine;
  auto refused = [](const std::function<void()>& f, const std::string& what) {
    try {
      f();
      ADD_FAILURE() << "accepted: " << what;
    } catch (const std::logic_error& err) {
      EXPECT_NE(std::string(err.what()).find(what), std::string::npos) << err.what();
    }
  };
  refused([&] { e.begin_backward(); }, "backward begins in state idle, expected forward");
  refused([&] { e.end_backward(); }, "end_backward in state idle, expected backward");
  refused([&] { e.acquire(0); }, "layer 0 acquired in state idle");
  e.begin_micro_step(0, 0);
  e.begin_forward();
  refused([&] { e.step(0.0); }, "step begins in state forward, expected idle");
  refused([&] { e.begin_micro_step(0, 1); }, "a micro-step begins in state forward");
}
