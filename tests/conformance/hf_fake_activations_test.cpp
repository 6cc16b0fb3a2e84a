// The method for planning an architecture zrepro has no model of, held by its record
// (conformance/results/hf_fake_activations.json, written by conformance/hf_fake_activations.py
// with transformers and torch): one decoder layer's saved tensors recorded under
// FakeTensorMode equal, byte for byte, what a real CPU forward saves, for the planner's
// families and for architectures zrepro refuses today ([Note: FakeTensorMode is not eager
// to transformers] in that script).
#include <algorithm>
#include <fstream>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "trainer/config/model_spec.h"

namespace {

nlohmann::json fake_record() {
  std::ifstream in(std::string(ZREPRO_SOURCE_DIR).append("/conformance/results/hf_fake_activations.json"));
  return in ? nlohmann::json::parse(in) : nlohmann::json();
}

}  // namespace

TEST(HfFakeActivations, FakeTensorsSaveWhatARealForwardSavesAlsoForForeignArchitectures) {
  const nlohmann::json rec = fake_record();
  ASSERT_TRUE(rec.is_object()) << "python conformance/hf_fake_activations.py --out "
                                  "conformance/results/hf_fake_activations.json";
  const std::vector<std::string> ours = zrepro::supported_model_types();
  std::set<std::string> foreign;
  int cases = 0;
  for (const auto& c : rec["cases"]) {
    const std::string what = c["config"].get<std::string>() + " " + c["attention"].get<std::string>() + " " +
                             c["dtype"].get<std::string>();
    EXPECT_GT(c["real_bytes"].get<int64_t>(), 0) << what;
    EXPECT_EQ(c["fake_bytes"], c["real_bytes"]) << what;
    EXPECT_EQ(c["fake_tensors"], c["real_tensors"]) << what;
    const std::string type = c["model_type"];
    if (std::find(ours.begin(), ours.end(), type) == ours.end()) foreign.insert(type);
    ++cases;
  }
  EXPECT_GE(cases, 20);
  EXPECT_GE(foreign.size(), 3u) << "architectures zrepro has no model for (qwen3, phi3, gemma2)";
}
