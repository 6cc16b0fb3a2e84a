// See evidence.h.
#include "trainer/diagnose/evidence.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <string_view>

#include <re2/re2.h>
#include <re2/set.h>

#include "trainer/diagnose/log_text.h"

namespace zrepro::diagnosis {

namespace {

// One fingerprint: a cheap substring that must be on the line, then the pattern
// (case-insensitive: RE2 syntax, compiled once into the scan's one set).
struct Fingerprint {
  const char* id;
  const char* needle;
  const char* pattern;
};

const std::vector<Fingerprint>& fingerprints() {
  static const std::vector<Fingerprint> f = {
        {"oom", "out of memory", R"(CUDA out of memory)"},
        // Context for an OOM (and the innermost frame of a failed pinning): a frame that allocates page-locked host memory.
        {"pinned_frame", "pin", R"(pin_memory\(|pin_memory=True|\.pin_memory\b|cudaHostAlloc|_pin_tensor|pinned_(buffer|tensor)|pin memory)"},
        // A traceback's frame or source line that pins a buffer (not a pin_memory=True argument).
        {"pinning_call", "pin", R"(\.pin_memory\(\)|\bin pin_memory\s*$|\bin _pin_tensor\s*$|cudaHostAlloc\()"},
        // RuntimeError's form, raised by any CUDA call (a pinned host allocation among them).
        {"cuda_error_oom", "out of memory", R"(CUDA error: out of memory|cudaErrorMemoryAllocation)"},
        // ZeRO-3's memory-pressure warning and its re-trace warning (data-dependent modules).
        {"cache_flush", "cache flush", R"((\d+) pytorch allocator cache flushes since last step)"},
        {"trace_cache", "trace cache", R"(Invalidate trace cache)"},
        // DeepSpeed "auto" values left for a Trainer that never filled them (accelerate without dataloaders, plain scripts).
        // transformers' trainer_config_finalize: an explicit DeepSpeed value against the Trainer's
        // arguments, one "- ds KEY=V vs hf ARG=W" line each.
        {"trainer_mismatch", "mismatch TrainingArguments values", R"(mismatch TrainingArguments values)"},
        {"trainer_mismatch_key", "- ds ", R"(^\s*- ds ([A-Za-z0-9_.]+)=(\S+) vs hf )"},
        // Python comparing a string with a number: in DeepSpeed's frames, a config value still "auto".
        {"str_number_compare", "not supported between instances of",
         R"(TypeError: '[<>]=?' not supported between instances of ('str' and '(int|float)'|'(int|float)' and 'str'))"},
        {"deepspeed_frame", "deepspeed", R"([/\\]deepspeed[/\\](runtime|ops|utils|accelerator|checkpoint|launcher|comm)[/\\])"},
        {"auto_unresolved", "", R"(set an integer value in .train_micro_batch_size_per_gpu|requires you to pass at least one of training or evaluation dataloaders|["'`]auto["'`] .{0,40}(is not|not supported|must be|cannot))"},
        // NCCL's shared-memory transport failing: /dev/shm too small (docker's 64 MB default) or full.
        {"nccl_shm", "", R"(Error while creating shared memory segment|posix_fallocate failed|NCCL WARN.*/dev/shm)"},
        // NCCL's network transport failing: a peer's connection reset, InfiniBand errors.
        {"nccl_network", "", R"(ncclRemoteError|remote process exited or there was a network error|NET/IB\s*:.*(error|failed)|\bibv_\w+ failed|NCCL WARN.*Connection (reset by peer|closed by))"},
        // A rank waiting for rank 0 to create the communicator (the TCP store timed out).
        {"store_timeout", "", R"(retrieving ncclUniqueId from \[0\] via c10d key-value store|store->get\('0'\) got error|Socket Timeout|Timed out initializing process group in store based barrier)"},
        // DeepSpeed's offload set-up, and its host-memory line (see_memory_usage).
        {"offload_init", "", R"(DeepSpeedZeRoOffload initialize|Before creating fp16 partitions|creating fp16 partitions)"},
        {"cpu_memory_line", "CPU Virtual Memory", R"(CPU Virtual Memory:\s+used = ([0-9.]+) GB, percent = ([0-9.]+)%)"},
        // Context for a hang: preprocessing progress, or evaluation / generation / saving.
        {"preprocessing", "", R"(^\s*(Map|Filter|Running tokenizer|Tokenizing|Grouping texts|Converting format|Generating train split)\b.*\d+%?)"},
        {"eval_work", "", R"(\*\*\*\*\* Running Evaluation|Evaluating|\bevaluate\(|\.generate\(|Saving model checkpoint)"},
        {"generate_work", "", R"(\.generate\(|generation/utils\.py|greedy_search|_sample\(|synced_gpus|generated \d+ token\(s\) after step)"},
        // A forward some ranks ran alone: zrepro's rank-0 evaluation and a generation a rank left
        // at its own end of sequence ([Note: a forward on some ranks], trainer/loop/rank_work.h).
        {"forward_alone", "", R"(eval after step \d+: loss \S+ \(rank 0 alone\)|generated \d+ token\(s\) after step \d+ \(end of sequence\) in \d+ forward)"},
        // ZeRO-3 gathers that differ across ranks: two all-gathers of different sizes met (zrepro's
        // signature check), or experts named in the mismatch (gloo's abort inside an expert's fetch).
        {"divergent_gathers", "", R"(ranks disagree on the next collective: rank \d+ all_gather\([^)]*\); rank \d+ all_gather|disagree on collective #\d+: rank 0 all_gather in \d+ \S+ out \d+ \[[^\]]*\], rank \d+ all_gather|experts\.\d+\.)"},
        {"batch_assertion", "train_batch_size is not equal",
         R"(train_batch_size is not equal to micro_batch_per_gpu \* gradient_acc_step \* world_size\s*(\d+)\s*!=\s*(\d+)\s*\*\s*(\d+)\s*\*\s*(\d+))"},
        // DeepSpeed's zero_to_fp32 at work (its own lines), and a process the kernel killed for memory.
        {"zero_to_fp32", "", R"(Processing zero checkpoint '|Detected checkpoint of type zero stage (\d+), world_size: (\d+))"},
        {"host_killed", "Killed", R"(^\s*Killed\s*$|Out of memory: Killed process)"},
        // A launcher reporting a worker SIGKILLed (torchrun's elastic agent, the deepspeed launcher).
        {"sigkill", "", R"(exitcode: -9\b|return code = -9\b|Signals\.SIGKILL|sigkill_handler\] Killing subprocess)"},
        // ZeRO-3's 16-bit consolidation at a save (save_model with stage3_gather_16bit_weights_on_model_save).
        {"save_gather", "", R"(16-bit model gathered for pytorch_model\.bin|_zero3_consolidated_16bit_state_dict)"},
        // load_checkpoint at another data-parallel world size (ZeRORuntimeException, engine.py).
        {"checkpoint_world_size", "used a DP world size of",
         R"(used a DP world size of (\d+) but the current world size is (\d+))"},
        // A ZeRO checkpoint being loaded, and a flat tensor of another size than the one saved.
        // (a save names the same files: "Saving ... zero_pp_rank_0_mp_rank_00_model_states.pt" is no load)
        {"zero_checkpoint_load", "", R"((Loading|Loaded) checkpoint from \S*zero_pp_rank_\d+_mp_rank_\d+_(model|optim)_states\.pt|Attempting to resume from|_load_zero_checkpoint|in load_checkpoint\b)"},
        {"tensor_size_mismatch", "must match the size of tensor",
         R"(The size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\))"},
        {"overflow", "OVERFLOW!", R"(OVERFLOW! Rank (\d+) Skipping step\.?(?: Attempted loss scale: ([0-9.]+(?:[eE][-+]?\d+)?))?)"},
        {"loss_scale_minimum", "loss scale already at minimum", R"(Current loss scale already at minimum)"},
        {"watchdog_timeout", "Watchdog caught collective operation timeout",
         R"(Watchdog caught collective operation timeout)"},
        // Without "Watchdog caught": the work's own timeout line (older PyTorch, NCCL's abort).
        {"watchdog_timeout", "WorkNCCL(", R"(WorkNCCL\(SeqNum=\d+.*(Timeout|timed out|ran for))"},
        // TORCH_DISTRIBUTED_DEBUG=DETAIL's check of every collective (ProcessGroupWrapper) says it outright.
        {"collective_mismatch", "", R"(Received data size doesn't match expected size|ranks disagree on the next collective|Collective mismatch caught|Detected mismatch between collectives on ranks)"},
        {"pinned_memory", "", R"((cudaHostAlloc|pin_memory|page-locked|pinned host memory|mlock).*(fail|error|cannot|unable|exceed|more than this process may lock))"},
        {"memory_line", "Max_MA", R"(MA ([0-9.]+) GB\s+Max_MA ([0-9.]+) GB\s+CA ([0-9.]+) GB\s+Max_CA ([0-9.]+) GB)"},
        {"straggler", "is the straggler", R"(rank (\d+) is the straggler)"},
        // Speed, not failure: DeepSpeed's wall_clock_breakdown timer line (utils/timer.py),
        // and whether the job offloads (its config print) with pageable buffers.
        {"wall_clock", "time (ms)", R"(time \(ms\) \|(.*))"},
        {"offload_cpu", "offload_", R"(offload_(optimizer|param)[^\n]{0,80}?\bcpu\b)"},
        {"offload_pageable", "pin_memory", R"(offload_(optimizer|param)[^\n)]{0,80}?cpu[^\n)]{0,160}?pin_memory\W{0,4}false)"},
        // Context, not failures: the ZeRO stage and how many steps completed.
        {"zero_stage", "stage", R"(zero_stage=(\d)|['"]stage['"]:\s*(\d)|zero_optimization_stage \.+ (\d))"},
        {"completed_steps", "step", R"(\bstep=(\d+)|(\d+) steps completed)"},
        // zrepro's scale-down table: each model state's share of the capacity (toy column).
        {"model_state_share", "%", R"(^\s+(params|grads|optimizer_states)\s+([0-9.]+)%\s+([0-9.]+)%\s*$)"},
  };
  return f;
}

// [Note: one pass over a line] Every line is read by one RE2::Set holding every pattern a
// plain line may need: the fingerprints (case-insensitive), the traceback frames that name
// a training phase, and the error-looking words of a line nothing else matched. The set
// says which of them match in one pass of its automaton (linear in the line, whatever the
// number of patterns); only the patterns it names run again, for their capture groups.
// A log of 100 MB is read at the speed of the disk (bench/diagnose_read.sh).
enum class Extra { adam_code, partition, init, step, backward, forward, errorish };
struct ExtraPattern {
  Extra kind;
  const char* pattern;
};
const ExtraPattern kExtras[] = {
    // A traceback's source line from Adam's update names the step even without its frame.
    {Extra::adam_code, R"(exp_avg_sq|exp_avg\.|bias_correction\d?_?sqrt)"},
    // Where in training a line of a traceback is: DeepSpeed's frames name the phase.
    {Extra::partition, R"(initialize_optimizer_states|_create_fp32_partitions|_setup_for_real_optimizer|partition_optimizer)"},
    {Extra::init, R"(deepspeed\.initialize|_configure_zero_optimizer|_configure_optimizer|DeepSpeedEngine\.__init__|engine\.py.*__init__|from_pretrained|in _load_pretrained_model|trainer\.py.*in __init__|accelerator\.prepare|in _move_model_to_device|in _wrap_model|load_state_dict|in _prepare_deepspeed)"},
    {Extra::step, R"(optimizer\.step|in step$|in _optimizer_step|in _take_model_step|adamw?\.py|_(single|multi)_tensor_adamw?|in _update_)"},
    {Extra::backward, R"(in backward|\.backward\(|reduce_ipg_grads|average_tensor)"},
    {Extra::forward, R"(in forward|\.forward\(|in _call_impl|in generate)"},
    {Extra::errorish, R"((?i)error|exception|traceback|fail|abort|killed|timeout|nan)"},
};
constexpr const char* kPhaseName[] = {"step", "partition", "init", "step", "backward", "forward"};

RE2::Options options() {
  RE2::Options o;
  o.set_log_errors(false);
  o.set_max_mem(64 << 20);
  return o;
}

// The patterns compiled once: each fingerprint's own RE2 (for its groups) and the set.
struct Compiled {
  std::vector<std::unique_ptr<RE2>> fingerprint;
  RE2::Set set{options(), RE2::UNANCHORED};
  Compiled() {
    for (const Fingerprint& f : fingerprints()) {
      fingerprint.push_back(std::make_unique<RE2>(std::string("(?i)") + f.pattern, options()));
      set.Add(std::string("(?i)") + f.pattern, nullptr);
    }
    for (const ExtraPattern& e : kExtras) set.Add(e.pattern, nullptr);
    set.Compile();
  }
  static const Compiled& get() {
    static const Compiled c;
    return c;
  }
};

// A match's capture groups (group 0 the whole match); an unmatched group has no data.
struct Groups {
  std::vector<re2::StringPiece> g;
  bool matched(size_t i) const { return i < g.size() && g[i].data() != nullptr; }
  std::string str(size_t i) const { return matched(i) ? std::string(g[i].data(), g[i].size()) : std::string(); }
};

bool search(const RE2& re, const std::string& line, Groups& m) {
  m.g.assign(static_cast<size_t>(re.NumberOfCapturingGroups()) + 1, re2::StringPiece());
  return re.Match(line, 0, line.size(), RE2::UNANCHORED, m.g.data(), static_cast<int>(m.g.size()));
}

// A pattern compiled once, by its text (the figures' patterns below).
const RE2& re(const char* pattern) {
  static std::map<const char*, std::unique_ptr<RE2>> cache;
  auto& slot = cache[pattern];
  if (!slot) slot = std::make_unique<RE2>(pattern, options());
  return *slot;
}
std::string trimmed(const std::string& s) { return s.size() > 300 ? s.substr(0, 297) + "..." : s; }

// A run of digits from a log as a number; none past int64 (a garbled or hostile line: the
// log fuzzer found "[rank99999999999]" ending diagnose in an uncaught out_of_range).
std::optional<int64_t> whole(const std::string& digits) {
  try {
    return std::stoll(digits);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// figure = the number, or nothing when it is not one.
void set_whole(std::optional<int64_t>& figure, const std::string& digits) {
  if (const auto v = whole(digits)) figure = *v;
}

double parse_number(const std::string& s) {
  try {
    return std::stod(s);
  } catch (const std::exception&) {
    return -1;
  }
}

// The figures of a PyTorch OOM message (any version since 1.x) into numbers: the first
// pattern that gives a figure sets it.
void read_oom_numbers(const std::string& line, LogFigures& n) {
  using Bytes = std::optional<int64_t> LogFigures::*;
  static const std::pair<Bytes, const char*> fields[] = {
      {&LogFigures::request_bytes, R"(Tried to allocate ([0-9.]+) ?([KMGT]i?B|bytes))"},
      {&LogFigures::capacity_bytes, R"(total capacity of ([0-9.]+) ?([KMGT]i?B|bytes))"},
      {&LogFigures::free_bytes, R"(of which ([0-9.]+) ?([KMGT]i?B|bytes) is free|([0-9.]+) ?([KMGT]i?B|bytes) free)"},
      {&LogFigures::reserved_unallocated_bytes,
       R"(([0-9.]+) ?([KMGT]i?B|bytes) is reserved by PyTorch but unallocated)"},
      {&LogFigures::allocated_bytes, R"(([0-9.]+) ?([KMGT]i?B|bytes) is allocated by PyTorch|([0-9.]+) ?([KMGT]i?B|bytes) already allocated)"},
      // PyTorch 1.x: "(GPU 0; 15.78 GiB total capacity; 14.22 GiB already allocated; 1.75 MiB free; 14.31 GiB reserved in total by PyTorch)"
      {&LogFigures::capacity_bytes, R"(([0-9.]+) ?([KMGT]i?B|bytes) total capacity)"},
      {&LogFigures::reserved_bytes, R"(([0-9.]+) ?([KMGT]i?B|bytes) reserved in total by PyTorch)"},
      {&LogFigures::process_bytes, R"(this process has ([0-9.]+) ?([KMGT]i?B|bytes) memory in use)"}};
  Groups m;
  for (const auto& [figure, pattern] : fields) {
    if (n.*figure || !search(re(pattern), line, m)) continue;
    const size_t g = m.matched(1) ? 1 : 3;
    const int64_t b = parse_printed_bytes(m.str(g), m.str(g + 1));
    if (b >= 0) n.*figure = b;
  }
  if (!n.phase && search(re(R"(\(category (\w+), phase (\w+)\))"), line, m)) n.category = m.str(1), n.phase = m.str(2);
}

// Where in training a line of a traceback is, from the set's answer for the line
// ([Note: one pass over a line]): DeepSpeed's frames name the phase. Python prints the
// frames before the exception, so the last hint before the OOM line counts.
std::string phase_hint_of(const std::string& line, const std::vector<bool>& extra) {
  if (extra[static_cast<size_t>(Extra::adam_code)]) return "step";
  if (line.find("File ") == std::string::npos && line.find("in ") == std::string::npos) return "";
  for (Extra e : {Extra::partition, Extra::init, Extra::step, Extra::backward, Extra::forward})
    if (extra[static_cast<size_t>(e)]) return kPhaseName[static_cast<size_t>(e)];
  return "";
}

// The rank a line speaks for ("[rank3]:", "[Rank 3]"), or -1.
// The pattern runs only near each "ank" of the line (a window of 64 bytes from 16 before it:
// RE2 keeps the whole line as context, so ^ still means the line's start), not over the
// whole line: most lines of a multi-rank log carry a "[rankN]:" prefix.
int rank_of(const std::string& line) {
  static const RE2& rank = re(R"((?:^|\[)\s*[Rr]ank\s*(\d+)\s*[\]:])");
  re2::StringPiece digits[2];
  bool found = false;
  for (size_t at = line.find("ank"); at != std::string::npos && !found; at = line.find("ank", at + 1)) {
    const size_t from = at > 16 ? at - 16 : 0, to = std::min(line.size(), at + 48);
    found = rank.Match(line, from, to, RE2::UNANCHORED, digits, 2);
  }
  if (!found) return -1;
  const std::optional<int64_t> r = whole(std::string(digits[1].data(), digits[1].size()));
  return r && *r <= std::numeric_limits<int>::max() ? static_cast<int>(*r) : -1;
}

void note_rank(const std::string& line, Scan& s) {
  const int rank = rank_of(line);
  std::vector<int>& seen = s.numbers.ranks_seen;
  if (rank >= 0 && seen.size() < 1024 && std::find(seen.begin(), seen.end(), rank) == seen.end()) seen.push_back(rank);
}

// "| fwd: 24.59 | bwd: 62.84 | ... | step: 2.15": the global timers summed over every line
// (DeepSpeed resets them at each print); the *_microstep timers only when no global ones.
void read_wall_clock(const std::string& fields, LogFigures& n) {
  std::map<std::string, double>& w = n.wall_clock_ms ? *n.wall_clock_ms : n.wall_clock_ms.emplace();
  re2::StringPiece rest(fields);
  for (std::string name, value; RE2::FindAndConsume(&rest, re(R"((\w+):\s*([0-9.]+))"), &name, &value);) {
    const bool micro = name.size() > 10 && name.compare(name.size() - 10, 10, "_microstep") == 0;
    if (micro) name = name.substr(0, name.size() - 10);
    // DeepSpeed's timer names up to about 0.5: forward, backward, backward_allreduce, step.
    static const std::map<std::string, std::string> old_names = {
        {"forward", "fwd"}, {"backward", "bwd"}, {"backward_allreduce", "bwd_allreduce"}};
    if (const auto old = old_names.find(name); old != old_names.end()) name = old->second;
    if (name != "fwd" && name != "bwd" && name != "bwd_allreduce" && name != "step") continue;
    w[(micro ? "micro_" : "") + name] += parse_number(value);
  }
}

// [Note: every rank's watchdog line] A hang's causes differ in what each rank waited in:
// the same SeqNum with different sizes (the ranks gathered different parameters), one
// rank ahead (different SeqNums: one issued more collectives), one rank alone timing out
// (it ran extra work the others never joined). Every rank's (SeqNum, OpType, NumelIn,
// NumelOut) is kept in numbers.watchdog, one entry per rank; the first names the
// collective (collective_seq, collective_op, timeout_ms, ran_ms).
void read_watchdog_line(const std::string& line, LogFigures& n) {
  Groups k;
  WatchdogEntry w;
  w.rank = rank_of(line);
  if (search(re(R"(SeqNum=(\d+))"), line, k)) set_whole(w.seq, k.str(1));
  if (search(re(R"(OpType=(\w+))"), line, k)) w.op = k.str(1);
  if (search(re(R"(NumelIn=(\d+))"), line, k)) set_whole(w.numel_in, k.str(1));
  if (search(re(R"(NumelOut=(\d+))"), line, k)) set_whole(w.numel_out, k.str(1));
  std::vector<WatchdogEntry>& all = n.watchdog;
  const bool seen = std::any_of(all.begin(), all.end(), [&](const WatchdogEntry& x) { return x.rank == w.rank; });
  if (!seen && all.size() < 64) all.push_back(w);
  if (n.collective_seq) return;  // the first rank's report names the collective
  n.collective_seq = w.seq;
  if (w.op) n.collective_op = w.op;
  if (search(re(R"(Timeout\(ms\)=(\d+))"), line, k)) set_whole(n.timeout_ms, k.str(1));
  if (search(re(R"(ran for (\d+) milliseconds)"), line, k)) set_whole(n.ran_ms, k.str(1));
}

// DeepSpeed's see_memory_usage line before the failure: what the model states took, and
// every such line in order (the job's device memory over its set-up and steps, GB as
// DeepSpeed prints them; the label is the see_memory_usage line just before, if any).
void read_memory_line(const Groups& m, Scan& s) {
  if (!s.found.count("oom")) s.numbers.allocated_gb_before_failure = parse_number(m.str(1));
  if (s.numbers.memory_timeline.size() < 200)
    s.numbers.memory_timeline.push_back({s.last_line, s.last_label, parse_number(m.str(1)), parse_number(m.str(2)),
                                         parse_number(m.str(3)), parse_number(m.str(4))});
}

void read_overflow(const Groups& m, LogFigures& n) {
  n.overflow_steps = n.overflow_steps.value_or(0) + 1;
  if (!m.matched(2)) return;
  const double scale = parse_number(m.str(2));
  n.last_attempted_loss_scale = scale;
  if (scale >= 0 && scale < n.min_attempted_loss_scale.value_or(1e300)) n.min_attempted_loss_scale = scale;
  if (scale >= 0 && scale <= 1) n.overflows_at_scale_1 = n.overflows_at_scale_1.value_or(0) + 1;
}

// A progress bar's elapsed time ("[32:13<53:59", "[1:02:03<..."): its last update's (tqdm
// writes its updates to a file joined by \r on one line), so the log's last bar is the one read.
void read_progress_elapsed(const std::string& line, LogFigures& n) {
  re2::StringPiece rest(line);
  std::string h, m, s;
  while (RE2::FindAndConsume(&rest, re(R"(\[(?:(\d{1,3}):)?(\d{1,2}):(\d{2})<)"), &h, &m, &s))
    n.preprocessing_elapsed_s = whole(h).value_or(0) * 3600 + whole(m).value_or(0) * 60 + whole(s).value_or(0);
}

// What a matched fingerprint's line adds to the figures, by the fingerprint's id.
using FigureReader = void (*)(const Groups& m, const std::string& line, Scan& s);
const std::map<std::string, FigureReader>& figure_readers() {
  static const std::map<std::string, FigureReader> r = {
      {"oom", [](const Groups&, const std::string& line, Scan& s) { read_oom_numbers(line, s.numbers); }},
      {"batch_assertion",
       [](const Groups& m, const std::string&, Scan& s) {
         set_whole(s.numbers.train_batch_size, m.str(1));
         set_whole(s.numbers.micro_batch, m.str(2));
         set_whole(s.numbers.grad_accum, m.str(3));
         set_whole(s.numbers.world_size, m.str(4));
       }},
      {"zero_to_fp32",
       [](const Groups& m, const std::string&, Scan& s) {
         if (!m.matched(1)) return;
         set_whole(s.numbers.zero_stage, m.str(1));
         set_whole(s.numbers.world_size, m.str(2));
       }},
      {"checkpoint_world_size",
       [](const Groups& m, const std::string&, Scan& s) {
         set_whole(s.numbers.saved_world_size, m.str(1));
         set_whole(s.numbers.world_size, m.str(2));
       }},
      {"overflow", [](const Groups& m, const std::string&, Scan& s) { read_overflow(m, s.numbers); }},
      {"cache_flush",
       [](const Groups& m, const std::string&, Scan& s) { set_whole(s.numbers.allocator_cache_flushes, m.str(1)); }},
      {"trainer_mismatch_key",
       [](const Groups& m, const std::string&, Scan& s) {
         if (s.numbers.trainer_mismatch.size() < 64) s.numbers.trainer_mismatch[m.str(1)] = m.str(2);
       }},
      {"watchdog_timeout", [](const Groups&, const std::string& line, Scan& s) { read_watchdog_line(line, s.numbers); }},
      {"memory_line", [](const Groups& m, const std::string&, Scan& s) { read_memory_line(m, s); }},
      {"model_state_share",
       [](const Groups& m, const std::string&, Scan& s) {
         s.numbers.model_states_share = s.numbers.model_states_share.value_or(0.0) + parse_number(m.str(3)) / 100.0;
       }},
      {"zero_stage",
       [](const Groups& m, const std::string&, Scan& s) {
         set_whole(s.numbers.zero_stage, m.matched(1) ? m.str(1) : m.matched(2) ? m.str(2) : m.str(3));
       }},
      // DeepSpeed's step=N lines count before the failure; zrepro's "(N steps completed)" describes it.
      {"completed_steps",
       [](const Groups& m, const std::string&, Scan& s) {
         if (m.matched(2)) set_whole(s.numbers.completed_steps, m.str(2));
         else if (!s.found.count("oom")) set_whole(s.numbers.completed_steps, m.str(1));
       }},
      {"straggler", [](const Groups& m, const std::string&, Scan& s) { set_whole(s.numbers.straggler_rank, m.str(1)); }},
      {"preprocessing", [](const Groups&, const std::string& line, Scan& s) { read_progress_elapsed(line, s.numbers); }},
      {"cpu_memory_line",
       [](const Groups& m, const std::string&, Scan& s) {
         const double percent = parse_number(m.str(2));
         if (percent >= 0) s.numbers.host_memory_percent = std::max(s.numbers.host_memory_percent.value_or(0), percent);
       }},
      {"tensor_size_mismatch",
       [](const Groups& m, const std::string&, Scan& s) {
         if (s.numbers.size_mismatch_a) return;  // the first error is the failure
         set_whole(s.numbers.size_mismatch_a, m.str(1));
         set_whole(s.numbers.size_mismatch_b, m.str(2));
       }},
      {"wall_clock", [](const Groups& m, const std::string&, Scan& s) { read_wall_clock(m.str(1), s.numbers); }},
  };
  return r;
}

// Each fingerprint's reader (null: its line carries no figure), by table index, looked up once.
const std::vector<FigureReader>& readers_by_index() {
  static const std::vector<FigureReader> r = [] {
    std::vector<FigureReader> v;
    for (const Fingerprint& f : fingerprints()) {
      const auto it = figure_readers().find(f.id);
      v.push_back(it == figure_readers().end() ? nullptr : it->second);
    }
    return v;
  }();
  return r;
}

// A line without a terminal box's borders (rich / typer tracebacks draw "│ ... │").
std::string unboxed(const std::string& line) {
  std::string t = line;
  for (const char* box : {"\xe2\x94\x82", "\xe2\x94\x83", "|"}) {  // │ ┃ |
    const std::string b = box;
    const size_t first = t.find_first_not_of(' ');
    if (first != std::string::npos && t.compare(first, b.size(), b) == 0) t = t.substr(first + b.size());
    const size_t last = t.find_last_not_of(' ');
    if (last != std::string::npos && last + 1 >= b.size() && t.compare(last + 1 - b.size(), b.size(), b) == 0)
      t = t.substr(0, last + 1 - b.size());
  }
  const size_t a = t.find_first_not_of(' '), z = t.find_last_not_of(' ');
  return a == std::string::npos ? std::string() : t.substr(a, z - a + 1);
}

// What the set says of a line: the fingerprints that match (table indices, in table
// order) and which extra patterns do.
struct LineHits {
  std::vector<int> fingerprint;
  std::vector<bool> extra = std::vector<bool>(std::size(kExtras));
};

void hits_of(const std::string& line, LineHits& h) {
  const int n = static_cast<int>(fingerprints().size());
  h.fingerprint.clear();
  std::fill(h.extra.begin(), h.extra.end(), false);
  std::vector<int>& ids = h.fingerprint;
  Compiled::get().set.Match(line, &ids);
  for (int i : ids)
    if (i >= n) h.extra[static_cast<size_t>(i - n)] = true;
  ids.erase(std::remove_if(ids.begin(), ids.end(), [n](int i) { return i >= n; }), ids.end());
  std::sort(ids.begin(), ids.end());
}

}  // namespace

// Every fingerprint the set found on one line (each id once); true when one matched.
bool LogScanner::match_line(const std::string& line, const std::vector<int>& hit) {
  bool matched = false;
  std::vector<std::string_view> ids;  // each id once (two rows may share one)
  static thread_local Groups m;
  for (const int i : hit) {
    const Fingerprint& f = fingerprints()[static_cast<size_t>(i)];
    if (*f.needle && line.find(f.needle) == std::string::npos) continue;
    if (std::find(ids.begin(), ids.end(), f.id) != ids.end()) continue;
    if (!ignored_.empty() && ignored_.count(f.id)) continue;
    if (!search(*Compiled::get().fingerprint[static_cast<size_t>(i)], line, m)) continue;
    matched = true;
    ids.push_back(f.id);
    const std::string id = f.id;
    auto& ev = s_.found[id];
    s_.last_at[id] = at_.no;
    if (ev.size() < 12) ev.push_back({id, at_.no, trimmed(line)});
    if (const FigureReader read = readers_by_index()[static_cast<size_t>(i)]) read(m, line, s_);
    if ((id == "oom" || id == "cuda_error_oom") && !at_.last_hint.empty() && !s_.numbers.phase_hint)
      s_.numbers.phase_hint = at_.last_hint;
    if (id == "oom") at_.oom_follow = 3;
    if (id == "pinned_frame") at_.last_pinned = at_.no;
    // A CUDA OOM raised within a traceback's few frames of a pinned host allocation.
    if (id == "cuda_error_oom" && at_.last_pinned > 0 && at_.no - at_.last_pinned <= 12)
      s_.numbers.pinned_allocation_oom = true;
  }
  return matched;
}

void LogScanner::line(std::string line) {
  ++at_.no;
  s_.last_line = at_.no;
  if (!line.empty() && line.back() == '\r') line.pop_back();
  // "[utils.py:829:see_memory_usage] Before creating fp16 partitions": the next MA line's label.
  if (const size_t k = line.find("see_memory_usage] "); k != std::string::npos && line.find("MA ") == std::string::npos)
    s_.last_label = trimmed(line.substr(k + 18));
  note_rank(line, s_);
  static thread_local LineHits h;
  hits_of(line, h);
  const std::string hint = phase_hint_of(line, h.extra);
  if (!hint.empty()) at_.last_hint = hint;
  if (at_.oom_follow > 0 && !s_.found.count("oom")) at_.oom_follow = 0;
  if (at_.oom_follow > 0) --at_.oom_follow, read_oom_numbers(unboxed(line), s_.numbers);
  bool matched = match_line(line, h.fingerprint);
  // A message a terminal wrapped over three lines (the batch assertion in a rich
  // traceback): the lines joined without their box borders, only where one of them names
  // the batch (the join costs copies no other line needs).
  const bool batch_words = line.find("_size") != std::string::npos;
  if (!matched && (batch_words || at_.batch_words) && !s_.found.count("batch_assertion")) {
    const std::string joined = unboxed(at_.prev2) + " " + unboxed(at_.prev) + " " + unboxed(line);
    if (joined.find("train_batch_size is not") != std::string::npos && joined.find("world_size") != std::string::npos) {
      LineHits j;
      hits_of(joined, j);
      matched = match_line(joined, j.fingerprint);
    }
  }
  at_.batch_words = batch_words || at_.prev_batch_words, at_.prev_batch_words = batch_words;
  at_.prev2.swap(at_.prev), at_.prev.assign(line);  // assign: the buffer is reused, no allocation per line
  if (!matched && s_.error_lines.size() < 5 && h.extra[static_cast<size_t>(Extra::errorish)])
    s_.error_lines.push_back({"closest", at_.no, trimmed(line)});
}

Scan LogScanner::finish() {
  s_.last_line = at_.no;
  return std::move(s_);
}

std::vector<std::string> fingerprint_ids() {
  std::vector<std::string> ids;
  for (const Fingerprint& f : fingerprints())
    if (std::find(ids.begin(), ids.end(), f.id) == ids.end()) ids.push_back(f.id);
  return ids;
}

Scan scan(const std::string& text, const std::set<std::string>& ignored) {
  LogScanner scanner(ignored);
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) scanner.line(std::move(line));
  return scanner.finish();
}

}  // namespace zrepro::diagnosis
