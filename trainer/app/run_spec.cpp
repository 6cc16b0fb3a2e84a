// See run_spec.h.
#include <algorithm>
#include <cstdlib>
#include <initializer_list>
#include "trainer/app/run_spec.h"

#include "trainer/app/cli.h"
#include "trainer/config/user_file.h"
#include "trainer/loop/virtual_ranks.h"

namespace zrepro {

namespace {

cxxopts::Options run_options() {
  cxxopts::Options o("zrepro run", "Train the toy GPT under a DeepSpeed config and record what happens.");
  add_config_flags(o);
  o.add_options("run")
      ("steps", "optimizer steps", cxxopts::value<int64_t>()->default_value("50"))
      ("seed", "seed for init and data", cxxopts::value<uint64_t>()->default_value("1234"))
      ("device", "cpu|cuda", cxxopts::value<std::string>()->default_value("cpu"))
      ("out", "output folder for summary.json, metrics.jsonl and flight dumps", cxxopts::value<std::string>())
      ("ranks", "start N ranks on this node under mpirun", cxxopts::value<int>())
      ("oversubscribe", "with --ranks N above this machine's cores: run anyway, ranks sharing cores (memory and "
                        "losses stay exact; step times and timing verdicts do not)")
      ("world-size", "virtual ranks: this one process stands in for every rank of an N-rank job (each rank's "
                     "exact memory and numerics, in-process collectives; not its timing: use --ranks for hangs "
                     "and stragglers)", cxxopts::value<int>())
      ("as-rank", "with --world-size: the rank this process reports as its own (and, on CUDA, runs on the GPU); "
                  "most: the rank the planner finds holding the most (stage 2's whole-parameter gradient partition)",
       cxxopts::value<std::string>())
      ("peers", "with --world-size: run (every rank on a thread of this process, up to " +
                    std::to_string(kMaxVirtualRanks) + ") or stand-in (only --as-rank runs; what its peers would "
                    "send comes from the same-data rule and a model of their partitions: time and memory flat in N)",
       cxxopts::value<std::string>()->default_value("run"))
      ("peer-values", "with --peers stand-in: model (the peers' partitions step as theirs would: exact losses under "
                      "the same-data rule, 16 bytes of host memory per parameter) or initial (their initial values "
                      "only, 2 bytes per parameter: for models too large to model; memory exact, losses not)",
       cxxopts::value<std::string>()->default_value("model"))
      ("eval-on-rank0", "evaluate (a forward without gradients on a held-out batch) after every N-th step on rank 0 "
                        "only, as a script's `if rank == 0: evaluate()` does: under ZeRO-3 its all-gathers have no "
                        "partner on the other ranks", cxxopts::value<int64_t>())
      ("eval-on-all-ranks", "evaluate after every N-th step on every rank, its loss all-reduced (the Trainer's "
                            "evaluate; the fix of --eval-on-rank0)", cxxopts::value<int64_t>())
      ("generate", "after every step each rank generates up to N tokens greedily from its own prompt (generate() "
                   "in a training loop); a rank stops at its end of sequence (--eos-prob)", cxxopts::value<int64_t>())
      ("eos-prob", "with --generate: the chance that each new token ends the rank's sequence (drawn per rank, step "
                   "and token from --seed)", cxxopts::value<double>())
      ("synced-gpus", "with --generate: generate(synced_gpus=True): each step all-reduces whether a rank is still "
                      "generating and a finished rank keeps running forwards until every rank is done")
      ("data-rule", "distinct: each rank its own micro-batches (data parallel); same: every rank draws rank 0's "
                    "(what a virtual run is compared with)", cxxopts::value<std::string>()->default_value("distinct"))
      ("device-memory", "device capacity: a preset (a100-40gb, a100-80gb, h100-80gb, h200-141gb, l40s-48gb, rtx4090-24gb, ...: the capacity PyTorch reports on it) or a size, e.g. 80GB, 512MiB (GB = 1e9 bytes, GiB = 2^30; CPU-emulated device; default: unlimited)",
       cxxopts::value<std::string>())
      ("allocator", "CPU-emulated device allocator: tracking (exact bytes), caching (CUDA caching allocator "
                    "emulation: rounding, segments, fragmentation; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
                    "switches it to expandable segments) or plain (LibTorch's, untracked)",
       cxxopts::value<std::string>()->default_value("tracking"))
      ("memory-log", "write every device allocation and free to this file (one line each, for re-deriving the "
                     "planner's activation tapes after a LibTorch upgrade; rank r writes FILE.rank<r> when ranks > 1)",
       cxxopts::value<std::string>())
      ("host-link-gbps", "offload: modelled host link bandwidth in GB/s for pinned copies on the CPU-emulated device "
                         "(0: as fast as memcpy)", cxxopts::value<double>()->default_value("0"))
      ("host-link-profile", "offload: derive --host-link-gbps from a target (a100-pcie4, h100-pcie5, h200-pcie5, "
                            "l40s-pcie4, gh200-c2c) so copies keep their share of the step",
       cxxopts::value<std::string>())
      ("interconnect-gbps", "collectives: modelled bus bandwidth in GB/s (nccl-tests busbw) on the CPU-emulated "
                            "device: each collective takes at least its array bytes x busbw factor / this "
                            "(0: as fast as this machine's MPI)", cxxopts::value<double>()->default_value("0"))
      ("pageable-ratio", "offload: pageable copy bandwidth as a fraction of pinned (CPU-emulated device)",
       cxxopts::value<double>()->default_value("0.5"))
      ("comm-timeout", "watchdog: seconds a collective may take before the job is declared hung (default: "
                       "DeepSpeed's init_distributed timeout, which the NCCL watchdog enforces: 1800, or "
                       "DEEPSPEED_TIMEOUT minutes when that is set)",
       cxxopts::value<double>())
      ("memlock-limit", "pinned memory: run as a container's non-root user would, with ulimit -l SIZE (e.g. "
                        "64KiB) and without CAP_IPC_LOCK: lowers this process's RLIMIT_MEMLOCK and drops the "
                        "capability before anything is pinned (CPU-emulated device: mlock pinning)",
       cxxopts::value<std::string>())
      ("log-every", "step log line interval when steps_per_print is unset", cxxopts::value<int64_t>()->default_value("10"))
      ("threads", "intra-op threads per rank", cxxopts::value<int>()->default_value("1"))
      ("inject", "fault injection KIND:RANK[:ARG] (repeatable): inf-grad:R[:STEPS], gas-mismatch:R, "
                 "skip-forward:R[:STEP], straggler:R:MS, drop-accumulated-grads:R, loss-spike:R:FACTOR", cxxopts::value<std::vector<std::string>>())
      ("target-model", "scale down from this model (preset or HF config.json): train a toy that keeps each memory "
                       "category's share of --target-device-memory", cxxopts::value<std::string>())
      ("target-world-size", "ranks of the target run (default and required: this run's)", cxxopts::value<int>())
      ("target-device-memory", "the target's device capacity: a preset (a100-40gb, h100-80gb, ...) or a size, e.g. 80GB (GB = 1e9 bytes, GiB = 2^30)", cxxopts::value<std::string>())
      ("scale", "scale-down parameter factor K, or auto (a toy of at most 2M parameters)",
       cxxopts::value<std::string>()->default_value("auto"))
      ("loader-workers", "data loader worker threads preparing batches ahead of the loop (0: in the loop, as "
                         "num_workers=0)", cxxopts::value<int>()->default_value("0"))
      ("prefetch-factor", "batches each loader worker keeps ready (DataLoader prefetch_factor)",
       cxxopts::value<int>()->default_value("2"))
      ("sample-ms", "emulated preparation time per sample (reading, decoding, tokenizing) in milliseconds: a "
                    "worker sleeps this long per sample, as a loader bound by storage waits",
       cxxopts::value<double>()->default_value("0"))
      ("loader-pin-memory", "the data loader's pin_memory: input batches in page-locked memory (not the offload "
                            "buffers: that is the config's offload pin_memory)")
      ("dynamic-seq", "dynamic padding: each step's batches are MIN..seq tokens long (varying shapes, as "
                      "HF's dynamic padding gives)", cxxopts::value<int64_t>())
      ("seq-len-dist", "sample lengths: fixed, uniform:MIN (MIN..seq) or uniform:MIN-MAX; each sample is padded "
                       "after its length with -100 labels (unscored), as Hugging Face's collators pad",
       cxxopts::value<std::string>()->default_value("fixed"))
      ("loss-normalization", "how an accumulated step's token losses make the gradient: mean (each micro-batch's "
                             "mean, / gas: transformers <= 4.45, a plain DeepSpeed loop), token (over the tokens of "
                             "the whole accumulated batch of every rank: the Trainer with num_items_in_batch), "
                             "token-per-rank (average_tokens_across_devices=False), token-scaled-twice (4.46 until "
                             "PR #35808 under DeepSpeed)", cxxopts::value<std::string>()->default_value("mean"))
      ("activation-checkpointing", "recompute each block in backward (HF gradient_checkpointing); the "
                                   "config's activation_checkpointing.cpu_checkpointing keeps checkpoints on the host")
      ("verify-replicas", "stages 0-2: check after every step that all ranks hold bit-identical parameters")
      ("print-config", "print the effective config at init")
      ("save-every", "write DeepSpeed's ZeRO checkpoint (engine.save_checkpoint's files: DIR/latest, "
                     "DIR/global_step<N>/...) after every N-th step, into --save-dir (ZeRO stages 1-3)",
       cxxopts::value<int64_t>())
      ("save-dir", "the checkpoint folder of --save-every (DeepSpeed's save_dir)", cxxopts::value<std::string>())
      ("resume", "resume from DIR's latest checkpoint (DeepSpeed's load_checkpoint): continues at the step after "
                 "it, up to --steps in all; written by --save-every or by DeepSpeed on the same model",
       cxxopts::value<std::string>())
      ("zero-to-fp32", "after the run, consolidate the newest checkpoint of --save-dir into DIR as DeepSpeed's "
                       "zero_to_fp32 does (rank 0, host memory modelled: trainer/checkpoint/zero_to_fp32.h)",
       cxxopts::value<std::string>())
      ("zero-to-fp32-mode", "script (zero_to_fp32.py: lazy, one shard at a time) or api "
                            "(get_fp32_state_dict_from_zero_checkpoint: the whole fp32 model at once)",
       cxxopts::value<std::string>()->default_value("script"))
      ("zero-to-fp32-shard", "the script's --max_shard_size (SIZE, e.g. 5GB, 100MB)",
       cxxopts::value<std::string>()->default_value(kZeroToFp32DefaultShardSize))
      ("host-memory", "emulated host RAM of rank 0 (SIZE) for the 16-bit model gathered at a save "
                      "(stage3_gather_16bit_weights_on_model_save) and for --zero-to-fp32: bytes past it end the "
                      "run as the kernel's OOM killer would (exit 3, phase save or consolidate)",
       cxxopts::value<std::string>())
      ("export-inputs", "write OUT/inputs: the model layout, initial weights and token batches as .npy, for "
                        "training the same run elsewhere (the DeepSpeed conformance harness)");
  return o;
}

void positive(const char* flag, double v, const char* what = "> 0") {
  if (!(v > 0)) throw ConfigError(std::string(flag) + ": must be " + what + ", got " + fmt(v));
}

// DeepSpeed's default_pg_timeout: DEEPSPEED_TIMEOUT minutes, 30 when unset.
double deepspeed_default_timeout_s() {
  const char* v = std::getenv("DEEPSPEED_TIMEOUT");
  if (!v || !*v) return 1800;
  char* end = nullptr;
  const double minutes = std::strtod(v, &end);
  if (*end != '\0' || !(minutes > 0))
    throw ConfigError(std::string("DEEPSPEED_TIMEOUT: got \"") + v + "\", expected minutes > 0 (or unset it: 30)");
  return minutes * 60;
}

// --eval-on-rank0 / --eval-on-all-ranks, --generate, --eos-prob, --synced-gpus.
void parse_rank_work(const cxxopts::ParseResult& r, RankWork& w) {
  if (r.count("eval-on-rank0") && r.count("eval-on-all-ranks"))
    throw ConfigError("--eval-on-rank0 with --eval-on-all-ranks: evaluation runs on rank 0 alone or on every rank; "
                      "give one of them");
  const char* eval = r.count("eval-on-rank0") ? "eval-on-rank0" : "eval-on-all-ranks";
  if (r.count(eval)) {
    w.eval_every = r[eval].as<int64_t>();
    w.eval_rank0_only = r.count("eval-on-rank0") > 0;
    if (w.eval_every < 1)
      throw ConfigError(std::string("--") + eval + ": got " + std::to_string(w.eval_every) +
                        ", expected the number of steps between evaluations (>= 1)");
  }
  if (r.count("generate")) {
    w.generate_tokens = r["generate"].as<int64_t>();
    if (w.generate_tokens < 1 || w.generate_tokens > 100000)
      throw ConfigError("--generate: got " + std::to_string(w.generate_tokens) +
                        ", expected the new tokens per rank (1..100000)");
  }
  for (const char* needs : {"eos-prob", "synced-gpus"})
    if (r.count(needs) && !r.count("generate"))
      throw ConfigError(std::string("--") + needs + " without --generate: it shapes generation; add --generate N");
  if (r.count("eos-prob")) {
    w.eos_prob = r["eos-prob"].as<double>();
    if (!(w.eos_prob >= 0 && w.eos_prob <= 1))
      throw ConfigError("--eos-prob: got " + std::to_string(w.eos_prob) + ", expected a probability in [0, 1]");
  }
  w.synced_gpus = r.count("synced-gpus") > 0;
}

// The value of an enumerated flag: one of `allowed`, else a ConfigError naming the flag.
std::string one_of(const cxxopts::ParseResult& r, const std::string& flag, std::initializer_list<const char*> allowed) {
  const std::string v = r[flag].as<std::string>();
  std::string expected;
  size_t k = 0;
  for (const char* a : allowed) {
    if (v == a) return v;
    if (k > 0) expected += k + 1 == allowed.size() ? " or " : ", ";
    expected += a;
    ++k;
  }
  throw ConfigError("--" + flag + ": got \"" + v + "\", expected " + expected);
}

// --data-rule, --peers, --peer-values and what each needs.
void parse_peers(const cxxopts::ParseResult& r, RunSpec& s) {
  s.train.same_data = one_of(r, "data-rule", {"distinct", "same"}) == "same";
  s.world_size = opt<int>(r, "world-size");
  s.peers = one_of(r, "peers", {"run", "stand-in"}) == "stand-in" ? Peers::stand_in : Peers::run;
  if (r.count("as-rank") && !s.world_size)
    throw ConfigError("--as-rank: needs --world-size N (the virtual job whose rank this process stands in for)");
  s.peer_values = one_of(r, "peer-values", {"model", "initial"}) == "initial" ? PeerValuesMode::initial
                                                                               : PeerValuesMode::model;
  if (r.count("peer-values") && s.peers != Peers::stand_in)
    throw ConfigError("--peer-values: only with --peers stand-in (running peers hold their own values)");
  if (r.count("peers") && !s.world_size)
    throw ConfigError("--peers: needs --world-size N (the virtual job whose ranks run or are stood in for)");
}

// --as-rank R (or most) of a world of n ranks.
void parse_as_rank(const cxxopts::ParseResult& r, RunSpec& s, int n) {
  const std::string as = r.count("as-rank") ? r["as-rank"].as<std::string>() : "0";
  s.as_rank_most = as == "most";
  if (s.as_rank_most && r.count("target-model"))
    throw ConfigError("--as-rank most with --target-model: the toy's ranks are not the target's; give --as-rank R "
                      "(zrepro plan --world-size N of the target says which rank holds the most)");
  char* end = nullptr;
  const long v = s.as_rank_most ? 0 : std::strtol(as.c_str(), &end, 10);
  if (!s.as_rank_most && (as.empty() || *end != '\0'))
    throw ConfigError("--as-rank: got \"" + as + "\", expected a rank 0.." + std::to_string(n - 1) + " or most");
  s.as_rank = static_cast<int>(std::max(-1L, std::min(v, static_cast<long>(n))));
  if (s.as_rank < 0 || s.as_rank >= n)
    throw ConfigError("--as-rank: got " + std::to_string(s.as_rank) + ", expected 0.." + std::to_string(n - 1) +
                      " (a rank of --world-size " + std::to_string(n) + ")");
}

// --world-size, --as-rank, --data-rule (after --ranks and --inject, which they constrain).
void parse_virtual(const cxxopts::ParseResult& r, RunSpec& s) {
  parse_peers(r, s);
  if (!s.world_size) return;
  const int n = *s.world_size;
  if (s.peers == Peers::stand_in) {
    // [Note: what a stood-in peer contributes]: every rank's gradient is this rank's.
    if (r.count("data-rule") && !s.train.same_data)
      throw ConfigError("--data-rule distinct with --peers stand-in: stood-in peers draw the subject's batches "
                        "(their gradients are its own); drop --data-rule or give --peers run");
    s.train.same_data = true;
  }
  const int cap = s.peers == Peers::stand_in ? kMaxStandInRanks : kMaxVirtualRanks;
  if (n < 1 || n > cap)
    throw ConfigError("--world-size: got " + std::to_string(n) + ", expected 1.." + std::to_string(cap) +
                      (s.peers == Peers::run ? " with --peers run (a thread per rank); --peers stand-in runs rank "
                                               "--as-rank alone, up to " + std::to_string(kMaxStandInRanks)
                                             : std::string()));
  if (s.ranks && *s.ranks > 1)
    throw ConfigError("--world-size " + std::to_string(n) + " and --ranks " + std::to_string(*s.ranks) +
                      ": give one (--ranks N starts N processes; --world-size N runs the N ranks in this one)");
  parse_as_rank(r, s, n);
}

// What virtual ranks cannot stand in for (see [Note: what virtual ranks reproduce]).
void check_virtual_limits(const RunSpec& s) {
  if (!s.world_size || *s.world_size == 1) return;
  if (s.peers == Peers::stand_in && !s.train.inject.empty())
    throw ConfigError("--inject \"" + s.inject_specs[0] + "\" with --peers stand-in: the peers are not run, so a "
                      "fault cannot act on them or on what they send; give --peers run (up to " +
                      std::to_string(kMaxVirtualRanks) + " ranks) or --ranks");
  for (size_t i = 0; i < s.train.inject.size(); ++i)
    if (s.train.inject[i].changes_collectives())
      throw ConfigError("--inject \"" + s.inject_specs[i] + "\": " + inject_kind_name(s.train.inject[i].kind) +
                        " acts on time or on the collective sequence, which virtual ranks sharing one process do "
                        "not reproduce: run real processes, --ranks " + std::to_string(*s.world_size) +
                        " instead of --world-size " + std::to_string(*s.world_size));
  if (s.threads > 1 && s.peers == Peers::run)
    throw ConfigError("--threads " + std::to_string(s.threads) + " with --world-size: virtual ranks run one "
                      "intra-op thread each (each rank's allocations are charged to the thread that makes them); "
                      "drop --threads");
}

// The scale-down flags: a target instead of --model and --device-memory.
void parse_target(const cxxopts::ParseResult& r, RunSpec& s) {
  if (!r.count("target-model")) return;
  if (r.count("model")) throw ConfigError("--model and --target-model: give one; the toy is derived from the target");
  if (r.count("device-memory"))
    throw ConfigError("--device-memory and --target-device-memory: give the target's; the toy's capacity is derived");
  if (!r.count("target-device-memory"))
    throw ConfigError("--target-device-memory: required with --target-model, e.g. --target-device-memory 80GB");
  s.target_model = r["target-model"].as<std::string>();
  s.target_world_size = opt<int>(r, "target-world-size");
  s.target_device_memory = parse_device_memory("--target-device-memory", r["target-device-memory"].as<std::string>());
  const std::string k = r["scale"].as<std::string>();
  if (k != "auto") {
    size_t used = 0;
    double scale = 0;
    try {
      scale = std::stod(k, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != k.size() || scale < 1) throw ConfigError("--scale: got \"" + k + "\", expected auto or a factor >= 1");
    s.scale = scale;
  }
}

// The emulated data loader (--loader-workers, --prefetch-factor, --sample-ms, --loader-pin-memory).
void parse_loader(const cxxopts::ParseResult& r, RunSpec& s) {
  s.train.loader.workers = r["loader-workers"].as<int>();
  s.train.loader.prefetch_factor = r["prefetch-factor"].as<int>();
  s.train.loader.sample_ms = r["sample-ms"].as<double>();
  s.train.loader.pin_memory = r.count("loader-pin-memory") > 0;
  if (s.train.loader.workers < 0 || s.train.loader.workers > 256)
    throw ConfigError("--loader-workers: got " + std::to_string(s.train.loader.workers) + ", expected 0..256");
  if (s.train.loader.prefetch_factor < 1)
    throw ConfigError("--prefetch-factor: got " + std::to_string(s.train.loader.prefetch_factor) + ", expected >= 1");
  if (s.train.loader.sample_ms < 0) throw ConfigError("--sample-ms: got " + fmt(s.train.loader.sample_ms) + ", expected >= 0");
}

// The modelled links and the collective timeout: host link (or its profile), pageable
// ratio, interconnect, --comm-timeout, --memlock-limit.
void parse_links(const cxxopts::ParseResult& r, RunSpec& s) {
  s.job.host_link_gbps = r["host-link-gbps"].as<double>();
  s.job.pageable_ratio = r["pageable-ratio"].as<double>();
  s.interconnect_gbps = r["interconnect-gbps"].as<double>();
  if (s.interconnect_gbps < 0) throw ConfigError("--interconnect-gbps: must be >= 0, got " + fmt(s.interconnect_gbps));
  if (s.job.host_link_gbps < 0) throw ConfigError("--host-link-gbps: must be >= 0, got " + fmt(s.job.host_link_gbps));
  s.host_link_profile = opt<std::string>(r, "host-link-profile");
  if (s.host_link_profile && r.count("host-link-gbps"))
    throw ConfigError("--host-link-profile and --host-link-gbps: give one");
  if (s.job.pageable_ratio <= 0 || s.job.pageable_ratio > 1)
    throw ConfigError("--pageable-ratio: must be in (0, 1], got " + fmt(s.job.pageable_ratio));
  s.comm_timeout = r.count("comm-timeout") ? r["comm-timeout"].as<double>() : deepspeed_default_timeout_s();
  if (r.count("memlock-limit")) s.memlock_limit = parse_size("--memlock-limit", r["memlock-limit"].as<std::string>());
  positive("--comm-timeout", s.comm_timeout, "> 0 seconds");
}

// The device allocator and what needs it tracked (--device-memory, --memory-log).
void parse_allocator(const cxxopts::ParseResult& r, RunSpec& s) {
  s.allocator = r["allocator"].as<std::string>();
  if (s.allocator != "tracking" && s.allocator != "caching" && s.allocator != "plain")
    throw ConfigError("--allocator: got \"" + s.allocator + "\", expected tracking, caching or plain");
  if (r.count("device-memory")) s.device_memory = parse_device_memory("--device-memory", r["device-memory"].as<std::string>());
  s.memory_log = opt<std::string>(r, "memory-log");
  if (s.allocator == "plain" && (s.device_memory || s.target_device_memory))
    throw ConfigError("--device-memory needs a tracking allocator; drop --allocator plain");
  if (s.allocator == "plain" && s.memory_log)
    throw ConfigError("--memory-log needs a tracking allocator; drop --allocator plain");
}

// --save-every / --save-dir / --resume: both halves of a save given, positive, and where
// a resume saves again the same folder is allowed (DeepSpeed's own save_dir).
void parse_checkpoint_flags(const cxxopts::ParseResult& r, RunSpec& s) {
  if (r.count("save-every") != r.count("save-dir"))
    throw ConfigError(r.count("save-every") ? "--save-every: needs --save-dir DIR (where the checkpoints go)"
                                            : "--save-dir: needs --save-every N (after every N-th step)");
  if (r.count("save-every")) {
    s.train.save_every = *save_every_from(r);
    s.train.save_dir = r["save-dir"].as<std::string>();
    if (s.train.save_dir.empty()) throw ConfigError("--save-dir: got \"\", expected a folder");
    s.job.saves_checkpoints = true;
  }
  if (r.count("resume")) {
    s.train.resume_dir = r["resume"].as<std::string>();
    if (s.train.resume_dir.empty()) throw ConfigError("--resume: got \"\", expected the folder a checkpoint was saved in");
    s.job.resumes = true;
  }
  if (r.count("zero-to-fp32")) {
    if (!r.count("save-every"))
      throw ConfigError("--zero-to-fp32: needs --save-every N --save-dir DIR (it consolidates the run's newest "
                        "checkpoint)");
    s.zero_to_fp32_dir = r["zero-to-fp32"].as<std::string>();
    const std::string mode = r["zero-to-fp32-mode"].as<std::string>();
    if (mode != "script" && mode != "api")
      throw ConfigError("--zero-to-fp32-mode: got \"" + mode + "\", expected script (zero_to_fp32.py) or api "
                        "(get_fp32_state_dict_from_zero_checkpoint)");
    s.zero_to_fp32_api = mode == "api";
    s.zero_to_fp32_shard = parse_size("--zero-to-fp32-shard", r["zero-to-fp32-shard"].as<std::string>());
  } else {
    for (const char* f : {"zero-to-fp32-mode", "zero-to-fp32-shard"})
      if (r.count(f)) throw ConfigError(std::string("--") + f + ": needs --zero-to-fp32 DIR");
  }
  if (r.count("host-memory")) {
    if (s.zero_to_fp32_dir.empty() && s.train.save_every == 0)
      throw ConfigError("--host-memory: emulates rank 0's host for what the checkpoints put there (the 16-bit model "
                        "gathered at a save, --zero-to-fp32); add --save-every N --save-dir DIR");
    s.train.host_memory = parse_size("--host-memory", r["host-memory"].as<std::string>());
  }
}

// --out, --ranks, --oversubscribe: where the run writes and how many processes it starts.
void parse_process_flags(const cxxopts::ParseResult& r, RunSpec& s) {
  if (r.count("out")) {
    s.out_dir = r["out"].as<std::string>();
    if (s.out_dir.empty()) throw ConfigError("--out: got \"\", expected the folder for summary.json (or leave --out out)");
  }
  s.ranks = opt<int>(r, "ranks");
  if (s.ranks && (*s.ranks < 1 || *s.ranks > kMaxVirtualRanks))
    throw ConfigError("--ranks: got " + std::to_string(*s.ranks) + ", expected 1.." + std::to_string(kMaxVirtualRanks) +
                      " (processes on this node)");
  s.oversubscribe = r.count("oversubscribe") > 0;
}

// Work on some ranks only cannot diverge where the peers are stood in for.
void check_rank_work_with_peers(const RunSpec& s) {
  if (s.peers == Peers::stand_in && (s.train.rank_work.eval_rank0_only || (s.train.rank_work.generate_tokens > 0 &&
                                                                     !s.train.rank_work.synced_gpus)))
    throw ConfigError(std::string(s.train.rank_work.eval_rank0_only ? "--eval-on-rank0" : "--generate without --synced-gpus") +
                      " with --peers stand-in: stood-in peers do what the subject does, so a forward on some ranks "
                      "cannot diverge there; give --peers run (or --ranks N)");
}

// --loss-normalization, or what the Trainer's arguments say: a job whose arguments know
// average_tokens_across_devices normalises by tokens.
void parse_loss_normalization_flags(const cxxopts::ParseResult& r, RunSpec& s) {
  s.train.loss_normalization = parse_loss_normalization(r["loss-normalization"].as<std::string>());
  if (r.count("loss-normalization")) return;
  if (const std::optional<TrainingArgs> t = training_args_from(r); t && t->average_tokens_across_devices) {
    s.train.loss_normalization = *t->average_tokens_across_devices ? LossNormalization::token : LossNormalization::token_per_rank;
    s.loss_normalization_from = std::string("the Trainer's average_tokens_across_devices=") +
                                (*t->average_tokens_across_devices ? "true" : "false") + " (--training-args " + t->file + ")";
  }
}

// The training loop's own flags: device, steps, seed, threads, checks, what it exports.
void parse_loop_flags(const cxxopts::ParseResult& r, RunSpec& s) {
  s.device = r["device"].as<std::string>();
  s.train.steps = steps_from(r);
  s.train.seed = r["seed"].as<uint64_t>();
  s.train.verify_replicas = r.count("verify-replicas") > 0;
  s.job.activation_checkpointing = checkpointing_from(r);
  s.print_config = r.count("print-config") > 0;
  s.export_inputs = r.count("export-inputs") > 0;
  if (s.export_inputs && s.out_dir.empty()) throw ConfigError("--export-inputs: needs --out DIR (it writes DIR/inputs)");
  if (r.count("dynamic-seq")) {
    s.train.dynamic_seq_min = r["dynamic-seq"].as<int64_t>();
    if (s.train.dynamic_seq_min < 1)
      throw ConfigError("--dynamic-seq: got " + std::to_string(s.train.dynamic_seq_min) +
                        ", expected 1..the model's sequence length (the shortest batch's tokens)");
  }
  s.seq_len_dist = r["seq-len-dist"].as<std::string>();
  s.threads = r["threads"].as<int>();
  if (s.threads <= 0 || s.threads > 256)
    throw ConfigError("--threads: got " + std::to_string(s.threads) + ", expected 1..256 intra-op threads per rank");
  s.log_every = r["log-every"].as<int64_t>();
}

}  // namespace

void parse_run_spec(int argc, char** argv, RunSpec& s) {
  cxxopts::Options o = run_options();
  auto r = parse(o, argc, argv, Words::the_command_reads_them);
  if (r.count("help")) {
    s.help = true;
    s.help_text = o.help();
    return;
  }
  // A stray word (a flag's value given twice, a mistyped option without --) is refused, not
  // ignored; --out "" would write nothing while saying it did.
  if (!r.unmatched().empty())
    throw ConfigError("zrepro run: \"" + r.unmatched().front() + "\" is not an option (options start with --; "
                      "zrepro run --help lists them)");
  parse_process_flags(r, s);
  parse_virtual(r, s);
  parse_rank_work(r, s.train.rank_work);
  check_rank_work_with_peers(s);
  parse_loop_flags(r, s);
  parse_loss_normalization_flags(r, s);
  parse_loader(r, s);
  parse_checkpoint_flags(r, s);
  parse_links(r, s);
  if (r.count("inject"))
    for (const auto& spec : r["inject"].as<std::vector<std::string>>()) {
      s.inject_specs.push_back(spec);
      s.train.inject.push_back(parse_injection(spec));
    }
  check_virtual_limits(s);
  s.config_path = opt<std::string>(r, "config");
  s.model = r["model"].as<std::string>();
  s.model_given = r.count("model") > 0;
  s.model_overrides = overrides_from(r);
  s.flags = flags_from(r, ModelSpec{}, 1, s.train.steps);
  parse_target(r, s);
  parse_allocator(r, s);
}

nlohmann::json run_inputs(const RunSpec& spec, int argc, char** argv) {
  nlohmann::json args = nlohmann::json::array();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--out") {
      ++i;
      continue;
    }
    if (a.rfind("--out=", 0) == 0) continue;
    args.push_back(a);
  }
  nlohmann::json config = nullptr;
  if (spec.config_path) try {
      config = parse_user_json("--config " + *spec.config_path,
                               read_user_file("--config", *spec.config_path, "a DeepSpeed JSON config"));
      if (config.is_discarded()) config = nullptr;
    } catch (const std::exception&) {
      config = nullptr;  // set-up names the problem
    }
  return {{"args", args},
          {"config_file", spec.config_path ? nlohmann::json(*spec.config_path) : nlohmann::json(nullptr)},
          {"config", config}};
}

void add_ranks_input(nlohmann::json& inputs, int world) {
  if (!inputs.is_object() || !inputs["args"].is_array()) return;
  for (const auto& a : inputs["args"])
    if (a == "--ranks" || a.get<std::string>().rfind("--ranks=", 0) == 0 || a == "--world-size") return;
  inputs["args"].push_back("--ranks");
  inputs["args"].push_back(std::to_string(world));
}

}  // namespace zrepro
