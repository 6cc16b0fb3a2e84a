// See summary_doc.h.
#include "trainer/report/summary_doc.h"

#include <sstream>

namespace zrepro {

namespace {

const char* const kReport = "report.cpp (build_summary)";

std::vector<SummaryFieldDoc> field_docs() {
  return {
      {"The run", {"schema"}, std::string("`") + kSummarySchema + "`: what this page describes", ""},
      {"The run", {"status"}, "`ok`, `oom`, `host_oom`, `hang`, `diverged`, `config_error`, `pinned_memory`, `io_error`, `interrupted`, `error`", ""},
      {"The run", {"world_size", "zero_stage", "precision", "device"},
       "the job; `device` says cpu (cores, intra-op threads, allocator) or cuda; null until the config resolved", ""},
      {"The run", {"deepspeed_version"}, "the DeepSpeed release whose semantics the config was resolved with (`--deepspeed-version`)", ""},
      {"The run", {"skipped_steps"}, "optimizer steps the fp16 loss scaler skipped; absent when no training started", ""},
      {"The run", {"batch.micro", "batch.grad_accum", "batch.global"}, "the batch triple", ""},
      {"The run", {"model.*"}, "`name`, `family`, `model_type`, `params`, `layers`, `hidden`, `heads`, `intermediate`, `seq`, `vocab`, `attention`, `tied`; `positions` (GPT-2's learned position table), `activation` (GPT-2 family: `gelu_new`, `gelu` or `gelu_pytorch_tanh`), `attention_tile` (sdpa), `softmax` (eager: `fp32` or `compute dtype`, as Hugging Face's module of the family takes it), `experts` (MoE: `count`, `per_token`, `intermediate`, `shared_intermediate`, `norm_topk_prob`, `active_params`, `router_aux_loss_coef` (null unless output_router_logits adds the router's load-balancing loss); in a run `fetched`: expert by expert or with their block, and `fetched_why`), `assumed` (where the attention and the sequence length came from: a config.json key, a flag, transformers' default)", "model_spec.h (ModelSpec::to_json)"},
      {"The run", {"data.*"}, "`kind` and `entropy_floor_nats` (the synthetic data and the lowest loss it allows); `seq_len_dist` (`fixed` or `uniform:MIN-MAX`, --seq-len-dist); `loss_normalization`: `kind` (mean, token, token-per-rank, token-scaled-twice) and `as` (the Trainer releases that normalise so); `loader`: the emulated loader's `workers`, `prefetch_factor`, `pin_memory`, `pinned_bytes_peak`, `sample_ms_emulated`", kReport},
      {"The run", {"effective_config.*"}, "the resolved DeepSpeed config: `entries` (every key, its value and source), `resolved`, `warnings`, `assumed` (what the file leaves to the script and zrepro runs instead), `file`, `world_size`", "ds_config.h (DsConfig::effective_json)"},
      {"The run", {"env.*"}, "this build and machine, as `zrepro env --json`", "environment.h (Environment::to_json)"},
      {"The run", {"inputs.*"}, "what the run was asked: `args`, its arguments (`--out` left out, `--ranks N` added when several processes ran), `config_file`, the config file's path, and `config`, its JSON as written; null in an older zrepro's summary. `zrepro check` reruns with them", "app/run_spec.h (run_inputs)"},
      {"The run", {"checkpoint.*"}, "with `--save-every` / `--resume` (absent otherwise): `format`, `save_every`, `save_dir`, `saved` (each checkpoint written: `step` = global_steps, `folder`, `seconds`, `consolidated_16bit_host_bytes`: with ZeRO-3 and stage3_gather_16bit_weights_on_model_save the whole 16-bit model rank 0 held on the host for pytorch_model.bin, else 0), `resumed` (`folder`, `tag`, `step`: the steps done in it, the run's first step is the next; `universal`: read from ds_to_universal's layout under checkpoint.load_universal) or null, `zero_to_fp32` (with `--zero-to-fp32`: `mode` script or api, `max_shard_bytes`, `tag`, `files`, `parameters`, `numel`, `peak_anon_host_bytes`: DeepSpeed's anonymous host memory at its peak as zrepro models it, `mapped_bytes`: the fp32 partitions it maps, file-backed) or null", "trainer/checkpoint/ds_checkpoint.h"},
      {"The run", {"virtual_ranks.*"}, "`--world-size` in one process: `world_size`, `as_rank`, `data_rule`, `peers` (run / stand-in), `note` (what is exact); with every rank running the peers' host bytes; with stood-in peers `peer_values` and `stand_in` (the peers' model checked against the subject's own: `exact`, `gathers_checked`, `gathers_equal`, `norms_checked`, `norms_equal`, `first_difference`); absent otherwise", "app/run.cpp (virtual ranks)"},
      {"The run", {"config_mismatch"}, "ranks whose effective configs differ; absent when they agree", kReport},
      {"The run", {"scale_down.*"}, "a scaled-down toy (`--target-model`): `target_model`, `toy_model`, `parameter_factor`, `target_planned`, `fidelity[]` (each category's share of capacity at target and toy scale), `limits[]` (each limit given, `--host-memory`, `--memlock-limit`, `--zero-to-fp32-shard`: what it bounds, the limit and the need at target and toy scale, `fits_at_target`); absent otherwise", "planner/scale_down.h (ScaleDown::to_json)"},
      {"Steps", {"steps[].step"}, "the optimizer step (0-based)", ""},
      {"Steps", {"steps[].loss"}, "mean loss over the global batch; null when not finite", ""},
      {"Steps", {"steps[].grad_norm"}, "global gradient norm before clipping; null when not finite (a skipped step's)", ""},
      {"Steps", {"steps[].loss_scale"}, "fp16's loss scale (1 otherwise)", ""},
      {"Steps", {"steps[].skipped"}, "the loss scaler skipped the step", ""},
      {"Steps", {"steps[].lr"}, "the learning rate the step used", ""},
      {"Steps", {"steps[].step_s"}, "the step's wall time in seconds (rank 0's); absent in summaries before 2026-12-05", ""},
      {"Steps", {"steps[].replicas_identical"}, "`--verify-replicas`: every rank's replica of the parameters was bit-identical after the step; absent when not checked", ""},
      {"Time", {"time.step_s_median", "time.tokens_per_s"}, "median step time and throughput (all ranks); null without a step", ""},
      {"Time", {"time.breakdown_s.*"}, "seconds of the whole run by part: `forward`, `backward`, `comm_wait`, `optimizer`, `offload_copy`, `data_wait`", ""},
      {"Time", {"time.ranks[].rank", "time.ranks[].step_s", "time.ranks[].comm_wait_s"}, "each rank's median step and collective wait", ""},
      {"Time", {"time.straggler.rank", "time.straggler.others_wait_s", "time.straggler.own_wait_s"}, "null, or the rank the others waited for: their mean collective wait and its own", ""},
      {"Time", {"time.calibration.kernel", "time.calibration.samples", "time.calibration.median_s", "time.calibration.spread"},
       "the calibration kernel timed between steps (this machine's speed during the run): what it is, how many timings, their median and relative spread (interquartile range over median); null without a step past warm-up", "loop/calibration.h"},
      {"Time", {"time.calibration.steps", "time.calibration.step_s_median", "time.calibration.step_spread", "time.calibration.step_over_calibration"},
       "the steps after warm-up: how many, their median and relative spread, and that median over the kernel's (what `zrepro check` compares)", "loop/calibration.h"},
      {"Memory", {"memory.device_capacity_bytes"}, "the device's capacity (null: unlimited)", ""},
      {"Memory", {"memory.ranks[].rank"}, "the rank", ""},
      {"Memory", {"memory.ranks[].peak_bytes", "memory.ranks[].peak_phase"}, "the peak of allocated device bytes and the phase it came in", ""},
      {"Memory", {"memory.ranks[].peak_reserved_bytes"}, "the peak of reserved bytes (the caching allocator's segments)", ""},
      {"Memory", {"memory.ranks[].by_category.*"}, "bytes by category at the peak: `params`, `grads`, `optimizer_states`, `activations`, `comm_buffers`, `other`", ""},
      {"Memory", {"memory.ranks[].category_peaks.*"}, "each category's own peak", ""},
      {"Memory", {"memory.ranks[].model_states.*"}, "the engine's own byte counts of its persistent states: `params`, `grads`, `optimizer_states`", ""},
      {"Memory", {"memory.ranks[].phases[].phase", "memory.ranks[].phases[].peak_bytes", "memory.ranks[].phases[].peak_reserved_bytes"}, "the peak of each phase (`init`, `partition`, `forward`, `backward`, `step`)", ""},
      {"Memory", {"memory.ranks[].host_pinned_bytes", "memory.ranks[].host_pageable_bytes"}, "offload's host memory", ""},
      {"Memory", {"memory.ranks[].comm_wait_s"}, "the rank's collective wait", ""},
      {"Memory", {"memory.ranks[].alloc_retries"},
       "PyTorch's `num_alloc_retries` over the run: allocations that found no room, flushed the caching allocator's "
       "cache and tried again (the count behind DeepSpeed's \"pytorch allocator cache flushes since last step\" "
       "warning; 0 with the tracking allocator)",
       ""},
      {"Memory", {"memory.ranks[].growth_bytes_per_step.*"}, "bytes per step each category (and `total`) grew by after the first 2 steps, the least-squares slope of its bytes at step ends: a leak is a positive slope; empty with fewer than 5 steps", kReport},
      {"Memory", {"memory.timeline[].step", "memory.timeline[].phase", "memory.timeline[].peak_bytes", "memory.timeline[].by_category.*"},
       "rank 0's device memory over the run: for each step and phase (`init` and `partition` with the first step) the most bytes held in it and their categories at that moment; at most 400 points (the first and last 200); empty where the tracking allocator does not see allocations (CUDA)", "device/device_memory.h [Note: phase windows]"},
      {"Memory", {"memory.timeline[].unfinished"}, "true on the phase a failed run ended in (its last point), absent otherwise", ""},
      {"Memory", {"memory.planned.*"}, "`zrepro plan`'s prediction for the same run (`peak_bytes`, `peak_phase`, `by_category`, `category_peaks`, `phases`, `model_states`, `verdict`, `oom_phase`, `deepspeed_estimates`, host bytes, `pinned_fits`, ...: docs/guide/plan.md); absent when not planned", "planner/planner.h (MemoryPlan::to_json)"},
      {"Collectives", {"comm.bytes_per_step.*"}, "bytes one rank sends or receives per optimizer step, by collective (`all_reduce`, `reduce_scatter`, `all_gather`, `broadcast`); null without a step", ""},
      {"Collectives", {"comm.paired_different_parameters.*"}, "`count`: collectives whose op, dtype and size agreed across ranks but which the ranks issued for different parameters (a MoE rank gathering one expert while another gathers another of the same size: no backend notices, each rank assembles a mix); `first`: the first, with what this rank issued", "zero/comm/communicator.h ([Note: collectives that paired different parameters])"},
      {"Collectives", {"comm.ops.*"}, "per collective: `calls_per_step`, `bytes_per_step`, `seconds_per_step`, `algbw_GBps` and `busbw_GBps` (nccl-tests' convention)", kReport},
      {"Collectives", {"comm.modelled_busbw_GBps"}, "the emulated link bandwidth, when one was set (`--interconnect-gbps`)", ""},
      {"Offload", {"offload"}, "null without offload; otherwise the fields below", kReport},
      {"Offload", {"offload.offload_optimizer.*", "offload.offload_param.*"}, "`device`, `pin_memory`, `ratio` as resolved", kReport},
      {"Offload", {"offload.host_link_gbps", "offload.pageable_ratio"}, "the emulated host link and the pageable copies' share of it", kReport},
      {"Offload", {"offload.ranks[].rank"}, "the rank", kReport},
      {"Offload", {"offload.ranks[].d2h_bytes", "offload.ranks[].h2d_bytes"}, "bytes copied to and from the host per run", kReport},
      {"Offload", {"offload.ranks[].copy_s", "offload.ranks[].d2h_copy_s", "offload.ranks[].h2d_copy_s"}, "time the link was busy", kReport},
      {"Offload", {"offload.ranks[].exposed_s", "offload.ranks[].d2h_exposed_s", "offload.ranks[].h2d_exposed_s"}, "copy time the step waited for", kReport},
      {"Offload", {"offload.ranks[].overlapped_s", "offload.ranks[].overlap_ratio"}, "copy time hidden behind compute", kReport},
      {"Offload", {"offload.ranks[].device_busy_fraction"}, "the share of the step the device computed", kReport},
      {"Offload", {"offload.ranks[].host_pinned_bytes", "offload.ranks[].host_pageable_bytes"}, "host memory by kind", kReport},
      {"Failure", {"failure.kind"}, "as `status`; the exit code follows it (docs/reference/exit-codes.md)", ""},
      {"Failure", {"failure.rank", "failure.phase"}, "where it happened", ""},
      {"Failure", {"failure.message"}, "the line a user greps for (PyTorch's OOM message, NCCL's timeout, ...)", ""},
      {"Failure", {"failure.checkpoint"}, "the diagnosis checkpoint (docs/design/SPECIFICATION.md)", ""},
      {"Failure", {"failure.hint"}, "what to try, with the planner's fixes", ""},
      {"Failure", {"failure.ranks[].rank", "failure.ranks[].status", "failure.ranks[].kind", "failure.ranks[].phase", "failure.ranks[].message", "failure.ranks[].checkpoint", "failure.ranks[].allocated_bytes", "failure.ranks[].capacity_bytes"}, "several processes: each failing rank's own view (`summary_rank<r>.json`), the fields its failure did not carry null", ""},
      {"Failure", {"failure.ranks_reported", "failure.ranks_without_a_view"}, "several processes: the ranks whose view is merged, and those that ended before writing one", ""},
      {"Failure", {"failure.step"}, "an OOM: the optimizer step that was running", "run_failures.cpp (OOM)"},
      {"Failure", {"failure.request_bytes", "failure.allocated_bytes", "failure.reserved_bytes", "failure.capacity_bytes"}, "an OOM: the request and the device's state", "run_failures.cpp (OOM)"},
      {"Failure", {"failure.by_category.*"}, "an OOM: bytes by category when it came", "run_failures.cpp (OOM)"},
      {"Failure", {"failure.planned_fixes[].fix", "failure.planned_fixes[].flags", "failure.planned_fixes[].args", "failure.planned_fixes[].config_patch", "failure.planned_fixes[].fits", "failure.planned_fixes[].peak_bytes", "failure.planned_fixes[].peak_share", "failure.planned_fixes[].trainer_args", "failure.planned_fixes[].cost", "failure.planned_fixes[].cost_rank", "failure.planned_fixes[].parts"}, "an OOM: each usual fix (or, when none fits alone, two together: `parts` 2), planned, with its cost and the Hugging Face Trainer's spelling", "planner/fixes.h"},
      {"Failure", {"failure.planned_fixes_scale"}, "`target` under `--target-model` (the fixes planned on the target: patches and peaks in its units), else `run`", "app/run_failures.cpp"},
      {"Failure", {"failure.hang.*"}, "a hang: `suspects` (most likely first, with their evidence) and every rank's last collectives (docs/guide/run.md \"Hangs\")", "report/hang.h"},
      {"Failure", {"failure.signal", "failure.steps_done"}, "an interruption", "run_failures.cpp (interrupted)"},
      {"Failure", {"failure.peers_gone", "failure.last_collective"}, "a rank that vanished and where the survivor waited", "runtime/liveness.h"},
  };
}

const char* const kIntro =
    "# summary.json\n\n"
    "<!-- Generated from trainer/report/summary_doc.cpp (the Summary type's field table); do not edit by hand.\n"
    "     `ZREPRO_WRITE_SUMMARY_DOC=1 build/zrepro_unit_tests --gtest_filter=SummaryDoc.*` rewrites it. -->\n\n"
    "What `zrepro run` writes to `--out DIR/summary.json` (rank 0 for every rank; under\n"
    "`mpirun`, each rank's own view on a failure: docs/guide/run.md). Bytes are bytes, times\n"
    "seconds, bandwidths GB/s (10^9). `a.b.*` stands for every field under `a.b`, `a[]` for each\n"
    "element of the list `a`.\n\n";

std::string schema_paragraph() {
  return std::string("`schema` names the schema (`") + kSummarySchema +
         "`); zrepro's own readers (`check --run`, `ab`, `verify`, the merge of ranks' views) read a "
         "summary through one typed reader that refuses a summary of another schema, or one without the "
         "field (an older zrepro's), with exit 2 naming the file and both schemas. The number changes when a "
         "field is removed or changes meaning; added fields keep it.\n\n"
         "The C++ type is `Summary` (trainer/report/summary.h): `Summary::from_json` and `to_json` give back "
         "every run's summary field for field (tests/trainer/report/summary_type_mpi_test.cpp over completed, "
         "offloaded, OOM, refused, diverged, virtual-rank, scaled-down, hung and 2-process OOM runs), and every "
         "reader reads the type. This page is generated from the type's field table "
         "(trainer/report/summary_doc.cpp): a field of the type without a row, or a row for a field the type "
         "no longer has, fails tests/trainer/report/summary_doc_test.cpp, and a field a real run writes that "
         "is not here fails tests/trainer/report/summary_reference_process_test.cpp. Parts whose shape another "
         "module owns are JSON in the type; the last column names that module.\n";
}

std::string code_list(const std::vector<std::string>& fields) {
  std::string s;
  for (const auto& f : fields) s += (s.empty() ? "`" : ", `") + f + "`";
  return s;
}

}  // namespace

const std::vector<SummaryFieldDoc>& summary_field_docs() {
  static const std::vector<SummaryFieldDoc> docs = field_docs();
  return docs;
}

Summary summary_example() {
  using json = nlohmann::json;
  Summary s;
  s.schema = kSummarySchema;
  s.status = "oom";
  s.world_size = 2, s.zero_stage = 3, s.precision = "bf16", s.deepspeed_version = "0.19.8", s.device = "cpu";
  s.batch = SummaryBatch{1, 2, 4};
  s.model = s.env = s.data = s.effective_config = json::object();
  s.steps = {SummaryStep{0, 2.0, 1.0, 1, false, 1e-3, 0.5, true}};
  s.skipped_steps = 0;
  s.time = SummaryTime{0.1, 1000.0, {{"forward", 0.1}}, {SummaryRankTime{0, 0.01, 0.1}}, SummaryStraggler{1, 0.5, 0.1},
                       SummaryCalibration{"k", 5, 9, 0.001, 0.1, 0.1, 0.1, 100.0}};
  s.inputs = json{{"args", json::array({"--steps", "3"})}, {"config_file", "ds.json"}, {"config", json::object()}};
  SummaryRankMemory m;
  m.by_category = m.category_peaks = m.model_states = {{"params", 1}};
  m.phases = {SummaryPhasePeak{"forward", 1, 1}};
  m.growth_bytes_per_step = {{"params", 0.0}};
  s.memory = SummaryMemory{100, {m}, {SummaryTimelinePoint{0, "forward", 1, {{"params", 1}}, true}}, json::object()};
  s.comm = SummaryComm{{{"all_gather", 1.0}}, json::object(), 10.0, json()};
  s.offload = json::object();
  SummaryFailure f;
  f.kind = "oom";
  SummaryRankView v;
  v.kind = v.phase = v.message = v.checkpoint = "x";
  v.allocated_bytes = v.capacity_bytes = 1;
  f.views = SummaryRankViews{{v}, {0}, {1}};
  s.failure = f;
  s.virtual_ranks = s.scale_down = json::object();
  s.config_mismatch = json::array();
  return s;
}

std::string summary_reference_page() {
  std::ostringstream o;
  o << kIntro << schema_paragraph();
  std::string section;
  for (const auto& d : summary_field_docs()) {
    if (d.section != section) {
      section = d.section;
      o << "\n## " << section << "\n\n";
      if (section == "Failure") o << "`failure` is null when the run completed. Otherwise:\n\n";
      o << "| field | meaning | shape |\n|---|---|---|\n";
    }
    o << "| " << code_list(d.fields) << " | " << d.meaning << " | " << (d.owner.empty() ? "typed" : d.owner) << " |\n";
  }
  return o.str();
}

}  // namespace zrepro
