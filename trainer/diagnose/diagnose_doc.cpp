// docs/reference/diagnose-json.md from the Diagnosis type (diagnose.h, log_figures.h): its
// field table, an example with every field set (what the table must cover) and the page.
#include <sstream>

#include "trainer/diagnose/diagnose.h"

namespace zrepro {

const std::vector<FieldDoc>& diagnose_field_docs() {
  static const std::vector<FieldDoc> docs = {
      {{"schema"}, std::string("`") + kDiagnoseSchema + "`: what this page describes"},
      {{"checkpoint"}, "where in the diagnosis order the cause sits: `config`, `zero-stage`, `offload-target`, "
                       "`pinned-memory`, `host-memory`, `numerics`, `communication`; null when none"},
      {{"scenario"}, "the catalogue's scenario it matches (`zrepro scenario run NAME` reproduces it); null when none"},
      {{"cause"}, "the cause in one word, finer than the scenario and named also where no scenario reproduces it yet; "
                  "null when none"},
      {{"confidence", "reason"}, "`strong`, `likely` or `none` (nothing named: then `closest` lists the lines that "
                                 "looked closest), and why, in one sentence"},
      {{"alternatives", "try_next"}, "what else it could be and what would tell them apart; the fixes to verify, "
                                     "most likely first"},
      {{"evidence[].fingerprint", "evidence[].line", "evidence[].text"},
       "every fingerprint line (at most 12 per kind): the fingerprint, the 1-based line (0 for a Flight Recorder row) "
       "and the line, cut at 300 characters"},
      {{"closest[].fingerprint", "closest[].line", "closest[].text"}, "no fingerprint: the error-looking lines"},
      {{"numbers.request_bytes", "numbers.capacity_bytes", "numbers.free_bytes", "numbers.allocated_bytes",
        "numbers.reserved_bytes", "numbers.reserved_unallocated_bytes", "numbers.process_bytes"},
       "a PyTorch OOM message's figures in bytes (any version since 1.x): the failed request, the device, what was "
       "free, allocated, reserved (in total, or reserved but unallocated) and what the process held"},
      {{"numbers.category", "numbers.phase"}, "zrepro's own OOM line's category; the phase from that line, else from "
                                              "the traceback's frames (`init`, `partition`, `forward`, `backward`, `step`)"},
      {{"numbers.pinned_allocation_oom"}, "a CUDA OOM raised a few frames under a pinned host allocation"},
      {{"numbers.train_batch_size", "numbers.micro_batch", "numbers.grad_accum", "numbers.world_size"},
       "DeepSpeed's batch assertion's triple and world size (the world size also from zero_to_fp32 and a resume)"},
      {{"numbers.saved_world_size"}, "the world size a ZeRO checkpoint was saved at, from a refused resume"},
      {{"numbers.zero_stage"}, "the ZeRO stage the log prints (else `--config`'s)"},
      {{"numbers.completed_steps"}, "the steps the log shows completed before the failure"},
      {{"numbers.straggler_rank"}, "the rank zrepro's log names the straggler"},
      {{"numbers.allocator_cache_flushes"}, "ZeRO-3's \"pytorch allocator cache flushes since last step\", the last"},
      {{"numbers.host_memory_percent"}, "the highest host memory use (%) DeepSpeed's see_memory_usage lines print"},
      {{"numbers.preprocessing_elapsed_s"}, "the elapsed time (s) of the log's last dataset preprocessing progress bar update"},
      {{"numbers.size_mismatch_a", "numbers.size_mismatch_b"},
       "the two sizes of the first \"size of tensor a (A) must match the size of tensor b (B)\" error"},
      {{"numbers.trainer_mismatch.*"}, "each DeepSpeed key the Hugging Face Trainer refused, with the config's value"},
      {{"numbers.overflow_steps", "numbers.overflows_at_scale_1"}, "fp16: the steps skipped on overflow, and those at "
                                                                   "loss scale 1"},
      {{"numbers.last_attempted_loss_scale", "numbers.min_attempted_loss_scale"}, "fp16: the last and the lowest loss "
                                                                                  "scale attempted"},
      {{"numbers.watchdog[].rank", "numbers.watchdog[].seq", "numbers.watchdog[].op", "numbers.watchdog[].numel_in",
        "numbers.watchdog[].numel_out"},
       "a hang: every rank's last collective (at most 64), from the NCCL watchdog's line or the rank's Flight "
       "Recorder dump; a field the line does not carry is absent"},
      {{"numbers.watchdog[].state", "numbers.watchdog[].entries", "numbers.watchdog[].file"},
       "a Flight Recorder row's only: the entry's state (null when the dump has none), the dump's entry count, its "
       "file"},
      {{"numbers.collective_seq", "numbers.collective_op", "numbers.timeout_ms", "numbers.ran_ms"},
       "the collective the first rank's report names, its timeout and how long it ran"},
      {{"numbers.allocated_gb_before_failure", "numbers.model_states_share"},
       "DeepSpeed's last MA figure (GB) before the failure; zrepro's scale-down table's model states' share of the "
       "device"},
      {{"numbers.memory_timeline[].line", "numbers.memory_timeline[].label", "numbers.memory_timeline[].MA_GB",
        "numbers.memory_timeline[].Max_MA_GB", "numbers.memory_timeline[].CA_GB", "numbers.memory_timeline[].Max_CA_GB"},
       "every DeepSpeed see_memory_usage line (at most 200): its line, the label line before it, and its figures in GB "
       "as printed"},
      {{"numbers.wall_clock_ms.*"}, "DeepSpeed's timers summed over the log in ms (`fwd`, `bwd`, `bwd_allreduce`, "
                                    "`step`, and the `micro_` ones)"},
      {{"numbers.wall_clock_shares.*"}, "each timer's share of fwd + bwd + step; null beside timers that say nothing "
                                        "about speed (no forward or backward time, a total past a double)"},
      {{"numbers.config.gather_16bit_on_save", "numbers.config.offload", "numbers.config.pin_memory",
        "numbers.config.pin_memory_unset"},
       "with `--config`: what its config print would have said (the 16-bit gather at save, offload, pin_memory false, "
       "an offload section without pin_memory); only the facts that hold"},
      {{"log_bytes", "log_encoding", "log_read"}, "a text log: its size decompressed, its encoding (`UTF-8 text`, "
                                                  "`UTF-16 text`, ...) and, above `--read-limit`, what of it was read "
                                                  "(absent when read whole)"},
      {{"flight_recorder_ranks"}, "a folder of Flight Recorder dumps (instead of the three above): how many ranks' dumps"},
      {{"planner.planned_verdict", "planner.agrees"}, "with `--config`: the planner's verdict for the job (`fits`, "
                                                      "`oom`, `pinned-memory`, or `refused`) and whether it agrees "
                                                      "with the log (an OOM in the same phase, or the same refusal)"},
      {{"planner.refused"}, "the planner's refusal of the config (then no other planner field)"},
      {{"planner.planned_phase", "planner.planned_peak_bytes", "planner.capacity_bytes", "planner.log_phase"},
       "the phase the plan runs out in (null: it fits), its peak and the capacity, the log's OOM phase (null: unknown)"},
      {{"numbers.ranks_seen"}, "the ranks whose prefixes (`[rank3]:`, `[Rank 3]`) the log's lines carry, in order "
                               "seen"},
  };
  return docs;
}

Diagnosis diagnose_example() {
  LogFigures n;
  n.request_bytes = n.capacity_bytes = n.free_bytes = n.reserved_unallocated_bytes = n.allocated_bytes =
      n.reserved_bytes = n.process_bytes = n.train_batch_size = n.micro_batch = n.grad_accum = n.world_size =
          n.saved_world_size = n.zero_stage = n.completed_steps = n.straggler_rank = n.allocator_cache_flushes =
              n.preprocessing_elapsed_s = n.size_mismatch_a = n.size_mismatch_b =
              n.overflow_steps = n.overflows_at_scale_1 = n.collective_seq = n.timeout_ms = n.ran_ms = 1;
  n.last_attempted_loss_scale = n.min_attempted_loss_scale = n.allocated_gb_before_failure = n.model_states_share =
      n.host_memory_percent = 0.5;
  n.category = n.phase = n.collective_op = "x";
  n.pinned_allocation_oom = true;
  n.trainer_mismatch = {{"gradient_clipping", "1.0"}};
  WatchdogEntry w;
  w.rank = 0, w.seq = w.numel_in = w.numel_out = 1, w.op = "ALLGATHER";
  w.recorded = WatchdogEntry::Recorded{"scheduled", 4, "rank_0"};
  n.watchdog = {w};
  n.memory_timeline = {MemoryLine{3, "Before creating fp16 partitions", 1, 2, 3, 4}};
  n.wall_clock_ms = std::map<std::string, double>{{"fwd", 1}, {"bwd", 2}, {"step", 1}};
  n.config = JobConfigFacts{true, true, true, true};
  n.ranks_seen = {0};
  Diagnosis d;
  d.checkpoint = "zero-stage", d.scenario = "fragmentation", d.cause = "fragmentation", d.confidence = "strong";
  d.reason = "r", d.alternatives = {"a"}, d.try_next = {"t"};
  d.evidence = {Evidence{"oom", 1, "CUDA out of memory"}};
  d.closest = {Evidence{"closest", 2, "error"}};
  d.numbers = n;
  d.read = LogRead{1, std::string("UTF-8 text"), std::string("read its first ..."), 2};
  d.planner = PlannerCheck{"oom", true, std::nullopt, std::string("step"), std::string("step"), 1, 1};
  return d;
}

std::string diagnose_reference_page() {
  return reference_page(
      "diagnose --json",
      "What `zrepro diagnose LOG --json` prints: the checkpoint, scenario and cause a failed job's log (or a folder "
       "of PyTorch Flight Recorder dumps) shows, how sure, why, what else it could be, what to try, the lines that "
       "show it and the figures they carry. One C++ type, Diagnosis (trainer/diagnose/diagnose.h) with its figures "
       "LogFigures (trainer/diagnose/log_figures.h), writes and reads it. The top-level fields are always present; "
       "`numbers` holds only the figures the log had. This page is generated from the type's field table "
       "(trainer/diagnose/diagnose_doc.cpp); tests/trainer/diagnose/diagnose_doc_test.cpp fails when a field of the "
       "type has no row or the page is not this text (`ZREPRO_WRITE_DIAGNOSE_DOC=1 build/zrepro_unit_tests "
       "--gtest_filter=DiagnoseDoc.*` rewrites it).",
      kDiagnoseSchema, diagnose_field_docs());
}

}  // namespace zrepro
