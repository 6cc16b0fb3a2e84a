// See evidence.h.
#include "trainer/diagnose/evidence.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <regex>
#include <sstream>

#include "trainer/diagnose/log_text.h"

namespace zrepro::diagnosis {

namespace {

// One fingerprint: a cheap substring that must be on the line, then the pattern.
struct Fingerprint {
  const char* id;
  const char* needle;
  std::regex pattern;
};

const std::vector<Fingerprint>& fingerprints() {
  static const std::vector<Fingerprint> f = [] {
    auto re = [](const char* p) { return std::regex(p, std::regex::ECMAScript | std::regex::icase); };
    return std::vector<Fingerprint>{
        {"oom", "out of memory", re(R"(CUDA out of memory)")},
        // Context for an OOM: a frame that allocates page-locked host memory.
        {"pinned_frame", "pin", re(R"(pin_memory\(|pin_memory=True|\.pin_memory\b|cudaHostAlloc|_pin_tensor|pinned_(buffer|memory|tensor)|pin memory)")},
        // RuntimeError's form, raised by any CUDA call (a pinned host allocation among them).
        {"cuda_error_oom", "out of memory", re(R"(CUDA error: out of memory|cudaErrorMemoryAllocation)")},
        // ZeRO-3's memory-pressure warning and its re-trace warning (data-dependent modules).
        {"cache_flush", "cache flush", re(R"((\d+) pytorch allocator cache flushes since last step)")},
        {"trace_cache", "trace cache", re(R"(Invalidate trace cache)")},
        // DeepSpeed "auto" values left for a Trainer that never filled them (accelerate without dataloaders, plain scripts).
        // transformers' trainer_config_finalize: an explicit DeepSpeed value against the Trainer's
        // arguments, one "- ds KEY=V vs hf ARG=W" line each.
        {"trainer_mismatch", "mismatch TrainingArguments values", re(R"(mismatch TrainingArguments values)")},
        {"trainer_mismatch_key", "- ds ", re(R"(^\s*- ds ([A-Za-z0-9_.]+)=(\S+) vs hf )")},
        {"auto_unresolved", "", re(R"(set an integer value in .train_micro_batch_size_per_gpu|requires you to pass at least one of training or evaluation dataloaders|["'`]auto["'`] .{0,40}(is not|not supported|must be|cannot))")},
        // NCCL's shared-memory transport failing: /dev/shm too small (docker's 64 MB default) or full.
        {"nccl_shm", "", re(R"(Error while creating shared memory segment|posix_fallocate failed|NCCL WARN.*/dev/shm)")},
        // A rank waiting for rank 0 to create the communicator (the TCP store timed out).
        {"store_timeout", "", re(R"(retrieving ncclUniqueId from \[0\] via c10d key-value store|store->get\('0'\) got error|Socket Timeout)")},
        // DeepSpeed's offload set-up, and its host-memory line (see_memory_usage).
        {"offload_init", "", re(R"(DeepSpeedZeRoOffload initialize|Before creating fp16 partitions|creating fp16 partitions)")},
        {"cpu_memory_line", "CPU Virtual Memory", re(R"(CPU Virtual Memory:\s+used = ([0-9.]+) GB, percent = ([0-9.]+)%)")},
        // Context for a hang: preprocessing progress, or evaluation / generation / saving.
        {"preprocessing", "", re(R"(^\s*(Map|Filter|Running tokenizer|Tokenizing|Grouping texts|Converting format|Generating train split)\b.*\d+%?)")},
        {"eval_work", "", re(R"(\*\*\*\*\* Running Evaluation|Evaluating|\bevaluate\(|\.generate\(|Saving model checkpoint)")},
        {"generate_work", "", re(R"(\.generate\(|generation/utils\.py|greedy_search|_sample\(|synced_gpus|generated \d+ token\(s\) after step)")},
        // A forward some ranks ran alone: zrepro's rank-0 evaluation and a generation a rank left
        // at its own end of sequence ([Note: a forward on some ranks], trainer/loop/rank_work.h).
        {"forward_alone", "", re(R"(eval after step \d+: loss \S+ \(rank 0 alone\)|generated \d+ token\(s\) after step \d+ \(end of sequence\) in \d+ forward)")},
        // ZeRO-3 gathers that differ across ranks: two all-gathers of different sizes met (zrepro's
        // signature check), or experts named in the mismatch (gloo's abort inside an expert's fetch).
        {"divergent_gathers", "", re(R"(ranks disagree on the next collective: rank \d+ all_gather\([^)]*\); rank \d+ all_gather|disagree on collective #\d+: rank 0 all_gather in \d+ \S+ out \d+ \[[^\]]*\], rank \d+ all_gather|experts\.\d+\.)")},
        {"batch_assertion", "train_batch_size is not equal",
         re(R"(train_batch_size is not equal to micro_batch_per_gpu \* gradient_acc_step \* world_size\s*(\d+)\s*!=\s*(\d+)\s*\*\s*(\d+)\s*\*\s*(\d+))")},
        // DeepSpeed's zero_to_fp32 at work (its own lines), and a process the kernel killed for memory.
        {"zero_to_fp32", "", re(R"(Processing zero checkpoint '|Detected checkpoint of type zero stage (\d+), world_size: (\d+))")},
        {"host_killed", "Killed", re(R"(^\s*Killed\s*$|Out of memory: Killed process)")},
        // A launcher reporting a worker SIGKILLed (torchrun's elastic agent, the deepspeed launcher).
        {"sigkill", "", re(R"(exitcode: -9\b|Signals\.SIGKILL|sigkill_handler\] Killing subprocess)")},
        // ZeRO-3's 16-bit consolidation at a save (save_model with stage3_gather_16bit_weights_on_model_save).
        {"save_gather", "", re(R"(16-bit model gathered for pytorch_model\.bin|_zero3_consolidated_16bit_state_dict)")},
        // load_checkpoint at another data-parallel world size (ZeRORuntimeException, engine.py).
        {"checkpoint_world_size", "used a DP world size of",
         re(R"(used a DP world size of (\d+) but the current world size is (\d+))")},
        {"overflow", "OVERFLOW!", re(R"(OVERFLOW! Rank (\d+) Skipping step\.?(?: Attempted loss scale: ([0-9.e+]+))?)")},
        {"loss_scale_minimum", "loss scale already at minimum", re(R"(Current loss scale already at minimum)")},
        {"watchdog_timeout", "Watchdog caught collective operation timeout",
         re(R"(Watchdog caught collective operation timeout)")},
        // Without "Watchdog caught": the work's own timeout line (older PyTorch, NCCL's abort).
        {"watchdog_timeout", "WorkNCCL(", re(R"(WorkNCCL\(SeqNum=\d+.*(Timeout|timed out|ran for))")},
        {"collective_mismatch", "", re(R"(Received data size doesn't match expected size|ranks disagree on the next collective|Collective mismatch caught)")},
        {"pinned_memory", "", re(R"((cudaHostAlloc|pin_memory|page-locked|pinned host memory|mlock).*(fail|error|cannot|unable|exceed|more than this process may lock))")},
        {"memory_line", "Max_MA", re(R"(MA ([0-9.]+) GB\s+Max_MA ([0-9.]+) GB\s+CA ([0-9.]+) GB\s+Max_CA ([0-9.]+) GB)")},
        {"straggler", "is the straggler", re(R"(rank (\d+) is the straggler)")},
        // Speed, not failure: DeepSpeed's wall_clock_breakdown timer line (utils/timer.py),
        // and whether the job offloads (its config print) with pageable buffers.
        {"wall_clock", "time (ms)", re(R"(time \(ms\) \|(.*))")},
        {"offload_cpu", "offload_", re(R"(offload_(optimizer|param)[^\n]{0,80}?\bcpu\b)")},
        {"offload_pageable", "pin_memory", re(R"(offload_(optimizer|param)[^\n)]{0,80}?cpu[^\n)]{0,160}?pin_memory\W{0,4}false)")},
        // Context, not failures: the ZeRO stage and how many steps completed.
        {"zero_stage", "stage", re(R"(zero_stage=(\d)|['"]stage['"]:\s*(\d)|zero_optimization_stage \.+ (\d))")},
        {"completed_steps", "step", re(R"(\bstep=(\d+)|(\d+) steps completed)")},
        // zrepro's scale-down table: each model state's share of the capacity (toy column).
        {"model_state_share", "%", re(R"(^\s+(params|grads|optimizer_states)\s+([0-9.]+)%\s+([0-9.]+)%\s*$)")},
    };
  }();
  return f;
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
  static const std::pair<Bytes, std::regex> fields[] = {
      {&LogFigures::request_bytes, std::regex(R"(Tried to allocate ([0-9.]+) ?([KMGT]i?B|bytes))")},
      {&LogFigures::capacity_bytes, std::regex(R"(total capacity of ([0-9.]+) ?([KMGT]i?B|bytes))")},
      {&LogFigures::free_bytes, std::regex(R"(of which ([0-9.]+) ?([KMGT]i?B|bytes) is free|([0-9.]+) ?([KMGT]i?B|bytes) free)")},
      {&LogFigures::reserved_unallocated_bytes,
       std::regex(R"(([0-9.]+) ?([KMGT]i?B|bytes) is reserved by PyTorch but unallocated)")},
      {&LogFigures::allocated_bytes, std::regex(R"(([0-9.]+) ?([KMGT]i?B|bytes) is allocated by PyTorch|([0-9.]+) ?([KMGT]i?B|bytes) already allocated)")},
      // PyTorch 1.x: "(GPU 0; 15.78 GiB total capacity; 14.22 GiB already allocated; 1.75 MiB free; 14.31 GiB reserved in total by PyTorch)"
      {&LogFigures::capacity_bytes, std::regex(R"(([0-9.]+) ?([KMGT]i?B|bytes) total capacity)")},
      {&LogFigures::reserved_bytes, std::regex(R"(([0-9.]+) ?([KMGT]i?B|bytes) reserved in total by PyTorch)")},
      {&LogFigures::process_bytes, std::regex(R"(this process has ([0-9.]+) ?([KMGT]i?B|bytes) memory in use)")}};
  for (const auto& [figure, re] : fields) {
    std::smatch m;
    if (n.*figure || !std::regex_search(line, m, re)) continue;
    const int g = m[1].matched ? 1 : 3;
    const int64_t b = parse_printed_bytes(m[g].str(), m[g + 1].str());
    if (b >= 0) n.*figure = b;
  }
  std::smatch m;
  static const std::regex cat(R"(\(category (\w+), phase (\w+)\))");
  if (!n.phase && std::regex_search(line, m, cat)) n.category = m[1].str(), n.phase = m[2].str();
}

// Where in training a line of a traceback is: DeepSpeed's frames name the phase. Python
// prints the frames before the exception, so the last hint before the OOM line counts.
std::string phase_hint_of(const std::string& line) {
  static const std::pair<const char*, std::regex> phases[] = {
      {"partition", std::regex(R"(initialize_optimizer_states|_create_fp32_partitions|_setup_for_real_optimizer|partition_optimizer)")},
      {"init", std::regex(R"(deepspeed\.initialize|_configure_zero_optimizer|_configure_optimizer|DeepSpeedEngine\.__init__|engine\.py.*__init__|from_pretrained|in _load_pretrained_model|trainer\.py.*in __init__|accelerator\.prepare|in _move_model_to_device|in _wrap_model|load_state_dict|in _prepare_deepspeed)")},
      {"step", std::regex(R"(optimizer\.step|in step$|in _optimizer_step|in _take_model_step|adamw?\.py|_(single|multi)_tensor_adamw?|in _update_)")},
      {"backward", std::regex(R"(in backward|\.backward\(|reduce_ipg_grads|average_tensor)")},
      {"forward", std::regex(R"(in forward|\.forward\(|in _call_impl|in generate)")}};
  // A traceback's source line from Adam's update names the step even without its frame.
  static const std::regex adam_code(R"(exp_avg_sq|exp_avg\.|bias_correction\d?_?sqrt)");
  if (std::regex_search(line, adam_code)) return "step";
  if (line.find("File ") == std::string::npos && line.find("in ") == std::string::npos) return "";
  for (const auto& [phase, re] : phases)
    if (std::regex_search(line, re)) return phase;
  return "";
}


// The rank a line speaks for ("[rank3]:", "[Rank 3]"), or -1.
int rank_of(const std::string& line) {
  static const std::regex rank(R"((?:^|\[)\s*[Rr]ank\s*(\d+)\s*[\]:])");
  std::smatch m;
  if (!std::regex_search(line, m, rank)) return -1;
  const std::optional<int64_t> r = whole(m[1].str());
  return r && *r <= std::numeric_limits<int>::max() ? static_cast<int>(*r) : -1;
}

void note_rank(const std::string& line, Scan& s) {
  const int rank = rank_of(line);
  std::vector<int>& seen = s.numbers.ranks_seen;
  if (rank >= 0 && std::find(seen.begin(), seen.end(), rank) == seen.end()) seen.push_back(rank);
}

// "| fwd: 24.59 | bwd: 62.84 | ... | step: 2.15": the global timers summed over every line
// (DeepSpeed resets them at each print); the *_microstep timers only when no global ones.
void read_wall_clock(const std::string& fields, LogFigures& n) {
  static const std::regex pair(R"((\w+):\s*([0-9.]+))");
  std::map<std::string, double>& w = n.wall_clock_ms ? *n.wall_clock_ms : n.wall_clock_ms.emplace();
  for (auto it = std::sregex_iterator(fields.begin(), fields.end(), pair); it != std::sregex_iterator(); ++it) {
    std::string name = (*it)[1].str();
    const bool micro = name.size() > 10 && name.compare(name.size() - 10, 10, "_microstep") == 0;
    if (micro) name = name.substr(0, name.size() - 10);
    // DeepSpeed's timer names up to about 0.5: forward, backward, backward_allreduce, step.
    static const std::map<std::string, std::string> old_names = {
        {"forward", "fwd"}, {"backward", "bwd"}, {"backward_allreduce", "bwd_allreduce"}};
    if (const auto it = old_names.find(name); it != old_names.end()) name = it->second;
    if (name != "fwd" && name != "bwd" && name != "bwd_allreduce" && name != "step") continue;
    w[(micro ? "micro_" : "") + name] += parse_number((*it)[2].str());
  }
}

// [Note: every rank's watchdog line] A hang's causes differ in what each rank waited in:
// the same SeqNum with different sizes (the ranks gathered different parameters), one
// rank ahead (different SeqNums: one issued more collectives), one rank alone timing out
// (it ran extra work the others never joined). Every rank's (SeqNum, OpType, NumelIn,
// NumelOut) is kept in numbers.watchdog, one entry per rank; the first names the
// collective (collective_seq, collective_op, timeout_ms, ran_ms).
void read_watchdog_line(const std::string& line, LogFigures& n) {
  static const std::regex seq(R"(SeqNum=(\d+))"), op(R"(OpType=(\w+))"), to(R"(Timeout\(ms\)=(\d+))"),
      ran(R"(ran for (\d+) milliseconds)"), in(R"(NumelIn=(\d+))"), out(R"(NumelOut=(\d+))");
  std::smatch k;
  WatchdogEntry w;
  w.rank = rank_of(line);
  if (std::regex_search(line, k, seq)) set_whole(w.seq, k[1].str());
  if (std::regex_search(line, k, op)) w.op = k[1].str();
  if (std::regex_search(line, k, in)) set_whole(w.numel_in, k[1].str());
  if (std::regex_search(line, k, out)) set_whole(w.numel_out, k[1].str());
  std::vector<WatchdogEntry>& all = n.watchdog;
  const bool seen = std::any_of(all.begin(), all.end(), [&](const WatchdogEntry& x) { return x.rank == w.rank; });
  if (!seen && all.size() < 64) all.push_back(w);
  if (n.collective_seq) return;  // the first rank's report names the collective
  n.collective_seq = w.seq;
  if (w.op) n.collective_op = w.op;
  if (std::regex_search(line, k, to)) set_whole(n.timeout_ms, k[1].str());
  if (std::regex_search(line, k, ran)) set_whole(n.ran_ms, k[1].str());
}

// DeepSpeed's see_memory_usage line before the failure: what the model states took, and
// every such line in order (the job's device memory over its set-up and steps, GB as
// DeepSpeed prints them; the label is the see_memory_usage line just before, if any).
void read_memory_line(const std::smatch& m, Scan& s) {
  if (!s.found.count("oom")) s.numbers.allocated_gb_before_failure = parse_number(m[1].str());
  if (s.numbers.memory_timeline.size() < 200)
    s.numbers.memory_timeline.push_back({s.last_line, s.last_label, parse_number(m[1].str()), parse_number(m[2].str()),
                                         parse_number(m[3].str()), parse_number(m[4].str())});
}

void read_overflow(const std::smatch& m, LogFigures& n) {
  n.overflow_steps = n.overflow_steps.value_or(0) + 1;
  if (!m[2].matched) return;
  const double scale = parse_number(m[2].str());
  n.last_attempted_loss_scale = scale;
  if (scale >= 0 && scale < n.min_attempted_loss_scale.value_or(1e300)) n.min_attempted_loss_scale = scale;
  if (scale >= 0 && scale <= 1) n.overflows_at_scale_1 = n.overflows_at_scale_1.value_or(0) + 1;
}

// What a matched fingerprint's line adds to the figures, by the fingerprint's id.
using FigureReader = void (*)(const std::smatch& m, const std::string& line, Scan& s);
const std::map<std::string, FigureReader>& figure_readers() {
  static const std::map<std::string, FigureReader> r = {
      {"oom", [](const std::smatch&, const std::string& line, Scan& s) { read_oom_numbers(line, s.numbers); }},
      {"batch_assertion",
       [](const std::smatch& m, const std::string&, Scan& s) {
         set_whole(s.numbers.train_batch_size, m[1].str());
         set_whole(s.numbers.micro_batch, m[2].str());
         set_whole(s.numbers.grad_accum, m[3].str());
         set_whole(s.numbers.world_size, m[4].str());
       }},
      {"zero_to_fp32",
       [](const std::smatch& m, const std::string&, Scan& s) {
         if (!m[1].matched) return;
         set_whole(s.numbers.zero_stage, m[1].str());
         set_whole(s.numbers.world_size, m[2].str());
       }},
      {"checkpoint_world_size",
       [](const std::smatch& m, const std::string&, Scan& s) {
         set_whole(s.numbers.saved_world_size, m[1].str());
         set_whole(s.numbers.world_size, m[2].str());
       }},
      {"overflow", [](const std::smatch& m, const std::string&, Scan& s) { read_overflow(m, s.numbers); }},
      {"cache_flush",
       [](const std::smatch& m, const std::string&, Scan& s) { set_whole(s.numbers.allocator_cache_flushes, m[1].str()); }},
      {"trainer_mismatch_key",
       [](const std::smatch& m, const std::string&, Scan& s) { s.numbers.trainer_mismatch[m[1].str()] = m[2].str(); }},
      {"watchdog_timeout", [](const std::smatch&, const std::string& line, Scan& s) { read_watchdog_line(line, s.numbers); }},
      {"memory_line", [](const std::smatch& m, const std::string&, Scan& s) { read_memory_line(m, s); }},
      {"model_state_share",
       [](const std::smatch& m, const std::string&, Scan& s) {
         s.numbers.model_states_share = s.numbers.model_states_share.value_or(0.0) + parse_number(m[3].str()) / 100.0;
       }},
      {"zero_stage",
       [](const std::smatch& m, const std::string&, Scan& s) {
         set_whole(s.numbers.zero_stage, m[1].matched ? m[1].str() : m[2].matched ? m[2].str() : m[3].str());
       }},
      // DeepSpeed's step=N lines count before the failure; zrepro's "(N steps completed)" describes it.
      {"completed_steps",
       [](const std::smatch& m, const std::string&, Scan& s) {
         if (m[2].matched) set_whole(s.numbers.completed_steps, m[2].str());
         else if (!s.found.count("oom")) set_whole(s.numbers.completed_steps, m[1].str());
       }},
      {"straggler", [](const std::smatch& m, const std::string&, Scan& s) { set_whole(s.numbers.straggler_rank, m[1].str()); }},
      {"wall_clock", [](const std::smatch& m, const std::string&, Scan& s) { read_wall_clock(m[1].str(), s.numbers); }},
  };
  return r;
}

void read_fingerprint_numbers(const std::string& id, const std::smatch& m, const std::string& line, Scan& s) {
  if (const auto it = figure_readers().find(id); it != figure_readers().end()) it->second(m, line, s);
}

// Where the scan is within the log: the phase the last traceback frame named, the last
// pinned-allocation frame, the previous line (for a message wrapped over two), the lines
// left that may carry the figures of an OOM message wrapped after its first line.
struct ScanState {
  int no = 0, last_pinned = 0, oom_follow = 0;
  std::string last_hint, prev, prev2;
};

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

// Every fingerprint on one line (each id once); true when one matched.
bool match_line(const std::string& line, Scan& s, ScanState& st) {
  bool matched = false;
  std::vector<std::string> ids;
  for (const auto& f : fingerprints()) {
    if (*f.needle && line.find(f.needle) == std::string::npos) continue;
    if (std::find(ids.begin(), ids.end(), f.id) != ids.end()) continue;
    std::smatch m;
    if (!std::regex_search(line, m, f.pattern)) continue;
    matched = true;
    ids.push_back(f.id);
    auto& ev = s.found[f.id];
    if (ev.size() < 12) ev.push_back({f.id, st.no, trimmed(line)});
    read_fingerprint_numbers(f.id, m, line, s);
    const std::string id = f.id;
    if ((id == "oom" || id == "cuda_error_oom") && !st.last_hint.empty() && !s.numbers.phase_hint)
      s.numbers.phase_hint = st.last_hint;
    if (id == "oom") st.oom_follow = 3;
    if (id == "pinned_frame") st.last_pinned = st.no;
    // A CUDA OOM raised within a traceback's few frames of a pinned host allocation.
    if (id == "cuda_error_oom" && st.last_pinned > 0 && st.no - st.last_pinned <= 12)
      s.numbers.pinned_allocation_oom = true;
  }
  return matched;
}

}  // namespace

Scan scan(const std::string& text) {
  Scan s;
  ScanState st;
  std::istringstream in(text);
  static const std::regex errorish(R"(error|exception|traceback|fail|abort|killed|timeout|nan)", std::regex::icase);
  for (std::string line; std::getline(in, line);) {
    ++st.no;
    s.last_line = st.no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    // "[utils.py:829:see_memory_usage] Before creating fp16 partitions": the next MA line's label.
    if (const size_t k = line.find("see_memory_usage] "); k != std::string::npos && line.find("MA ") == std::string::npos)
      s.last_label = trimmed(line.substr(k + 18));
    note_rank(line, s);
    const std::string hint = phase_hint_of(line);
    if (!hint.empty()) st.last_hint = hint;
    if (st.oom_follow > 0 && !s.found.count("oom")) st.oom_follow = 0;
    if (st.oom_follow > 0) --st.oom_follow, read_oom_numbers(unboxed(line), s.numbers);
    bool matched = match_line(line, s, st);
    // A message a terminal wrapped over two lines (the batch assertion in a rich traceback).
    const std::string here = unboxed(line), joined = st.prev2 + " " + st.prev + " " + here;
    if (!matched && !s.found.count("batch_assertion") && joined.find("train_batch_size is not") != std::string::npos &&
        joined.find("world_size") != std::string::npos)
      matched = match_line(joined, s, st);
    st.prev2 = st.prev, st.prev = here;
    if (!matched && s.error_lines.size() < 5 && std::regex_search(line, errorish))
      s.error_lines.push_back({"closest", st.no, trimmed(line)});
  }
  s.last_line = st.no;
  return s;
}

}  // namespace zrepro::diagnosis
