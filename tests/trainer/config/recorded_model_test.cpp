// trainer/config/recorded_model.h: a recorded architecture ([Note: a recorded architecture]) read
// from the recordings conformance/results/recordings/ holds (Qwen3, Phi-3 and Gemma-2 toys,
// recorded by trainer/planner/hf_record.py from transformers 5.25's own modules): its size table
// is the model's as DeepSpeed counted it in the CPU record, a plan from it says where its
// activations came from, and every setting the recording was not made at is refused with the
// command that records it, never silently reused.
#include "trainer/config/recorded_model.h"

#include <gtest/gtest.h>

#include <fstream>

#include "device/base/errors.h"
#include "tests/trainer/planner/planner_configs.h"
#include "trainer/config/model_spec.h"
#include "trainer/planner/planner.h"

using namespace zrepro;
using json = nlohmann::json;

namespace {

std::string recording(const std::string& name) {
  return std::string(ZREPRO_SOURCE_DIR).append("/conformance/results/recordings/").append(name).append(".tape.json");
}

// DeepSpeed's own count of the model's parameters, from the CPU record's row of the case.
int64_t deepspeed_params(const std::string& case_name) {
  std::ifstream in(std::string(ZREPRO_SOURCE_DIR).append("/conformance/results/cpu_phases.json"));
  const json rec = json::parse(in);  // alive through the loop
  for (const auto& c : rec["cases"])
    if (c["name"] == case_name) return c["params"].get<int64_t>();
  return -1;
}

std::string refusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST(RecordedModel, TheSizeTableIsTheModelsAsDeepSpeedCountedIt) {
  for (const auto& [rec, case_name] : {std::pair{"qwen3-toy-bf16-sdpa-s256", "qwen3-toy-bf16-z2-sdpa"},
                                       std::pair{"phi3-toy-bf16-sdpa-s256", "phi3-toy-bf16-z1-sdpa"},
                                       std::pair{"gemma2-toy-bf16-eager-s256", "gemma2-toy-bf16-z2-eager"}}) {
    const ModelSpec m = resolve_model(recording(rec));
    ASSERT_TRUE(m.recorded) << rec;
    EXPECT_EQ(m.param_count(), deepspeed_params(case_name)) << rec;
    EXPECT_EQ(m.seq, 256) << rec;
    EXPECT_NE(m.assumptions().find("recorded under FakeTensorMode"), std::string::npos) << m.assumptions();
    EXPECT_EQ(m.to_json()["recorded"]["transformers"], m.recorded->transformers) << rec;
  }
  const ModelSpec q = resolve_model(recording("qwen3-toy-bf16-sdpa-s256"));
  EXPECT_EQ(q.model_type, "qwen3");
  EXPECT_TRUE(q.tied);
  EXPECT_EQ(q.layers, 8);
  EXPECT_EQ(q.layer_shapes().size(), 10u) << "embed, 8 decoder layers, head";
}

TEST(RecordedModel, APlanSaysWhereItsActivationsCameFrom) {
  JobSpec job;
  job.model = resolve_model(recording("qwen3-toy-bf16-sdpa-s256"));
  job.cfg = planner_test::make_config(R"({"bf16": {"enabled": true}, "zero_optimization": {"stage": 2}})", 2, 1,
                                      "bf16");
  const MemoryPlan p = plan_memory(job);
  EXPECT_NE(p.activation_source.find("transformers 5.25.0's qwen3 modules"), std::string::npos) << p.activation_source;
  EXPECT_GT(p.block_saved_bytes, 0);
  // Micro-batch 4 keeps twice micro-batch 2's per-token activations (a + c x B).
  job.cfg = planner_test::make_config(R"({"bf16": {"enabled": true}, "zero_optimization": {"stage": 2}})", 4, 1,
                                      "bf16");
  EXPECT_EQ(plan_memory(job).block_saved_bytes, 2 * p.block_saved_bytes);
}

TEST(RecordedModel, OtherSettingsThanTheRecordingsAreRefusedWithTheCommand) {
  const std::string path = recording("qwen3-toy-bf16-sdpa-s256");
  ModelOverrides seq;
  seq.seq = 512;
  EXPECT_NE(refusal([&] { resolve_model(path, seq); }).find("record-model --config CONFIG.json --seq 512"),
            std::string::npos);
  ModelOverrides attn;
  attn.attention = "eager";
  EXPECT_NE(refusal([&] { resolve_model(path, attn); }).find("--attn eager"), std::string::npos);
  ModelOverrides hidden;
  hidden.hidden = 1024;
  EXPECT_NE(refusal([&] { resolve_model(path, hidden); }).find("sizes are the recording's"), std::string::npos);
  JobSpec job;
  job.model = resolve_model(path);
  job.cfg = planner_test::make_config(R"({"zero_optimization": {"stage": 2}})", 2, 1, "fp32");
  EXPECT_NE(refusal([&] { plan_memory(job); }).find("recorded in bf16, and this job computes in fp32"),
            std::string::npos);
}

TEST(RecordedModel, ADamagedRecordingIsRefusedNamingTheKey) {
  std::ifstream in(recording("phi3-toy-bf16-sdpa-s256"));
  json doc = json::parse(in);
  doc.erase("symbols");
  const std::string path = testing::TempDir() + "/damaged.tape.json";
  std::ofstream(path) << doc.dump();
  EXPECT_NE(refusal([&] { resolve_model(path); }).find("no \"symbols\""), std::string::npos);
  doc = json::parse(std::ifstream(recording("phi3-toy-bf16-sdpa-s256")));
  doc["groups"]["block"][0]["shape"] = json::array({-3});
  std::ofstream(path) << doc.dump();
  EXPECT_NE(refusal([&] { resolve_model(path); }).find("a dimension -3"), std::string::npos);
}

TEST(RecordedModel, AConfigJsonOfAnotherArchitectureNamesTheWayIn) {
  const std::string msg = refusal([] { resolve_model(std::string(ZREPRO_SOURCE_DIR).append("/conformance/hf_models/qwen3-toy.json")); });
  EXPECT_NE(msg.find("model_type \"qwen3\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("zrepro record-model --config"), std::string::npos) << msg;
}
