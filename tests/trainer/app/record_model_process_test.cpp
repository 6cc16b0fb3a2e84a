// `zrepro record-model` and a recorded architecture as a user meets it ([Note: a recorded
// architecture], trainer/config/recorded_model.h): a plan from a recording (JSON with where the
// activations came from), a run of one refused (planned, not trained), and the recording
// itself: made where the user's Python has transformers, else refused naming what is missing.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tests/support/process.h"

using zrepro_test::zrepro_cmd;

namespace {

const std::string kQwen3 = std::string(ZREPRO_SOURCE_DIR).append("/conformance/results/recordings/qwen3-toy-bf16-sdpa-s256.tape.json");

std::string bf16_z2(const std::string& dir) {
  std::ofstream(dir + "/ds.json") << R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
    "bf16": {"enabled": true}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
    "zero_optimization": {"stage": 2}})";
  return dir + "/ds.json";
}

}  // namespace

TEST(RecordModel, APlanFromARecordingSaysWhereItsActivationsCameFrom) {
  const std::string dir = zrepro_test::fresh_dir("record_plan");
  const auto p = zrepro_cmd("plan --json --device cuda --device-memory 4GB --config " + bf16_z2(dir) + " --model " + kQwen3,
                            60, false);
  ASSERT_EQ(p.code, 0) << p.output;
  const nlohmann::json j = nlohmann::json::parse(p.output);
  EXPECT_NE(j["activations"]["source"].get<std::string>().find("qwen3 modules, recorded under FakeTensorMode"),
            std::string::npos) << j["activations"];
  EXPECT_EQ(j["model"]["recorded"]["transformers"], "5.25.0");
  EXPECT_EQ(j["verdict"], "fits");
}

TEST(RecordModel, ARunOfARecordedArchitectureIsRefused) {
  const std::string dir = zrepro_test::fresh_dir("record_run");
  const auto r = zrepro_cmd("run --steps 1 --config " + bf16_z2(dir) + " --model " + kQwen3 + " --out " + dir + "/out");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("planned, not trained"), std::string::npos) << r.output;
}

// With the Python the user has: transformers present, the recording plans; absent, exit 2
// saying so (CI's torch venv has no transformers; the conformance venv has).
TEST(RecordModel, RecordsWithTheUsersPythonOrSaysWhatIsMissing) {
  const std::string dir = zrepro_test::fresh_dir("record_model");
  const std::string out = dir + "/m.tape.json";
  const auto r = zrepro_cmd("record-model --config " + std::string(ZREPRO_SOURCE_DIR) +
                            "/conformance/hf_models/qwen3-toy.json --seq 64 --out " + out, 300);
  if (r.code == 0) {
    const auto p = zrepro_cmd("plan --json --config " + bf16_z2(dir) + " --model " + out, 60, false);
    EXPECT_EQ(p.code, 0) << p.output;
    EXPECT_FALSE(std::filesystem::exists(out + ".log"));
  } else {
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("cannot import"), std::string::npos) << r.output;
    EXPECT_FALSE(std::filesystem::exists(out));
  }
  const auto bad = zrepro_cmd("record-model --config " + dir + "/none.json --seq 64 --out " + out);
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("none.json"), std::string::npos) << bad.output;
}
