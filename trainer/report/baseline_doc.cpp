// docs/reference/baseline-json.md from the Baseline type (baseline.h): its field table, an
// example with every field set (what the table must cover) and the page's text.
#include "trainer/report/baseline.h"

namespace zrepro {

const std::vector<FieldDoc>& baseline_field_docs() {
  static const std::vector<FieldDoc> docs = {
      {{"zrepro_baseline"}, "the baseline format (1); a file of another format is refused"},
      {{"from", "status"}, "the run folder it was saved from, and that run's status (`ok`, or the failure a baseline of a "
                           "failure keeps)"},
      {{"world_size", "zero_stage", "precision", "deepspeed_version", "skipped_steps", "model"},
       "the run's setup (null when it never resolved); compared exactly"},
      {{"env"}, "`zrepro env --json` of the machine that ran it (docs/reference/cli.md `env`): versions a move is "
                "blamed on"},
      {{"inputs.args", "inputs.config_file", "inputs.config"}, "what the run was asked: its arguments, the config "
                                                               "file and its JSON as written (null: an older baseline)"},
      {{"steps", "loss", "grad_norm"}, "the steps run and the per-step loss and grad norm (null where not finite)"},
      {{"memory.ranks[].rank", "memory.ranks[].by_category.*"}, "every rank's peak bytes per category"},
      {{"memory.ranks[].host.*"}, "its pinned and pageable host bytes (absent: an older baseline)"},
      {{"memory.ranks[].growth.*"}, "bytes per step each category grew after warm-up (null: too few steps)"},
      {{"memory.peak_bytes"}, "the highest rank's peak"},
      {{"comm_bytes_per_step.*"}, "rank 0's collective bytes per step, by op"},
      {{"time.step_s_median", "time.calibration_s", "time.ratio", "time.spread", "time.source"},
       "the median step, the machine's calibration kernel, their ratio (what is compared), the steps' spread, and "
       "whether the calibration was timed during the run or at check time"},
      {{"effective_config.*"}, "every resolved config key: its `value`, `source` and `note` (absent: an older "
                               "baseline)"},
      {{"plan_over_measured"}, "the planner's peak over the measured one (absent without a plan)"},
  };
  return docs;
}

Baseline baseline_example() {
  Baseline b;
  b.from = "out", b.status = "ok";
  b.world_size = 2, b.zero_stage = 2, b.skipped_steps = 0;
  b.precision = "bf16", b.deepspeed_version = "0.19.8", b.model = "tiny";
  b.env = nlohmann::json::object();
  b.inputs = SummaryInputs{{"--steps", "3"}, "ds.json", nlohmann::json::object()};
  b.steps = 1, b.loss = {2.0}, b.grad_norm = {1.0};
  b.ranks = {BaselineRank{0, {{"params", 1}}, SummaryCategories{{"pinned", 1}}, std::map<std::string, double>{{"params", 0}}}};
  b.peak_bytes = 1;
  b.comm_bytes_per_step = {{"all_reduce", 1}};
  b.effective_config = std::map<std::string, BaselineConfigValue>{{"train_batch_size", {2, "file", ""}}};
  b.plan_over_measured = 1.0;
  b.time = BaselineTime{0.1, 0.01, 10, 0.05, "during the run"};
  return b;
}

std::string baseline_reference_page() {
  return std::string("# baseline.json\n\n") +
         "What `zrepro check --save FILE` writes and `zrepro check --baseline FILE` reads: one run's figures, "
         "compared against a later run's with each figure's tolerance (docs/guide/check.md). One C++ type, Baseline "
         "(trainer/report/baseline.h), writes and reads it; a file of another format, or with a key of the wrong "
         "type, is refused naming the key. This page is generated from the type's field table "
         "(trainer/report/baseline_doc.cpp); tests/trainer/report/baseline_test.cpp fails when a field of the type "
         "has no row or the page is not this text (`ZREPRO_WRITE_BASELINE_DOC=1 build/zrepro_unit_tests "
         "--gtest_filter=BaselineDoc.*` rewrites it). Instead of a `schema` key it carries `zrepro_baseline`, its "
         "format number; the number changes when a field is removed or changes meaning.\n\n" +
         field_table_markdown(baseline_field_docs());
}

}  // namespace zrepro
