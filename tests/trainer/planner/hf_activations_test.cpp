// zrepro's activation model against what Hugging Face's own decoder layers keep for
// backward: conformance/results/hf_activations.json (conformance/hf_activations.py, run on
// the CPU with transformers' model classes and saved_tensors_hooks) holds one decoder
// layer's saved bytes per case; block_activation_bytes (the planner's tapes) must give the
// same bytes for the same model, dtype, micro-batch and sequence, exactly where the kernels
// are the same on both sides, and within the named gap where they are not.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "trainer/config/model_spec.h"
#include "trainer/planner/gpt_memory.h"

using namespace zrepro;
using json = nlohmann::json;

namespace {

// Where zrepro's block keeps other bytes than transformers' layer, and why.
struct Gap {
  const char* model;
  const char* attention;
  const char* dtype;
  double at_most;  // |zrepro - HF| / HF
  const char* why;
};
const Gap kGaps[] = {
    {"gpt2", "sdpa", "*", 0.04,
     "sdpa on the CPU: transformers calls torch's scaled_dot_product_attention (the CPU flash kernel, which keeps "
     "its output and log-sum-exp); zrepro's CPU path is its own memory-efficient attention (gpt.cpp, tiles), which "
     "keeps a copy of the inputs more per layer"},
    {"llama-toy", "sdpa", "*", 0.13,
     "the same, with grouped-query attention: zrepro repeats the key/value heads before its own attention and "
     "keeps the repeated copies"},
};

const Gap* gap(const json& c) {
  for (const Gap& g : kGaps)
    if (c["model"] == g.model && c["attention"] == g.attention &&
        (std::string(g.dtype) == "*" || c["dtype"] == g.dtype))
      return &g;
  return nullptr;
}

}  // namespace

TEST(HfActivations, ABlockKeepsWhatTransformersLayerKeeps) {
  std::ifstream in(std::string(ZREPRO_SOURCE_DIR).append("/conformance/results/hf_activations.json"));
  ASSERT_TRUE(in) << "conformance/results/hf_activations.json: python conformance/hf_activations.py --out ...";
  const json rec = json::parse(in);
  int exact = 0;
  for (const auto& c : rec["cases"]) {
    ModelOverrides o;
    o.seq = c["seq"].get<int64_t>();
    o.attention = c["attention"].get<std::string>();
    const ModelSpec m =
        resolve_model(std::string(ZREPRO_SOURCE_DIR).append("/configs/models/") + c["model"].get<std::string>() + ".json", o);
    const Precision p = c["dtype"] == "bfloat16" ? Precision::bf16 : Precision::fp32;
    const double ours = static_cast<double>(block_activation_bytes(m, c["micro_batch"].get<int64_t>(), p, true));
    const double theirs = c["block_saved_bytes"].get<double>();
    const std::string what = c["model"].get<std::string>() + " " + c["attention"].get<std::string>() + " " +
                             c["dtype"].get<std::string>() + " B=" + c["micro_batch"].dump() + " S=" + c["seq"].dump();
    if (const Gap* g = gap(c)) {
      EXPECT_LE(std::abs(ours - theirs) / theirs, g->at_most) << what << ": " << g->why;
    } else {
      EXPECT_EQ(ours, theirs) << what << ": zrepro's block keeps " << ours << " bytes, transformers' layer " << theirs;
      ++exact;
    }
  }
  EXPECT_GE(exact, 8) << "GPT-2 and Llama eager, fp32 and bf16, agree byte for byte";
}
