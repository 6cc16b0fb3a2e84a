// zrepro's memory plan against device memory measured on a real GPU
// (conformance/results/gpu/*.json, written by scripts/gpu-check.sh through
// conformance/gpu/fidelity.py record): for each recorded case and phase, the real CUDA
// caching allocator's peak under zrepro, and real DeepSpeed's with Hugging Face's model
// on the same GPU. Without a GPU:
//   - the record is what its figures say: every stored error is the ratio of its stored
//     figures (a hand-edited number fails);
//   - today's `zrepro plan --device cuda` for every recorded case is within 3% of real
//     DeepSpeed's measured peak in every phase and over the run, but for the gaps named in
//     kKnownGaps, each held to its figure (the gap may close, not widen);
//   - the replan beside the record (NAME.replan.json, the band `zrepro plan` prints) is
//     today's plan: it cannot go stale;
//   - today's plan is no further from the recorded zrepro CUDA run than the recorded plan
//     was, plus a slack (0.5 points on the record's LibTorch release, 6 on another: the
//     activation tapes differ between releases), unless that run predates an engine
//     change (kSuperseded).
#include <algorithm>
#include <cmath>
#include <map>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/plan_phases.h"
#include "tests/support/process.h"

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// How much further from a measured figure today's plan may be than the recorded plan was
// (a fraction of the figure), on the record's LibTorch release and on another one.
constexpr double kSlackSameLibTorch = 0.005;
constexpr double kSlackOtherLibTorch = 0.06;

// "2.11" of "2.11.0": the release the activation tapes follow.
std::string major_minor(const std::string& v) { return v.substr(0, v.find('.', v.find('.') + 1)); }

// (Appended, not `std::string(...) + "..."`: GCC 12 warns falsely about that rvalue concatenation.)
std::string results_dir() { return std::string(ZREPRO_SOURCE_DIR).append("/conformance/results/gpu"); }

std::vector<std::string> records() {
  std::vector<std::string> names;
  if (fs::is_directory(results_dir()))
    for (const auto& e : fs::directory_iterator(results_dir()))
      if (e.path().extension() == ".json" && e.path().stem().extension() != ".replan")  // a replan is not a record
        names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

json load(const std::string& name) {
  std::ifstream in(results_dir() + "/" + name + ".json");
  return json::parse(in);
}

// (x - ref) / ref, as fidelity.py's rel(); null when either is missing.
json rel(const json& x, const json& ref) {
  if (x.is_null() || ref.is_null() || ref.get<double>() == 0) return nullptr;
  return (x.get<double>() - ref.get<double>()) / ref.get<double>();
}

class GpuRecord : public testing::TestWithParam<std::string> {};

TEST_P(GpuRecord, StoredErrorsAreTheRatiosOfStoredFigures) {
  const json rec = load(GetParam());
  ASSERT_FALSE(rec["cases"].empty());
  const std::vector<std::array<const char*, 3>> pairs = {{"plan_vs_zrepro_cuda", "plan", "zrepro_cuda"},
                                                         {"plan_vs_deepspeed", "plan", "deepspeed"},
                                                         {"zrepro_cuda_vs_deepspeed", "zrepro_cuda", "deepspeed"},
                                                         {"cpu_vs_cuda", "cpu_emulated", "zrepro_cuda"}};
  for (const auto& c : rec["cases"])
    for (const auto& row : c["phases"])
      for (const auto& [err, x, ref] : pairs) {
        const json want = rel(row[x], row[ref]);
        const std::string where = c["name"].get<std::string>() + " " + row["phase"].get<std::string>() + " " + err;
        if (want.is_null()) {
          EXPECT_TRUE(row[err].is_null()) << where;
        } else {
          ASSERT_FALSE(row[err].is_null()) << where;
          EXPECT_NEAR(row[err].get<double>(), want.get<double>(), 1e-9) << where;
        }
      }
}

// Figures of zrepro_cuda a deliberate engine change has outdated since the record: today's
// plan is not compared with them (DeepSpeed's are, still) until a GPU session reruns
// scripts/gpu-check.sh. Each names the change; "*" matches every case or phase.
struct Superseded {
  const char* case_name;
  const char* phase;
  const char* why;
};
const Superseded kSuperseded[] = {
    {"gpt2-bf16-z2-offopt", "init",
     "2026-12-05: stages 1-2 under offload_optimizer allocate DeepSpeed's device buffer of the largest parameter "
     "(temp_grad_buffer_for_gpu_offload; zero/schedule/offload_plan.h), 77 MB for gpt2's embedding: the recorded "
     "zrepro_cuda run predates it, DeepSpeed's measured init includes it"},
    {"*", "*",
     "2026-12-06: the engine follows DeepSpeed 0.19.8's timeline (zero/schedule/step_schedule.h: Adam's moments at "
     "the first step, gradients of stages 0-2 only from the first reduction to the step, the step's flat fp32 "
     "gradient, the module flattened on the device) and Hugging Face's GPT-2 ops (gelu_new, the eager softmax in "
     "the compute dtype): every recorded zrepro_cuda figure predates it"},
};

bool superseded(const std::string& name, const std::string& phase, const std::string& measured) {
  if (measured != "zrepro_cuda") return false;
  for (const Superseded& s : kSuperseded)
    if ((std::string(s.case_name) == "*" || name == s.case_name) && (std::string(s.phase) == "*" || phase == s.phase))
      return true;
  return false;
}

// Where today's plan is still more than kBand from real DeepSpeed, and why: the gap is held
// to its figure (plus 0.5 points) so it can close but not widen.
constexpr double kBand = 0.03;
struct KnownGap {
  const char* case_name;
  const char* phase;
  double error;  // (plan - DeepSpeed) / DeepSpeed today
  const char* why;
};
const KnownGap kKnownGaps[] = {
    {"gpt2-fp32-z0", "init", -0.237,
     "Hugging Face's from_config builds GPT-2's LM head weight (vocab x hidden, 154 MB in fp32) before it ties it "
     "to the embedding: a construction transient of the record's randomly initialised model that zrepro does not "
     "model (from_pretrained loads onto the meta device first)"},
    {"llama-toy-bf16-z2-sdpa", "forward", 0.032,
     "sdpa: zrepro's tapes are recorded on the CPU from its own memory-efficient attention; CUDA's flash kernel "
     "keeps a little less per layer (docs/lab/GPU.md)"},
};

const KnownGap* known_gap(const std::string& name, const std::string& phase) {
  for (const KnownGap& g : kKnownGaps)
    if (name == g.case_name && phase == g.phase) return &g;
  return nullptr;
}

// Today's `zrepro plan --device cuda` of a recorded case (tests/support/plan_phases.h).
std::map<std::string, double> replan(const json& c) { return zrepro_test::plan_phases(c, "cuda"); }

TEST_P(GpuRecord, TodaysPlanIsWithinThreePercentOfRealDeepSpeed) {
  const json rec = load(GetParam());
  int compared = 0;
  for (const auto& c : rec["cases"]) {
    std::map<std::string, double> ds;
    for (const auto& row : c["phases"])
      if (!row["deepspeed"].is_null()) {
        ds[row["phase"]] = row["deepspeed"].get<double>();
        ds["peak"] = std::max(ds["peak"], row["deepspeed"].get<double>());
      }
    if (ds.empty()) continue;
    const std::map<std::string, double> today = replan(c);
    for (const auto& [phase, m] : ds) {
      if (!today.count(phase)) continue;
      const double e = (today.at(phase) - m) / m;
      const KnownGap* gap = known_gap(c["name"], phase);
      if (gap) {
        EXPECT_LE(std::abs(e), std::abs(gap->error) + 0.005) << c["name"] << " " << phase << ": " << gap->why;
      } else {
        EXPECT_LE(std::abs(e), kBand) << c["name"] << " " << phase << ": today's plan " << today.at(phase)
                                      << " bytes against DeepSpeed's measured " << m << " (" << 100 * e << "%)";
      }
      ++compared;
    }
  }
  EXPECT_GT(compared, 0);
}

// The caching allocator's reserved peak, the plan's emulated replay against DeepSpeed's
// torch.cuda.max_memory_reserved (the replan's reserved_peak rows, docs/lab/GPU.md): compared,
// not held to 3% (the verdict binds on allocated bytes), but it may close, not widen, past the
// band measured when the comparison was added (2026-12-06: -15.4% .. +4.8% over 12 cases).
TEST_P(GpuRecord, TheReservedPeakStaysInItsMeasuredBand) {
  std::ifstream in(results_dir() + "/" + GetParam() + ".replan.json");
  ASSERT_TRUE(in);
  const json rep = json::parse(in);
  int rows = 0;
  for (const auto& r : rep["rows"]) {
    if (r["phase"] != "reserved_peak") continue;
    const double e = r["plan_vs_deepspeed"].get<double>();
    EXPECT_GE(e, -0.154 - 0.005) << r["case"] << ": the reserved peak moved further below DeepSpeed's";
    EXPECT_LE(e, 0.048 + 0.005) << r["case"] << ": the reserved peak moved further above DeepSpeed's";
    ++rows;
  }
  EXPECT_EQ(rows, 12) << "python3 conformance/gpu/fidelity.py replan --json conformance/results/gpu/" << GetParam()
                      << ".replan.json";
}

TEST_P(GpuRecord, TheReplanBesideTheRecordIsTodaysPlan) {
  std::ifstream in(results_dir() + "/" + GetParam() + ".replan.json");
  ASSERT_TRUE(in) << GetParam() << ".replan.json is missing: python3 conformance/gpu/fidelity.py replan --json "
                  << "conformance/results/gpu/" << GetParam() << ".replan.json";
  const json rep = json::parse(in);
  const json rec = load(GetParam());
  std::map<std::string, std::map<std::string, double>> today;
  for (const auto& c : rec["cases"]) today[c["name"]] = replan(c);
  // A replan made with another LibTorch's tapes may differ by their activations.
  const json env = json::parse(zrepro_test::zrepro_cmd("env --json", 60, false).output);
  const double slack = rep["libtorch"] == env["libtorch"]["version"] ? 1e-9 : kSlackOtherLibTorch;
  int rows = 0;
  for (const auto& r : rep["rows"]) {
    const auto& t = today[r["case"].get<std::string>()];
    const std::string phase = r["phase"];
    ASSERT_TRUE(t.count(phase)) << r.dump();
    EXPECT_NEAR(r["plan"].get<double>(), t.at(phase), slack * t.at(phase))
        << r["case"] << " " << phase << ": the replan is stale; python3 conformance/gpu/fidelity.py replan --json "
        << "conformance/results/gpu/" << GetParam() << ".replan.json";
    ++rows;
  }
  EXPECT_GT(rows, 0);
}

TEST_P(GpuRecord, TodaysPlanIsNoFurtherFromTheGpuThanRecorded) {
  const json rec = load(GetParam());
  const auto env = zrepro_test::zrepro_cmd("env --json", 60, /*keep_stderr=*/false);
  ASSERT_EQ(env.code, 0) << env.output;
  const std::string ours = json::parse(env.output)["libtorch"]["version"];
  const std::string theirs = rec["zrepro_env"]["libtorch"]["version"];
  const double slack = major_minor(ours) == major_minor(theirs) ? kSlackSameLibTorch : kSlackOtherLibTorch;
  int compared = 0;
  for (const auto& c : rec["cases"]) {
    if (c["plan"].is_null() || !c["plan"].contains("phases")) continue;
    const std::map<std::string, double> today = replan(c);
    for (const auto& row : c["phases"]) {
      const std::string phase = row["phase"];
      if (!today.count(phase) || row["plan"].is_null()) continue;
      for (const char* measured : {"zrepro_cuda", "deepspeed"}) {
        if (row[measured].is_null() || superseded(c["name"], phase, measured)) continue;
        const double m = row[measured].get<double>();
        const double then = std::abs(row["plan"].get<double>() - m) / m;
        const double now = std::abs(today.at(phase) - m) / m;
        EXPECT_LE(now, then + slack) << c["name"] << " " << phase << ": today's plan " << today.at(phase)
                                      << " bytes against " << measured << "'s measured " << m << " (recorded plan "
                                      << row["plan"] << " with LibTorch " << theirs << ", " << then * 100
                                      << "% off; now " << now * 100 << "% with LibTorch " << ours << ")";
        ++compared;
      }
    }
  }
  EXPECT_GT(compared, 0) << "no recorded case had both a plan and a measured figure";
}

INSTANTIATE_TEST_SUITE_P(Recorded, GpuRecord, testing::ValuesIn(records()), zrepro_test::param_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GpuRecord);

}  // namespace
