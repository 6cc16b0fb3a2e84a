// docs/reference/ab-json.md from the AbDocument type (ab_doc.h): its field table, an
// example with every field set (what the table must cover) and the page's text.
#include <sstream>

#include "trainer/report/ab_doc.h"

namespace zrepro {

namespace {

std::vector<FieldDoc> ab_docs() {
  return {
      {{"schema"}, std::string("`") + kAbSchema + "`: what this page describes"},
      {{"plan_only"}, "`--plan-only`: the sides are `zrepro plan --json` outputs, not runs"},
      {{"expect"}, "`--expect` as given (`failure` by default; `zrepro ab --help` lists the forms)"},
      {{"outcome"}, "`fixed`, `not fixed`, `nothing to fix`, `incomplete` (a side left no summary or was interrupted) "
                    "or `interrupted` (the comparison itself); a scaled-down comparison whose margin at target is inside "
                    "the planner's band against real DeepSpeed adds \"on the toy; at target inside the planner's band, not called\""},
      {{"exit_code"}, "`zrepro ab`'s exit code (docs/reference/exit-codes.md)"},
      {{"message"}, "an interrupted comparison's signal; null otherwise (then nothing else is filled)"},
      {{"rows[].side", "rows[].ranks", "rows[].exit_code", "rows[].log"}, "the run: side A or B, its rank count, its exit code and log file"},
      {{"rows[].status"}, "the summary's status, `no summary`, or under --plan-only `oom (planned)` / `fits (planned)`"},
      {{"rows[].phase", "rows[].checkpoint"}, "the failure's phase and diagnosis checkpoint; null without one"},
      {{"rows[].failed_ranks", "rows[].steps", "rows[].final_loss"}, "ranks that ended with a failure, optimizer steps run, the last loss"},
      {{"rows[].step_s_median", "rows[].tokens_per_s"}, "median step time and throughput"},
      {{"rows[].comm_wait_share", "rows[].offload_copy_share", "rows[].data_wait_share"}, "each part's share of the accounted time"},
      {{"rows[].comm_wait_s_max", "rows[].straggler_rank"}, "the largest per-rank collective wait; the straggler the summary names"},
      {{"rows[].device_busy_fraction", "rows[].overlap_ratio", "rows[].offload_wait_s_per_step"},
       "rank 0's offload: the device's busy fraction, the copies' overlap, the host-link wait per step"},
      {{"rows[].capacity_bytes", "rows[].peak_bytes_max", "rows[].peak_bytes_spread", "rows[].peak_share_of_capacity"},
       "device memory: capacity (null: none), the highest rank's peak, its spread to the lowest, the share of capacity"},
      {{"rows[].by_category.*"}, "bytes by category at the highest rank's peak (the plan's under --plan-only)"},
      {{"rows[].alloc_retries_per_step"}, "the caching allocator's cache flushes per step, the most any rank had"},
      {{"rows[].target_peak_bytes_max", "rows[].target_capacity_bytes"}, "a scaled-down side at target scale: the toy's peak and capacity times the parameter factor"},
      {{"rows[].target_planned_peak_bytes", "rows[].target_planned_verdict", "rows[].target_model"}, "the planner's peak and verdict for the target model"},
      {{"rows[].target_limits"}, "each limit the side was given (--host-memory, --memlock-limit, --zero-to-fp32-shard) against the target's need at target scale, or null"},
      {{"rows[].target_band.*"}, "the target plan against the planner's measured band (real DeepSpeed's peak range); null without a GPU record"},
      {{"rows[].fidelity_worst.category", "rows[].fidelity_worst.toy_share", "rows[].fidelity_worst.target_share", "rows[].fidelity_worst.off_points", "rows[].fidelity_ok"},
       "the toy category whose share of capacity is furthest from the target's, and whether it is within 5 points"},
      {{"rows[].rank_memory[].rank", "rows[].rank_memory[].peak_bytes", "rows[].rank_memory[].peak_phase", "rows[].rank_memory[].by_category.*", "rows[].rank_memory[].host_pinned_bytes"},
       "every rank's peak, its phase and categories, its pinned host bytes"},
      {{"rows[].rank_time[].rank", "rows[].rank_time[].comm_wait_s", "rows[].rank_time[].step_s"}, "every rank's median collective wait and step"},
      {{"rows[].device", "rows[].planned_peak_bytes", "rows[].parameter_factor"}, "the summary's device, the plan's peak for the run, the scale-down factor"},
      {{"rows[].host_link_gbps", "rows[].interconnect_busbw_gbps"}, "the emulated links a timing verdict rests on (null: this machine's own speed)"},
      {{"rows[].failure.kind", "rows[].failure.rank", "rows[].failure.message", "rows[].failure.hint"}, "the side's failure as its summary wrote it; `failure` null without one"},
      {{"rows[].failure.needed_bytes", "rows[].failure.memlock_limit_bytes", "rows[].failure.locked_bytes"}, "a pinned-memory failure's bytes against the memlock limit"},
      {{"rows[].failure.hang.*"}, "a hang's diagnosis (summary-json.md: `failure.hang`)"},
      {{"comparisons[].ranks", "comparisons[].verdict"}, "one verdict per rank count"},
      {{"comparisons[].a_shows_symptom", "comparisons[].b_fails"}, "what the verdict decided"},
      {{"comparisons[].max_loss_rel_diff", "comparisons[].max_grad_norm_rel_diff"}, "the largest relative difference between A and B over their common steps"},
      {{"comparisons[].target_inside_band"}, "a scaled-down side's margin at target is inside the planner's band"},
      {{"equivalence[].side", "equivalence[].ranks", "equivalence[].line"}, "a side's larger rank count against its first: `ranks` is [first, this]"},
      {{"equivalence[].holds", "equivalence[].max_loss_rel_diff"}, "whether the equivalence rules hold (null: a run failed) and the loss difference (null: different global batches)"},
      {{"equivalence[].model_states.*"}, "per model state (`params`, `grads`, `optimizer_states`): `measured`, `expected` and `holds`"},
      {{"loss_curves.*", "grad_norm_curves.*"}, "per run (\"A x2\"), the per-step loss and grad norm (null where not finite)"},
  };
}

}  // namespace

const std::vector<FieldDoc>& ab_field_docs() {
  static const std::vector<FieldDoc> docs = ab_docs();
  return docs;
}

AbDocument ab_example() {
  AbRow r;
  r.side = "A", r.status = "oom", r.log = "A_r1.log";
  r.phase = r.checkpoint = r.target_planned_verdict = r.target_model = r.target_limits = r.device = "x";
  r.failed_ranks = 1, r.steps = 1, r.straggler_rank = 0;
  r.final_loss = r.step_s_median = r.tokens_per_s = r.comm_wait_share = r.offload_copy_share = r.data_wait_share =
      r.comm_wait_s_max = r.device_busy_fraction = r.overlap_ratio = r.offload_wait_s_per_step = r.capacity_bytes =
          r.peak_bytes_max = r.peak_bytes_spread = r.peak_share_of_capacity = r.alloc_retries_per_step =
              r.target_peak_bytes_max = r.target_capacity_bytes = r.target_planned_peak_bytes = r.planned_peak_bytes =
                  r.parameter_factor = r.host_link_gbps = r.interconnect_busbw_gbps = 1.0;
  r.by_category = SummaryCategories{{"params", 1}};
  r.target_band = BandCall{};
  r.fidelity_worst = AbFidelityWorst{"params", 0.1, 0.2, 10};
  r.fidelity_ok = false;
  r.rank_memory = {AbRankMemory{0, 1, "step", {{"params", 1}}, 0}};
  r.rank_time = {SummaryRankTime{0, 0.1, 0.2}};
  AbFailure f;
  f.kind = "hang", f.needed_bytes = f.memlock_limit_bytes = f.locked_bytes = 1;
  f.hang = HangDiagnosis{};
  r.failure = f;
  AbDocument d;
  d.outcome = "fixed", d.message = "x";
  d.rows = {r};
  d.comparisons = {AbComparison{1, true, false, false, 0.0, 0.0, "v"}};
  d.equivalence = {AbEquivalence{"A", 1, 2, true, 0.0, {{"params", AbStateCheck{1, 1, true}}}, "l"}};
  d.loss_curves = d.grad_norm_curves = {{"A x1", {1.0}}};
  return d;
}

std::string ab_reference_page() {
  return reference_page(
      "ab.json",
      "What `zrepro ab` (and `zrepro scenario run`) writes beside ab.html: the verdict of side A (the failing "
       "setup) against side B (the fix) at each rank count, what it rests on, and every run's figures. One C++ "
       "type, AbDocument (trainer/report/ab_doc.h), writes and reads it: every field below is always present, "
       "null where the run did not say. This page is generated from the type's field table "
       "(trainer/report/ab_doc_page.cpp); tests/trainer/report/ab_doc_test.cpp fails when a field of the type has "
       "no row or the page is not this text (`ZREPRO_WRITE_AB_DOC=1 build/zrepro_unit_tests "
       "--gtest_filter=AbDoc.*` rewrites it).",
      kAbSchema, ab_field_docs());
}

}  // namespace zrepro
