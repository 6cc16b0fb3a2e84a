// See decide.h.
#include "trainer/diagnose/decide.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <set>

#include "trainer/diagnose/log_text.h"

namespace zrepro::diagnosis {

namespace {

// [Note: diagnosis order] The checkpoints are tried in the order practitioners diagnose
// (the catalogue's order, configs/scenarios/): a config the engine refuses first, then memory (stage, buffers,
// fragmentation), pinned memory, numerics that end the run, communication. Checkpoint
// names are those of summary.json's failure.checkpoint (kFailures in report.cpp).
// The model states' share of the device before the failure: zrepro's scale-down table, or
// DeepSpeed's MA line against the capacity from the OOM message. -1 when unknown.
double model_states_share(const LogFigures& n) {
  if (n.model_states_share) return *n.model_states_share;
  if (n.allocated_gb_before_failure && n.capacity_bytes.value_or(0) > 0)
    return *n.allocated_gb_before_failure * 1e9 / static_cast<double>(*n.capacity_bytes);
  return -1;
}

// Bytes the device holds outside this process's PyTorch allocator: capacity - free -
// what PyTorch reserved (allocated + reserved-but-unallocated, or 1.x's "reserved in
// total"). -1 when the message does not say.
int64_t held_outside_pytorch(const LogFigures& n) {
  const int64_t cap = n.capacity_bytes.value_or(-1), free = n.free_bytes.value_or(-1);
  int64_t reserved = n.reserved_bytes.value_or(-1);
  if (reserved < 0 && n.allocated_bytes && n.reserved_unallocated_bytes)
    reserved = *n.allocated_bytes + *n.reserved_unallocated_bytes;
  if (cap <= 0 || free < 0 || reserved < 0) return -1;
  return cap - free - reserved;
}

const std::vector<std::string>& fixes_for(const std::string& cause);

// An OOM that is not the caching allocator running out under the model: a pinned host
// allocation, or a device mostly held by something else. True when decided.
bool decide_oom_elsewhere(const Scan& s, Diagnosis& d) {
  const LogFigures& n = s.numbers;
  const bool outside_allocator = s.found.count("cuda_error_oom") && !s.found.count("oom");
  if (n.pinned_allocation_oom.value_or(false) || outside_allocator) {
    const bool seen = n.pinned_allocation_oom.value_or(false);
    d.checkpoint = "pinned-memory", d.cause = "pinned-host-oom", d.confidence = seen ? "strong" : "likely";
    d.scenario = s.found.count("pinned_memory") ? "memlock-limit" : "";
    d.reason = seen ? "\"CUDA error: out of memory\" raised by a pinned (page-locked) host allocation a few frames above: "
                      "host memory that can be locked ran out (ulimit -l, a container's or WSL's limit, or the host "
                      "itself), not the GPU"
                    : "\"CUDA error: out of memory\" without the caching allocator's own message (no \"Tried to "
                      "allocate\"): a CUDA call outside PyTorch's allocator failed, most often a pinned host allocation "
                      "(WSL and containers cap page-locked memory), else NCCL's or cuBLAS's own buffers";
    d.try_next = fixes_for("pinned-host-oom");
    return true;
  }
  const int64_t outside = held_outside_pytorch(n), cap = n.capacity_bytes.value_or(0);
  if (outside > 0 && cap > 0 && outside >= cap / 5 && outside >= (int64_t(2) << 30)) {
    d.checkpoint = "zero-stage", d.cause = "memory-outside-pytorch", d.confidence = "likely";
    d.reason = "the OOM message's figures leave " + std::to_string(outside >> 20) + " MiB of the device (" +
               std::to_string(100 * outside / cap) + "%) neither free nor reserved by this process's PyTorch: another "
               "process, an earlier model copy, NCCL's or the CUDA context's own buffers hold it";
    d.try_next = {"nvidia-smi during the run: another process (a second job, a notebook kernel, a zombie rank) on the GPU",
                  "one process per GPU (LOCAL_RANK and CUDA_VISIBLE_DEVICES), no model copy left on the device before "
                  "deepspeed.initialize",
                  "zrepro plan ... --device-memory SIZE with the capacity this job really has left"};
    return true;
  }
  return false;
}

// What to try for each cause, the fix public threads found first (the corpus's, where it
// has the thread): one table for every diagnosis that lists fixes.
const std::vector<std::string>& fixes_for(const std::string& cause) {
  static const std::map<std::string, std::vector<std::string>> fixes = {
      {"activations", {"gradient checkpointing (the Trainer's gradient_checkpointing=True, or DeepSpeed activation_checkpointing)",
                       "a smaller micro-batch with more gradient accumulation, or a shorter max sequence length"}},
      {"model-states-at-init", {"ZeRO stage 3, with zero3 init while loading (HfDeepSpeedConfig / the Trainer's deepspeed "
                                "argument set before from_pretrained), so no rank materialises the whole model",
                                "offload_param / offload_optimizer to cpu; do not move the model to the GPU before "
                                "deepspeed.initialize"}},
      {"optimizer-states", {"ZeRO stage >= 1 (optimizer states partitioned) or offload_optimizer to cpu",
                            "fewer trainable parameters (LoRA) or a lighter optimizer"}},
      {"buckets", {"smaller reduce_bucket_size / allgather_bucket_size (5e7 instead of 5e8); under stage 3 a smaller "
                   "stage3_prefetch_bucket_size"}},
      {"fragmentation", {"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
                         "fixed-length batches (padding to a multiple, group_by_length) so block sizes repeat"}},
      {"zero3-live-params", {"lower stage3_max_live_parameters, stage3_prefetch_bucket_size and stage3_max_reuse_distance"}},
      {"mismatched-collectives", {"the same gradient_accumulation_steps and number of batches on every rank (drop_last)",
                                  "zrepro run --ranks N --inject gas-mismatch:R reproduces it with a flight-recorder dump"}},
      {"divergent-zero3-gathers", {"deepspeed.utils.set_z3_leaf_modules(model, [MoEBlock]) so ZeRO-3 gathers the whole "
                                   "block on every rank, whichever experts it routes to",
                                   "zero_optimization.leaf_module.classes [\"MixtralSparseMoeBlock\"] (DeepSpeed >= 0.18.0, "
                                   "whose default already names Hugging Face's Mixtral / Qwen2-MoE / Qwen3-MoE blocks: "
                                   "upgrading from 0.17.x fixes a stock model)"}},
      {"rank-alone-in-collective", {"run evaluation / generation / saving on every rank (all ranks must enter ZeRO-3's "
                                    "gathers), or gather the weights once with GatheredParameters",
                                    "generate(..., synced_gpus=True) where ranks generate different lengths"}},
      {"pinned-host-oom", {"offload pin_memory false (or DataLoader pin_memory=False): pageable host buffers",
                           "ulimit -l unlimited / docker run --ulimit memlock=-1; under WSL raise its memory limit "
                           "(.wslconfig)",
                           "less host memory per process: fewer ranks per node, or offload only the optimizer"}},
      {"checkpoint-world-size", {"convert it: python deepspeed/checkpoint/ds_to_universal.py --input_folder "
                                 "DIR/global_stepN --output_folder DIR/global_stepN_universal --inject_missing_state "
                                 "(or zrepro checkpoint to-universal), then \"checkpoint\": {\"load_universal\": "
                                 "true} in the config",
                                 "resume on the saving world size", "weights only: zero_to_fp32.py, then a fresh "
                                 "optimizer"}},
      {"slow-preprocessing", {"preprocess the dataset before launching (or on the main process first: "
                              "main_process_first), or a longer timeout (ddp_timeout / init_distributed(timeout=...))"}}};
  static const std::vector<std::string> none;
  const auto it = fixes.find(cause);
  return it == fixes.end() ? none : it->second;
}

// An OOM's fixes, after the planner that checks which of them fit before a GPU is spent.
std::vector<std::string> oom_fixes(const std::string& cause) {
  std::vector<std::string> t = {"zrepro plan --config ds_config.json --model M --world-size N --device-memory SIZE (which fixes fit)"};
  t.insert(t.end(), fixes_for(cause).begin(), fixes_for(cause).end());
  return t;
}

// The caching allocator's OOM, from what the message's figures and ZeRO's own records say:
// fragmentation, the optimizer's partitioning, a bucket, model states filling the device,
// ZeRO-3's live parameters. False when they say none of these.
bool decide_oom_by_figures(const LogFigures& n, const std::string& phase, Diagnosis& d) {
  const int64_t req = n.request_bytes.value_or(-1), stranded = n.reserved_unallocated_bytes.value_or(-1);
  const int64_t cap = n.capacity_bytes.value_or(0);
  const std::string category = n.category.value_or("");
  const bool bucket_sized = req > 0 && (std::llabs(req - 2000000000LL) < 50000000 || std::llabs(req - 1000000000LL) < 25000000);
  // Fragmentation: the stranded bytes exceed the request and are a real share of the device
  // (127 MiB stranded on an 8 GiB card beside a 90 MiB request is a full device, not a
  // fragmented one: LoRA_Easy_Training_Scripts#178 in the corpus).
  if (req > 0 && stranded > req && (cap <= 0 || stranded >= cap / 20)) {
    d.scenario = "fragmentation", d.cause = "fragmentation", d.confidence = "strong";
    d.reason = "the allocator holds more reserved-but-unallocated memory than the request: the free memory is fragmented";
  } else if (category == "optimizer_states" && n.zero_stage.value_or(0) == 2) {
    // DeepSpeed creates Adam's moments in the first step: under ZeRO-2 the states and the
    // gradients are already partitioned there, and what every rank still holds whole is
    // its 16-bit parameters.
    d.scenario = "zero2-params-dont-fit", d.cause = "model-states-at-init", d.confidence = "likely";
    d.reason = "the OOM comes when ZeRO-2 creates Adam's moments in the first optimizer step: states and gradients "
               "are partitioned already; every rank's whole 16-bit parameters leave no room for them (ZeRO stage 3, "
               "or offload)";
  } else if (phase == "partition" || category == "optimizer_states") {
    d.scenario = "optimizer-partition-oom", d.cause = "optimizer-states", d.confidence = "strong";
    d.reason = "the OOM comes while ZeRO creates or partitions the optimizer states (12 bytes/param of fp32 Adam state)";
  } else if (category == "comm_buffers" || bucket_sized) {
    d.scenario = "bucket-buffers", d.cause = "buckets", d.confidence = category == "comm_buffers" ? "strong" : "likely";
    d.reason = "the failing request is the size of a 5e8-element reduce / all-gather bucket";
  } else if (model_states_share(n) >= 0.5) {
    d.scenario = "zero2-params-dont-fit", d.cause = "model-states-at-init", d.confidence = "likely";
    d.reason = "the model states alone took " + std::to_string(static_cast<int64_t>(std::min(100 * model_states_share(n), 1e9))) +
               "% of the device before the failing allocation: the parameters (and below stage 3 every rank's full "
               "16-bit copy) leave no room";
  } else if (n.zero_stage.value_or(0) == 3 && n.completed_steps.value_or(0) >= 1 &&
             (phase == "forward" || phase == "backward")) {
    d.scenario = "zero3-live-params", d.cause = "zero3-live-params", d.confidence = "likely";
    d.reason = "under ZeRO-3 the OOM comes after a completed step: layers kept gathered between their forward and "
               "backward (stage3_max_live_parameters, prefetch bucket, reuse distance), not one batch's activations";
  } else {
    return false;
  }
  return true;
}

// The caching allocator's OOM by where it came (the traceback's frames), or, with no
// frame, by the request's size against the device.
void decide_oom_by_phase(const LogFigures& n, const std::string& phase, Diagnosis& d) {
  const int64_t req = n.request_bytes.value_or(-1), cap = n.capacity_bytes.value_or(0);
  const std::string category = n.category.value_or("");
  if (category == "activations") {
    d.scenario = "first-batch-activations", d.cause = "activations", d.confidence = "strong";
    d.reason = "model states fit; the activations of one micro-batch do not";
  } else if (category == "params" || phase == "init") {
    d.scenario = "zero2-params-dont-fit", d.cause = "model-states-at-init", d.confidence = category == "params" ? "strong" : "likely";
    d.reason = phase == "init" ? "the OOM comes while the model is loaded or the engine set up (the traceback's frames): "
                                 "the parameters, or the optimizer's first buffers, do not fit before any batch - ZeRO "
                                 "stage 3 (with zero3 init when loading), or offload"
                               : "the 16-bit parameters every rank holds below stage 3 do not fit with what comes on top";
  } else if (phase == "step") {
    d.scenario = "optimizer-partition-oom", d.cause = "optimizer-states", d.confidence = "likely";
    d.reason = "the OOM comes in the optimizer step (the traceback's frames): Adam's states (8 bytes/param, 12 with fp32 "
               "master weights) are allocated on the first step";
  } else if (phase.empty() && req > 0 && cap > 0 && req >= cap / 8) {
    d.scenario = "zero2-params-dont-fit", d.cause = "model-states-at-init", d.confidence = "likely";
    d.reason = "phase unknown (no traceback frame); one request of " + std::to_string(req >> 20) + " MiB, " +
               std::to_string(std::llround(100.0 * static_cast<double>(req) / static_cast<double>(cap))) +
               "% of the device, is a flat partition or whole-model buffer, not one "
               "layer's activations";
  } else {
    d.scenario = "first-batch-activations", d.cause = "activations", d.confidence = "likely";
    d.reason = phase.empty() ? "phase unknown (no traceback frame): a request small against the device, as activations "
                               "are; the traceback would tell (forward/backward frames, or from_pretrained / "
                               "deepspeed.initialize at init)"
                             : "an OOM in " + phase + " with no sign of buckets or fragmentation: usually activations";
  }
}

void decide_oom(const Scan& s, Diagnosis& d) {
  const LogFigures& n = s.numbers;
  if (decide_oom_elsewhere(s, d)) return;
  d.checkpoint = "zero-stage";
  const std::string phase = n.oom_phase().value_or("");
  if (!decide_oom_by_figures(n, phase, d)) decide_oom_by_phase(n, phase, d);
  const std::vector<std::pair<std::string, std::string>> others = {
      {"first-batch-activations", "the OOM on the first forward/backward; activation checkpointing fixes it"},
      {"zero2-params-dont-fit", "the OOM at init or first forward under stage <= 2; zrepro plan shows 16-bit params near capacity"},
      {"bucket-buffers", "the request is ~1.86 GiB (5e8 fp32 elements) or ~0.93 GiB (bf16)"},
      {"zero3-live-params", "stage 3, the OOM in a later step's forward; stage3_max_live_parameters / prefetch set high"},
      {"fragmentation", "a large \"reserved by PyTorch but unallocated\" figure, many steps in"}};
  for (const auto& [name, tell] : others)
    if (name != d.scenario) d.alternatives.push_back(name + ": " + tell);
  d.try_next = oom_fixes(d.cause);
}

std::string pct(double share) {
  return std::isfinite(share) ? std::to_string(static_cast<int>(100 * std::clamp(share, 0.0, 1.0) + 0.5)) + "%" : "?";
}

// [Note: speed fingerprints] A slow job's timer lines, read against compute's own
// proportions: backward does about twice forward's work (three times with activation
// checkpointing), and the optimizer step is a small part. A phase out of proportion is
// waiting on something: with offload, on the host link (ZeRO-3 offload_param fetches
// parameters in forward; offload_optimizer copies gradients out in backward and runs Adam
// on the host in step); without offload, on collectives (stage 3 gathers in forward, the
// gradient all-reduce in backward). Without a baseline run one log can only say "likely".
// The phase out of proportion, in words ("" when none).
std::string out_of_proportion(const WallClockShares& sh) {
  if (sh.step >= 0.5) return "the optimizer step takes " + pct(sh.step) + " of the step time";
  if (sh.fwd > sh.bwd)
    return "forward takes longer than backward (" + pct(sh.fwd) + " vs " + pct(sh.bwd) +
           "; compute alone makes backward about twice forward)";
  if (sh.bwd > 4 * sh.fwd)
    return "backward takes " + std::to_string(static_cast<int64_t>(std::min(sh.bwd / sh.fwd, 1e6) + 0.5)) +
           "x forward (compute alone: about 2x)";
  return "";
}

// The step is the optimizer: with offload_optimizer, DeepSpeedCPUAdam on the host.
void name_host_optimizer(const std::string& odd, bool offload, Diagnosis& d) {
  d.checkpoint = "offload-target", d.cause = "host-optimizer", d.confidence = "likely";
  d.reason = odd + " (DeepSpeed's timers)" +
             (offload ? std::string(" with CPU offload on: the optimizer runs on the host (DeepSpeedCPUAdam), and its speed, "
                                    "not the copies, sets the pace")
                      : std::string(", and the log does not say whether the job offloads (give --config): with CPU "
                                    "offload the host's Adam sets the pace; without, a very large or CPU-bound optimizer"));
  d.alternatives = {"offload-link-bottleneck: forward or backward out of proportion instead (the copies, not Adam)",
                    "pageable-copies: offload pin_memory false (synchronous copies)"};
  d.try_next = {"ds_report: cpu_adam built for this CPU's SIMD (AVX512 / AVX2; DS_BUILD_CPU_ADAM=1 at install), and "
                "enough cores per rank for its threads", "zrepro bench adam (the host Adam's speed on this machine)",
                "keep the optimizer on the device if it fits (zrepro plan)"};
}

void name_offload_link(const std::string& odd, bool pageable, Diagnosis& d) {
  d.checkpoint = "offload-target", d.confidence = "likely";
  d.scenario = pageable ? "pageable-copies" : "offload-link-bottleneck";
  d.cause = pageable ? "pageable-copies" : "offload-link";
  d.reason = odd + " (DeepSpeed's timers) with CPU offload on: the phase waits on the host link" +
             (pageable ? ", and the offload buffers are pageable, so every copy is synchronous" : "");
  d.alternatives = {pageable ? "offload-link-bottleneck: pinned buffers and still slow; the link itself is the limit"
                             : "pageable-copies: offload pin_memory false in the config print (synchronous copies)",
                    "a CPU-bound optimizer: the step, not forward/backward, out of proportion (zrepro bench adam)"};
  d.try_next = {pageable ? "offload pin_memory true (pinned buffers: asynchronous copies)"
                         : "keep the parameters on the device (drop offload_param), or fewer micro-steps per step",
                "zrepro ab --expect slower:R between the offload config and one without it"};
}

// Without offload: the all-reduce itself, or stage 3's gathers stretching forward.
void name_comm_bound(const std::string& odd, double allreduce, Diagnosis& d) {
  d.checkpoint = "communication", d.confidence = "likely", d.scenario = "more-ranks-no-speedup", d.cause = "comm-bound";
  d.reason = (allreduce >= 0.4 ? "the gradient all-reduce takes " + pct(allreduce) + " of the step time" : odd) +
             " (DeepSpeed's timers) without offload: the phase waits on collectives, so the interconnect, not "
             "compute, sets the pace";
  d.alternatives = {"straggler: one rank slow, the others wait in the all-reduce (\"is the straggler\" in zrepro's log)",
                    "data-starvation: a rank's loader late; the wait shows as collective time on the others"};
  d.try_next = {"a lower ZeRO stage (stage 3 gathers parameters in every forward and backward)",
                "more gradient accumulation per optimizer step (fewer all-reduces per sample)",
                "zrepro ab --expect scaling:E at 1 and N ranks"};
}

bool decide_speed(const Scan& s, Diagnosis& d) {
  const std::optional<WallClockShares> sh = s.numbers.wall_clock_shares();
  if (!sh) return false;
  const std::string odd = out_of_proportion(*sh);
  const JobConfigFacts& cfg = s.numbers.config;  // --config, when given
  const bool offload = s.found.count("offload_cpu") > 0 || cfg.offload;
  const bool pageable = s.found.count("offload_pageable") > 0 || (cfg.offload && cfg.pin_memory_off);
  const bool stage3 = s.numbers.zero_stage.value_or(0) == 3;
  if (sh->step >= 0.5) name_host_optimizer(odd, offload, d);
  else if (offload && !odd.empty()) name_offload_link(odd, pageable, d);
  else if (sh->bwd_allreduce >= 0.4 || (!offload && sh->fwd > sh->bwd && stage3)) name_comm_bound(odd, sh->bwd_allreduce, d);
  else return false;
  return true;
}

// [Note: reading fp16's loss scale] OVERFLOW lines are normal at the start of fp16
// training: the scaler starts at 2^initial_scale_power and halves until gradients fit,
// usually settling in the thousands. They are a failure when the scale keeps falling: to a
// small value (<= 128) step after step, or every step at scale 1 ("Attempted loss scale:
// 1, reducing to 1": nothing left to halve), or DeepSpeed's "already at minimum" exit.
// A loss scale as DeepSpeed prints it (0.0, 0.5, 1.2e-05).
std::string scale_text(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

// A scale below 1 is past any start-up search too: DeepSpeed's min_loss_scale defaults to 1,
// so only a scale set to go lower (or one underflowed to 0.0) gets there.
bool fp16_failing(const LogFigures& n) {
  return n.overflows_at_scale_1.value_or(0) >= 2 || n.min_attempted_loss_scale.value_or(1e300) < 1 ||
         (n.overflow_steps.value_or(0) >= 3 && n.min_attempted_loss_scale.value_or(1e300) <= 128);
}

void decide_fp16(const Scan& s, Diagnosis& d) {
  const LogFigures& n = s.numbers;
  const double low = n.min_attempted_loss_scale.value_or(1e300);
  const int64_t at_one = n.overflows_at_scale_1.value_or(0), overflows = n.overflow_steps.value_or(0);
  d.checkpoint = "numerics", d.scenario = "fp16-overflow";
  if (s.found.count("loss_scale_minimum")) {
    d.cause = "fp16-scale-minimum", d.confidence = "strong";
    d.reason = "fp16 gradients overflowed at every loss scale down to min_loss_scale";
  } else if (at_one >= 2) {
    d.cause = "fp16-scale-stuck", d.confidence = "strong";
    d.reason = std::to_string(at_one) + " steps overflowed at loss scale 1: every step is skipped, nothing trains";
  } else if (low < 1) {
    d.cause = "fp16-scale-stuck", d.confidence = "strong";
    d.reason = "a step overflowed at loss scale " + scale_text(low) + ", below 1: the scale has halved past any useful "
               "value (to 0.0 once it underflows) and every step is skipped";
  } else if (overflows >= 3 && low <= 128) {
    d.cause = "fp16-collapse", d.confidence = "likely";
    d.reason = "the loss scale kept halving down to " + std::to_string(static_cast<int64_t>(low)) +
               " over " + std::to_string(overflows) + " overflowing steps: past the start-up search, the gradients "
               "overflow fp16 whatever the scale";
  } else {
    d.checkpoint = "", d.scenario = "", d.cause = "fp16-startup-search", d.confidence = "none";
    d.reason = "only loss-scale overflow lines" +
               (low < 1e15 ? ", the lowest attempted scale " + std::to_string(static_cast<int64_t>(low)) : std::string()) +
               ": the normal search for a loss scale at the start of fp16 training";
    return;
  }
  d.try_next = {"bf16 instead of fp16 (a model pretrained in bf16 overflows fp16's range)",
                "a lower learning rate or warm-up; gradient clipping on",
                "find the step's batch (an outlier sample, a layer whose activations explode)"};
}

// What every rank's watchdog line says together: the sequence numbers they timed out at,
// and whether two ranks waited in one SeqNum with different sizes.
struct WatchdogView {
  std::set<int64_t> seqs;
  bool same_seq_other_op = false;    // ranks issued different collectives at one SeqNum
  bool same_seq_other_size = false;  // the same collective with different sizes
};
WatchdogView watchdog_view(const std::vector<WatchdogEntry>& w) {
  WatchdogView v;
  for (const WatchdogEntry& a : w) {
    v.seqs.insert(a.seq.value_or(-1));
    for (const WatchdogEntry& b : w) {
      if (a.seq.value_or(-1) != b.seq.value_or(-1)) continue;
      if (a.op.value_or("") != b.op.value_or("")) v.same_seq_other_op = true;
      else if (a.numel_in.value_or(-1) != b.numel_in.value_or(-1) || a.numel_out.value_or(-1) != b.numel_out.value_or(-1))
        v.same_seq_other_size = true;
    }
  }
  return v;
}

// A hang's fixes, then the tools that tell the causes apart on the real job.
std::vector<std::string> hang_fixes(const std::string& cause) {
  std::vector<std::string> t = fixes_for(cause);
  t.push_back("on the real job: TORCH_NCCL_DUMP_ON_TIMEOUT=1 TORCH_NCCL_TRACE_BUFFER_SIZE=2000 (PyTorch's Flight "
              "Recorder: every rank's last collectives), TORCH_NCCL_DESYNC_DEBUG=1, NCCL_DEBUG=INFO");
  return t;
}

// What a hang's rules read: the log's evidence and what every rank waited in.
struct HangFacts {
  const Scan& s;
  WatchdogView v;
  std::string op;   // the collective the first rank's report names
  int64_t seq = -1;
  bool has(const char* id) const { return s.found.count(id) > 0; }
  bool gather() const { return op.find("ALLGATHER") != std::string::npos; }
  // The same SeqNum with the same op and different sizes.
  bool other_size() const { return v.same_seq_other_size && !v.same_seq_other_op; }
  size_t reports() const { return s.numbers.watchdog.size(); }
};

void name_hang(Diagnosis& d, const char* scenario, const char* cause, const char* confidence, std::string reason) {
  d.scenario = scenario, d.cause = cause, d.confidence = confidence, d.reason = std::move(reason);
}

// A forward some ranks ran alone comes first: its gathers can meet the others' gathers too.
void hang_forward_alone(const HangFacts& f, Diagnosis& d) {
  name_hang(d, f.has("generate_work") ? "generate-early-eos" : "rank0-eval-hang", "rank-alone-in-collective", "strong",
            "a forward ran on some ranks only (evaluation on rank 0, or generation a rank left at its own end of "
            "sequence): under ZeRO-3 its all-gathers met the other ranks' next collectives");
}

void hang_divergent_met(const HangFacts&, Diagnosis& d) {
  name_hang(d, "moe-divergent-gathers", "divergent-zero3-gathers", "strong",
            "the ranks met in all-gathers of different sizes: under ZeRO-3 they fetched different parameters, as "
            "data-dependent modules (MoE routing, conditional branches) do");
}

void hang_mismatched(const HangFacts& f, Diagnosis& d) {
  name_hang(d, "mismatched-collectives", "mismatched-collectives", "strong",
            f.has("collective_mismatch") || f.v.same_seq_other_op
                ? "ranks issued different collectives at the same sequence number (one rank ran an extra micro-step "
                  "or skipped one)"
                : "the ranks timed out at different sequence numbers: one issued more collectives than another (an "
                  "extra micro-step, an uneven last batch)");
}

void hang_divergent_waiting(const HangFacts& f, Diagnosis& d) {
  name_hang(d, "moe-divergent-gathers", "divergent-zero3-gathers", f.other_size() ? "strong" : "likely",
            f.other_size()
                ? "the ranks wait in the same collective (one SeqNum) with different sizes: under ZeRO-3 they gathered "
                  "different parameters, as data-dependent modules (MoE routing, conditional branches) do"
                : "ZeRO-3 re-traced its prefetch order (\"Invalidate trace cache\") and a gather never completed: the "
                  "ranks run data-dependent modules (MoE routing, conditional branches)");
}

void hang_alone(const HangFacts& f, Diagnosis& d) {
  name_hang(d, f.has("generate_work") ? "generate-early-eos" : "rank0-eval-hang", "rank-alone-in-collective", "likely",
            "one rank alone timed out in an all-gather: under ZeRO-3 it ran forward work the others never joined "
            "(evaluation, generation or saving on one rank only)");
}

void hang_preprocessing(const HangFacts& f, Diagnosis& d) {
  name_hang(d, "", "slow-preprocessing", "likely",
            f.has("store_timeout")
                ? "the ranks timed out waiting for rank 0 to create the NCCL communicator (the TCP store's get): rank 0 "
                  "was still busy before its first collective - preprocessing or loading - or had crashed"
                : "a collective at SeqNum " + std::to_string(f.seq) + " (before training started) timed out while the "
                  "log shows dataset preprocessing: one rank was still preparing data when the others waited for it");
}

void hang_unknown(const HangFacts&, Diagnosis& d) {
  name_hang(d, "mismatched-collectives", "mismatched-collectives", "likely",
            "a collective never completed: a rank is waiting in a collective its peers did not issue (give every "
            "rank's log: the ranks' SeqNums and sizes tell the causes apart)");
}

// [Note: every rank's watchdog line] (read_watchdog_line): the hang's kind from what each
// rank waited in, and from what the log shows around it; the first rule that applies names it.
struct HangRule {
  bool (*applies)(const HangFacts&);
  void (*decide)(const HangFacts&, Diagnosis&);
};
const std::vector<HangRule>& hang_rules() {
  static const std::vector<HangRule> r = {
      {[](const HangFacts& f) { return f.has("collective_mismatch") && f.has("forward_alone"); }, hang_forward_alone},
      {[](const HangFacts& f) { return f.has("collective_mismatch") && f.has("divergent_gathers"); }, hang_divergent_met},
      {[](const HangFacts& f) { return f.has("collective_mismatch") || f.v.seqs.size() > 1 || f.v.same_seq_other_op; },
       hang_mismatched},
      {[](const HangFacts& f) { return f.other_size() || (f.has("trace_cache") && (f.gather() || f.reports() == 0)); },
       hang_divergent_waiting},
      {[](const HangFacts& f) {
         const bool stage3 = f.s.numbers.zero_stage.value_or(0) == 3, one_rank = f.s.numbers.ranks_seen.size() <= 1;
         return f.reports() == 1 && f.gather() && (f.has("eval_work") || stage3 || one_rank);
       },
       hang_alone},
      {[](const HangFacts& f) { return (f.has("preprocessing") && f.seq >= 0 && f.seq <= 20) || f.has("store_timeout"); },
       hang_preprocessing},
      {[](const HangFacts&) { return true; }, hang_unknown},
  };
  return r;
}

}  // namespace

void decide_hang(const Scan& s, Diagnosis& d) {
  const HangFacts f{s, watchdog_view(s.numbers.watchdog), s.numbers.collective_op.value_or(""),
                    s.numbers.collective_seq.value_or(-1)};
  d.checkpoint = "communication";
  for (const HangRule& r : hang_rules())
    if (r.applies(f)) {
      r.decide(f, d);
      break;
    }
  // Each alternative by its catalogue scenario where one reproduces it (diagnose --write-scenario
  // offers those as candidates); a straggler's collectives complete, so a timeout rules it out.
  d.alternatives = {"slow-preprocessing: a low SeqNum while one rank still maps or tokenizes the dataset",
                    "moe-divergent-gathers: one SeqNum, different NumelIn/NumelOut across ranks (MoE under ZeRO-3)",
                    "rank0-eval-hang: one rank alone in an all-gather while the others moved on (evaluation, saving "
                    "or generation on some ranks only)",
                    "mismatched-collectives: the ranks' SeqNums differ (one issued more collectives)"};
  if (!s.found.count("watchdog_timeout"))
    d.alternatives.insert(d.alternatives.begin(), "straggler: a slow but live rank; the run is slow, not stuck, and "
                                                  "the collectives do complete");
  d.alternatives.erase(std::remove_if(d.alternatives.begin(), d.alternatives.end(),
                                     [&](const std::string& a) {
                                       return a.rfind(d.cause + ":", 0) == 0 ||
                                              (!d.scenario.empty() && a.rfind(d.scenario + ":", 0) == 0);
                                     }),
                      d.alternatives.end());
  d.try_next = hang_fixes(d.cause);
}

namespace {

// Failures outside a training step that the log names by their own lines: DeepSpeed
// "auto" values nobody filled, NCCL's shared-memory transport, the host running out while
// offload sets up (the process killed without a Python error). True when decided.
bool decide_setup(const Scan& s, Diagnosis& d) {
  auto has = [&](const char* id) { return s.found.count(id) > 0; };
  if (has("trainer_mismatch")) {
    d.checkpoint = "config", d.cause = "trainer-config-mismatch", d.confidence = "strong";
    std::string keys;
    for (const auto& [k, v] : s.numbers.trainer_mismatch) keys += (keys.empty() ? "" : ", ") + k + "=" + v;
    d.reason = "the Hugging Face Trainer refused DeepSpeed values the config sets explicitly that differ from its "
               "TrainingArguments" + (keys.empty() ? std::string() : " (" + keys + ")") +
               "; under `accelerate launch` the accelerate config's deepspeed_config keys (gradient_accumulation_steps, "
               "gradient_clipping, mixed_precision) are written into the DeepSpeed config before the Trainer checks it";
    d.try_next = {"set those keys to \"auto\" in the DeepSpeed config (and drop them from the accelerate config's "
                  "deepspeed_config), or make them equal to the TrainingArguments",
                  "zrepro config --config ds.json --training-args args.json [--accelerate-config default_config.yaml] "
                  "shows each value, who filled it and the refused one"};
  } else if (has("auto_unresolved")) {
    d.checkpoint = "config", d.cause = "auto-unresolved", d.confidence = "strong";
    d.reason = "the DeepSpeed config leaves batch values \"auto\" and nothing filled them: only the Hugging Face "
               "Trainer (or accelerate given a dataloader) resolves \"auto\"";
    d.try_next = {"integer train_micro_batch_size_per_gpu (and gradient_accumulation_steps) in the config, or pass the "
                  "dataloader to accelerator.prepare", "zrepro config --config ds.json --micro-batch N shows the resolved values"};
  } else if (has("nccl_shm")) {
    d.checkpoint = "communication", d.cause = "nccl-transport", d.confidence = "strong";
    d.reason = "NCCL could not create its shared-memory segment in /dev/shm (docker's 64 MB default, or full): the "
               "intra-node transport fails at the first collective";
    d.try_next = {"docker run --shm-size=16g (or --ipc=host); in Kubernetes an emptyDir medium: Memory on /dev/shm",
                  "NCCL_SHM_DISABLE=1 (slower: falls back to sockets or P2P)"};
  } else if (has("offload_init") && !has("completed_steps") && !has("oom") && !has("cuda_error_oom") &&
             s.error_lines.empty()) {
    d.checkpoint = "offload-target", d.cause = "host-memory-at-offload-init", d.confidence = "likely";
    d.reason = "the log ends inside DeepSpeed's offload set-up (partitions being created) with no Python error and "
               "little device memory in use: the host ran out of memory and the kernel's OOM killer ended the process";
    d.try_next = {"more host RAM per process, or fewer ranks per node (each holds its offloaded partitions and pinned "
                  "buffers)", "offload only the optimizer (ZeRO-2 or ZeRO-3 without offload_param); no NVMe offload on a "
                  "small host", "zrepro plan ... (host bytes per rank for offload)"};
  } else {
    return false;
  }
  return true;
}

bool has(const Scan& s, const char* id) { return s.found.count(id) > 0; }

bool decide_batch_triple(const Scan&, Diagnosis& d) {
  d.checkpoint = "config", d.scenario = "mismatched-batch-triple", d.cause = "batch-triple", d.confidence = "strong";
  d.reason = "DeepSpeed refused the batch triple at init: train_batch_size != micro x gas x world size";
  d.try_next = {"set gradient_accumulation_steps = train_batch_size / (micro x world size), or drop one of the three"};
  return true;
}

// [Note: zero_to_fp32's host memory] (trainer/checkpoint/zero_to_fp32.h).
bool decide_consolidation_host_oom(const Scan& s, Diagnosis& d) {
  const bool zero12 = s.numbers.zero_stage.value_or(3) < 3;
  d.checkpoint = "host-memory", d.scenario = "consolidate-host-oom", d.cause = "zero-to-fp32-host-oom";
  d.confidence = "strong";
  d.reason = std::string("the kernel killed DeepSpeed's zero_to_fp32 for host memory while it consolidated a ZeRO "
                         "checkpoint: ") +
             (zero12 ? "at ZeRO stages 1-2 it concatenates every rank's fp32 partition into one flat first (4 bytes "
                       "per parameter at once, whatever --max_shard_size), more than the host's free RAM"
                     : "the whole-model state dict (get_fp32_state_dict_from_zero_checkpoint: 4 bytes per parameter "
                       "at once; twice that and more before DeepSpeed 0.16.0) or a shard larger than the host's free "
                       "RAM");
  d.try_next = zero12 ? std::vector<std::string>{"consolidate on a host with more free RAM than the fp32 model (4 "
                                                 "bytes per parameter): the shard size does not help at stages 1-2",
                                                 "engine.save_16bit_model at the end of training (rank 0 holds the "
                                                 "16-bit parameters at stages 1-2 already)"}
                      : std::vector<std::string>{"python zero_to_fp32.py CHECKPOINT OUT --max_shard_size 1GB "
                                                 "(DeepSpeed >= 0.16.0: one shard in memory at a time)",
                                                 "consolidate on a host with more RAM than the fp32 model",
                                                 "stage3_gather_16bit_weights_on_model_save: the 16-bit model "
                                                 "written at save time instead"};
  return true;
}

bool gathers_16bit_on_save(const Scan& s) {
  return has(s, "save_gather") || s.numbers.config.gather_16bit_on_save;
}

// [Note: the 16-bit consolidation at save] (trainer/checkpoint/ds_checkpoint.h).
bool decide_save_gather_host_oom(const Scan& s, Diagnosis& d) {
  d.checkpoint = "host-memory", d.scenario = "save-gather-oom", d.cause = "save-16bit-host-oom";
  d.confidence = has(s, "save_gather") ? "strong" : "likely";
  d.reason = "a rank was killed for host memory with ZeRO-3's stage3_gather_16bit_weights_on_model_save on: at "
             "every save rank 0 gathers the whole 16-bit model into its host memory (2 bytes per parameter in "
             "bf16) for pytorch_model.bin, before the ZeRO checkpoint is written";
  d.try_next = {"stage3_gather_16bit_weights_on_model_save: false (the Trainer then saves only the ZeRO "
                "checkpoint); consolidate offline with zero_to_fp32.py --max_shard_size on a host with room",
                "more free host RAM on rank 0's node (fewer ranks per node, no offload there)",
                "zrepro plan --save-every N shows rank 0's host bytes at a save (checkpoint_host)"};
  if (!has(s, "save_gather"))
    d.alternatives = {"any other host-memory kill (a dataloader, offload buffers): the log does not say the kill "
                      "came at a save"};
  return true;
}

// A whole figure as the reason quotes it; "?" when the log did not say it.
std::string figure_text(const std::optional<int64_t>& v) { return v ? std::to_string(*v) : "?"; }

bool decide_resume_world_size(const Scan& s, Diagnosis& d) {
  d.checkpoint = "config", d.scenario = "resume-world-size-change", d.cause = "checkpoint-world-size";
  d.confidence = "strong";
  d.reason = "load_checkpoint refused a ZeRO checkpoint saved at another data-parallel world size (" +
             figure_text(s.numbers.saved_world_size) + " ranks, resumed on " + figure_text(s.numbers.world_size) +
             "): each rank's optimizer file holds a partition "
             "cut for the saving world size";
  d.try_next = fixes_for(d.cause);
  return true;
}

bool decide_pinned_memory(const Scan& s, Diagnosis& d) {
  // --config without a pin_memory key: the pinning came from 0.19.5's new default.
  const bool unset = s.numbers.config.pin_memory_unset;
  d.checkpoint = "pinned-memory", d.confidence = "strong", d.cause = "pinned-host-oom";
  d.scenario = unset ? "upgrade-pinned-default" : "memlock-limit";
  d.reason = unset ? "pinning the offload buffers failed at init, and the config sets no pin_memory: DeepSpeed >= "
                     "0.19.5 pins them by default (false before, deepspeedai/DeepSpeed#8207)"
                   : "pinning the offload buffers failed at init (ulimit -l / CAP_IPC_LOCK, or host memory)";
  d.alternatives = {unset ? "memlock-limit: the config asked for pinned buffers itself; the limit is the cause"
                          : "upgrade-pinned-default: the config has no pin_memory key and DeepSpeed >= 0.19.5 now pins by "
                            "default (give --config to tell)"};
  d.try_next = {"ulimit -l unlimited (docker run --ulimit memlock=-1)", "offload pin_memory false, written in the config"};
  return true;
}

bool decide_cache_flushes(const Scan& s, Diagnosis& d) {
  d.checkpoint = "zero-stage", d.cause = "allocator-cache-flushes", d.confidence = "likely";
  d.scenario = "allocator-pressure";
  const int64_t n = s.numbers.allocator_cache_flushes.value_or(0);
  d.reason = "ZeRO-3 reports the PyTorch allocator flushing its cache between steps" +
             (n > 0 ? " (" + std::to_string(n) + " in the last step it logged)" : std::string()) +
             ": memory runs so close to capacity that the caching allocator frees its cached segments and retries "
             "(num_alloc_retries; slow steps, an OOM one step away)";
  d.try_next = {"a smaller micro-batch with more gradient accumulation, activation checkpointing, or lower "
                "stage3_max_live_parameters / stage3_prefetch_bucket_size",
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (segments grow and shrink: nothing cached to flush)",
                "get_accelerator().empty_cache() at the same point on every rank, if the pressure is transient"};
  return true;
}

// [Note: failures a short paste still names] A user pastes the last lines, not the log:
// the error without DeepSpeed's own line. Each rule below reads a class of such pastes by
// what their lines say for themselves, and none fires beside a stronger fingerprint (the
// walk tries them after OOM, fp16 and the watchdog's hangs).

// load_checkpoint with a flat tensor of another size: each rank's file holds a flat
// partition cut for the saving world size. An exact ratio of the two sizes is the ratio
// of the world sizes (a LLaMA-Factory resume of an 8-GPU checkpoint on 1 GPU).
bool decide_resume_size_mismatch(const Scan& s, Diagnosis& d) {
  const int64_t a = s.numbers.size_mismatch_a.value_or(0), b = s.numbers.size_mismatch_b.value_or(0);
  const int64_t big = std::max(a, b), small = std::min(a, b);
  const bool ratio = small > 0 && big % small == 0 && big / small > 1;
  d.checkpoint = "config", d.scenario = "resume-world-size-change", d.cause = "checkpoint-world-size";
  d.confidence = "likely";
  d.reason = "a tensor-size mismatch (" + std::to_string(a) + " against " + std::to_string(b) + ") while loading a ZeRO "
             "checkpoint: its flat partitions were cut for the world size that saved it" +
             (ratio ? " (the sizes differ by exactly " + std::to_string(big / small) + "x)" : std::string());
  d.alternatives = {"a checkpoint of another model or another trainable set (LoRA against full fine-tuning): the "
                    "saved model's config differs from the one loading it"};
  d.try_next = fixes_for(d.cause);
  return true;
}

// A traceback whose innermost frame is tensor.pin_memory(): the exception, whatever its
// words, came from pinning a host buffer (WSL and containers cap page-locked memory).
bool decide_pinning_frame(const Scan&, Diagnosis& d) {
  d.checkpoint = "pinned-memory", d.cause = "pinned-host-oom", d.confidence = "likely";
  d.reason = "the traceback ends inside pin_memory(): pinning a host buffer (DeepSpeed's offload buffers, or a "
             "DataLoader's) failed; page-locked memory is capped by ulimit -l, a container, WSL, or the host";
  d.try_next = fixes_for("pinned-host-oom");
  return true;
}

bool decide_nccl_network(const Scan&, Diagnosis& d) {
  d.checkpoint = "communication", d.cause = "nccl-transport", d.confidence = "likely";
  d.reason = "NCCL's network transport failed (a peer's connection reset, ncclRemoteError, InfiniBand errors): a "
             "faulty node or link, or a peer process that died first";
  d.alternatives = {"a rank that died of its own error first (an OOM, an exception): its log, not this one, names it"};
  d.try_next = {"every rank's log: a rank that failed first names the cause; if none did, NCCL_DEBUG=INFO "
                "NCCL_DEBUG_SUBSYS=NET and the nodes' InfiniBand counters (ibstat) find the faulty link",
                "exclude the node; NCCL_IB_DISABLE=1 to tell an InfiniBand fault from the rest (slower)"};
  return true;
}

// DeepSpeed's own host line at 95% and more: offload's partitions and pinned buffers (and
// each rank's copy of the model) filled the host ([Note: failures a short paste still
// names]). A bare SIGKILL (-9) before any step is not named so: in the corpus most such
// kills are a model load or conversion outside DeepSpeed (measured: the rule named 2 logs
// right and 5 wrong, and was dropped).
// Only where training never began: a slow job at 96% of its host has its speed rules.
bool host_memory_full(const Scan& s) {
  return s.numbers.host_memory_percent.value_or(0) >= 95 && !s.numbers.completed_steps;
}
bool decide_host_memory_at_init(const Scan& s, Diagnosis& d) {
  d.checkpoint = "offload-target", d.cause = "host-memory-at-offload-init", d.confidence = "likely";
  d.reason = "DeepSpeed's own line shows the host's memory at " +
             std::to_string(static_cast<int>(s.numbers.host_memory_percent.value_or(0))) +
             "%: offloaded partitions and pinned buffers (and each rank's copy of the model) filled the host";
  d.alternatives = {"host memory filled by something else on the node (another job, the dataloader's workers): "
                    "free -g and dmesg on the node tell"};
  d.try_next = {"more host RAM per process, or fewer ranks per node; low_cpu_mem_usage / zero.Init loading so no rank "
                "holds the whole model", "offload only the optimizer, or pin_memory false for the offload buffers",
                "zrepro plan ... (host bytes per rank for offload)"};
  return true;
}

// DeepSpeed comparing a config value with a number where the value is still the string
// "auto" (gradient_clipping, the scheduler's warmup_num_steps, a batch size): only the
// Trainer resolves "auto", so a custom loop or a second engine (a reference model) has it raw.
// The TypeError raised in DeepSpeed's own frames: a DeepSpeed frame at most 12 lines above it
// (a traceback's last frames), not a DeepSpeed path anywhere in the log.
bool auto_compared_in_deepspeed(const Scan& s) {
  const auto error = s.last_at.find("str_number_compare"), frame = s.last_at.find("deepspeed_frame");
  return error != s.last_at.end() && frame != s.last_at.end() && frame->second <= error->second &&
         error->second - frame->second <= 12;
}
bool decide_auto_compared(const Scan&, Diagnosis& d) {
  d.checkpoint = "config", d.cause = "auto-unresolved", d.confidence = "likely";
  d.reason = "DeepSpeed compared a config value with a number and found a string: a value left \"auto\" that nothing "
             "resolved (only the Hugging Face Trainer fills \"auto\", and only for the engine it builds itself)";
  d.try_next = {"numbers instead of \"auto\" in the config DeepSpeed reads here (gradient_clipping, the scheduler's "
                "warmup_num_steps / total_num_steps, the batch sizes)",
                "zrepro config --config ds.json --training-args args.json shows which values are still \"auto\""};
  return true;
}

// The log stops inside a dataset preprocessing bar that ran past the process group's
// 30-minute default timeout ([Note: failures a short paste still names]).
constexpr int64_t kDefaultTimeoutS = 1800;
bool stopped_in_long_preprocessing(const Scan& s) {
  const auto last = s.last_at.find("preprocessing");
  return last != s.last_at.end() && s.last_line - last->second <= 60 && !s.numbers.completed_steps &&
         s.numbers.preprocessing_elapsed_s.value_or(0) >= kDefaultTimeoutS * 9 / 10;
}
bool decide_long_preprocessing(const Scan& s, Diagnosis& d) {
  d.checkpoint = "communication", d.cause = "slow-preprocessing", d.confidence = "likely";
  d.reason = "the log stops in dataset preprocessing after " +
             std::to_string(s.numbers.preprocessing_elapsed_s.value_or(0) / 60) +
             " min: past the 30-minute default timeout the other ranks, waiting for this one in a barrier, were "
             "ended by the watchdog";
  d.try_next = fixes_for("slow-preprocessing");
  return true;
}

bool decide_straggler(const Scan&, Diagnosis& d) {
  d.checkpoint = "communication", d.scenario = "straggler", d.cause = "straggler", d.confidence = "strong";
  d.reason = "one rank kept the others waiting in collectives";
  d.try_next = {"check the named rank's node (throttling, a noisy neighbour, its data loader)"};
  return true;
}

// Timer lines with no phase out of proportion: nothing to name, the shares said.
bool decide_timers_in_proportion(const Scan& s, Diagnosis& d) {
  const std::optional<WallClockShares> sh = s.numbers.wall_clock_shares();
  d.confidence = "none";
  d.reason = "no known fingerprint: DeepSpeed's timers show no phase out of proportion" +
             (sh ? " (fwd " + pct(sh->fwd) + ", bwd " + pct(sh->bwd) + " of which all-reduce " + pct(sh->bwd_allreduce) +
                       ", step " + pct(sh->step) + ")"
                 : std::string());
  return true;
}

// A decide function that always decides, as a rule's.
template <void (*F)(const Scan&, Diagnosis&)>
bool always(const Scan& s, Diagnosis& d) {
  F(s, d);
  return true;
}

// One rule of the decision: where it applies (the evidence it needs) and what it decides
// (false: it looked and declined, the walk goes on).
struct Rule {
  const char* name;
  bool (*applies)(const Scan&);
  bool (*decide)(const Scan&, Diagnosis&);
};

// The walk of [Note: diagnosis order]: it takes the first rule that applies and decides.
const std::vector<Rule>& rules() {
  static const std::vector<Rule> r = {
      {"batch triple", [](const Scan& s) { return has(s, "batch_assertion"); }, decide_batch_triple},
      {"zero_to_fp32 host OOM", [](const Scan& s) { return has(s, "host_killed") && has(s, "zero_to_fp32"); },
       decide_consolidation_host_oom},
      {"16-bit gather at save, host OOM",
       [](const Scan& s) { return (has(s, "host_killed") || has(s, "sigkill")) && gathers_16bit_on_save(s); },
       decide_save_gather_host_oom},
      {"resume at another world size", [](const Scan& s) { return has(s, "checkpoint_world_size"); },
       decide_resume_world_size},
      {"resume with a flat size mismatch",
       [](const Scan& s) {
         // No step in the log: a job that trained on is not resuming (pastes put the error
         // first as often as last, so the order of the two lines says nothing).
         return has(s, "zero_checkpoint_load") && has(s, "tensor_size_mismatch") && !s.numbers.completed_steps;
       },
       decide_resume_size_mismatch},
      {"pinned memory", [](const Scan& s) { return has(s, "pinned_memory") && !has(s, "oom"); }, decide_pinned_memory},
      {"device OOM", [](const Scan& s) { return has(s, "oom") || has(s, "cuda_error_oom"); }, always<decide_oom>},
      {"fp16 loss scale", [](const Scan& s) { return has(s, "loss_scale_minimum") || fp16_failing(s.numbers); },
       always<decide_fp16>},
      {"hang",
       [](const Scan& s) {
         return has(s, "watchdog_timeout") || has(s, "collective_mismatch") || has(s, "store_timeout") ||
                (has(s, "trace_cache") && !s.error_lines.empty());
       },
       always<decide_hang>},
      {"set-up failure", [](const Scan&) { return true; }, decide_setup},
      {"the host's memory full", host_memory_full, decide_host_memory_at_init},
      {"NCCL's network", [](const Scan& s) { return has(s, "nccl_network"); }, decide_nccl_network},
      {"a traceback ending in pin_memory()",
       [](const Scan& s) {
         const auto last = s.last_at.find("pinning_call");
         return last != s.last_at.end() && s.last_line - last->second <= 5;
       },
       decide_pinning_frame},
      {"\"auto\" compared with a number", auto_compared_in_deepspeed, decide_auto_compared},
      {"stopped in long preprocessing", stopped_in_long_preprocessing, decide_long_preprocessing},
      {"allocator cache flushes", [](const Scan& s) { return has(s, "cache_flush"); }, decide_cache_flushes},
      {"straggler", [](const Scan& s) { return has(s, "straggler"); }, decide_straggler},
      {"slow phase", [](const Scan& s) { return has(s, "wall_clock"); }, decide_speed},
      {"fp16 start-up search", [](const Scan& s) { return has(s, "overflow"); }, always<decide_fp16>},
      {"timers in proportion", [](const Scan& s) { return has(s, "wall_clock"); }, decide_timers_in_proportion},
  };
  return r;
}

}  // namespace

void decide(const Scan& s, Diagnosis& d) {
  for (const Rule& r : rules())
    if (r.applies(s) && r.decide(s, d)) return;
  d.confidence = "none";
  d.reason = "no known fingerprint";
}

}  // namespace zrepro::diagnosis
