// See diagnose.h.
#include "trainer/report/diagnose.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>

namespace zrepro {

using json = nlohmann::json;

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

// n[key] = the number, or nothing when it is not one.
void set_whole(json& n, const char* key, const std::string& digits) {
  if (const auto v = whole(digits)) n[key] = *v;
}

double parse_number(const std::string& s) {
  try {
    return std::stod(s);
  } catch (const std::exception&) {
    return -1;
  }
}

// The figures of a PyTorch OOM message (any version since 1.x) into numbers.
void read_oom_numbers(const std::string& line, json& n) {
  static const std::pair<const char*, std::regex> fields[] = {
      {"request_bytes", std::regex(R"(Tried to allocate ([0-9.]+) ?([KMGT]i?B|bytes))")},
      {"capacity_bytes", std::regex(R"(total capacity of ([0-9.]+) ?([KMGT]i?B|bytes))")},
      {"free_bytes", std::regex(R"(of which ([0-9.]+) ?([KMGT]i?B|bytes) is free|([0-9.]+) ?([KMGT]i?B|bytes) free)")},
      {"reserved_unallocated_bytes",
       std::regex(R"(([0-9.]+) ?([KMGT]i?B|bytes) is reserved by PyTorch but unallocated)")},
      {"allocated_bytes", std::regex(R"(([0-9.]+) ?([KMGT]i?B|bytes) is allocated by PyTorch|([0-9.]+) ?([KMGT]i?B|bytes) already allocated)")},
      // PyTorch 1.x: "(GPU 0; 15.78 GiB total capacity; 14.22 GiB already allocated; 1.75 MiB free; 14.31 GiB reserved in total by PyTorch)"
      {"capacity_bytes", std::regex(R"(([0-9.]+) ?([KMGT]i?B|bytes) total capacity)")},
      {"reserved_bytes", std::regex(R"(([0-9.]+) ?([KMGT]i?B|bytes) reserved in total by PyTorch)")},
      {"process_bytes", std::regex(R"(this process has ([0-9.]+) ?([KMGT]i?B|bytes) memory in use)")}};
  for (const auto& [key, re] : fields) {
    std::smatch m;
    if (n.contains(key) || !std::regex_search(line, m, re)) continue;
    const int g = m[1].matched ? 1 : 3;
    const int64_t b = parse_printed_bytes(m[g].str(), m[g + 1].str());
    if (b >= 0) n[key] = b;
  }
  std::smatch m;
  static const std::regex cat(R"(\(category (\w+), phase (\w+)\))");
  if (!n.contains("phase") && std::regex_search(line, m, cat)) n["category"] = m[1].str(), n["phase"] = m[2].str();
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

struct Scan {
  std::map<std::string, std::vector<Evidence>> found;
  json numbers = json::object();
  std::vector<Evidence> error_lines;
  std::vector<int> ranks;
  int last_line = 0;         // the line being read, then the log's last
  std::string last_label;    // the text of DeepSpeed's last see_memory_usage label line
};

void note_rank(const std::string& line, Scan& s) {
  static const std::regex rank(R"((?:^|\[)\s*[Rr]ank\s*(\d+)\s*[\]:])");
  std::smatch m;
  if (std::regex_search(line, m, rank)) {
    const std::optional<int64_t> r = whole(m[1].str());
    if (!r || *r > std::numeric_limits<int>::max()) return;  // no rank a job has
    const int rank = static_cast<int>(*r);
    if (std::find(s.ranks.begin(), s.ranks.end(), rank) == s.ranks.end()) s.ranks.push_back(rank);
  }
}

// "| fwd: 24.59 | bwd: 62.84 | ... | step: 2.15": the global timers summed over every line
// (DeepSpeed resets them at each print); the *_microstep timers only when no global ones.
void read_wall_clock(const std::string& fields, json& n) {
  static const std::regex pair(R"((\w+):\s*([0-9.]+))");
  json& w = n["wall_clock_ms"];
  if (!w.is_object()) w = json::object();
  for (auto it = std::sregex_iterator(fields.begin(), fields.end(), pair); it != std::sregex_iterator(); ++it) {
    std::string name = (*it)[1].str();
    const bool micro = name.size() > 10 && name.compare(name.size() - 10, 10, "_microstep") == 0;
    if (micro) name = name.substr(0, name.size() - 10);
    // DeepSpeed's timer names up to about 0.5: forward, backward, backward_allreduce, step.
    static const std::map<std::string, std::string> old_names = {
        {"forward", "fwd"}, {"backward", "bwd"}, {"backward_allreduce", "bwd_allreduce"}};
    if (const auto it = old_names.find(name); it != old_names.end()) name = it->second;
    if (name != "fwd" && name != "bwd" && name != "bwd_allreduce" && name != "step") continue;
    const std::string key = (micro ? "micro_" : "") + name;
    w[key] = w.value(key, 0.0) + parse_number((*it)[2].str());
  }
}

// The rank a line speaks for ("[rank3]:", "[Rank 3]"), or -1.
int rank_of(const std::string& line) {
  static const std::regex rank(R"((?:^|\[)\s*[Rr]ank\s*(\d+)\s*[\]:])");
  std::smatch m;
  if (!std::regex_search(line, m, rank)) return -1;
  const std::optional<int64_t> r = whole(m[1].str());
  return r && *r <= std::numeric_limits<int>::max() ? static_cast<int>(*r) : -1;
}

// [Note: every rank's watchdog line] A hang's causes differ in what each rank waited in:
// the same SeqNum with different sizes (the ranks gathered different parameters), one
// rank ahead (different SeqNums: one issued more collectives), one rank alone timing out
// (it ran extra work the others never joined). Every rank's (SeqNum, OpType, NumelIn,
// NumelOut) is kept in numbers.watchdog, one entry per rank; the first names the
// collective (collective_seq, collective_op, timeout_ms, ran_ms).
void read_watchdog_line(const std::string& line, json& n) {
  static const std::regex seq(R"(SeqNum=(\d+))"), op(R"(OpType=(\w+))"), to(R"(Timeout\(ms\)=(\d+))"),
      ran(R"(ran for (\d+) milliseconds)"), in(R"(NumelIn=(\d+))"), out(R"(NumelOut=(\d+))");
  std::smatch k;
  json w = {{"rank", rank_of(line)}};
  if (std::regex_search(line, k, seq)) set_whole(w, "seq", k[1].str());
  if (std::regex_search(line, k, op)) w["op"] = k[1].str();
  if (std::regex_search(line, k, in)) set_whole(w, "numel_in", k[1].str());
  if (std::regex_search(line, k, out)) set_whole(w, "numel_out", k[1].str());
  json& all = n["watchdog"];
  if (!all.is_array()) all = json::array();
  const bool seen = std::any_of(all.begin(), all.end(), [&](const json& x) { return x["rank"] == w["rank"]; });
  if (!seen && all.size() < 64) all.push_back(w);
  if (n.contains("collective_seq")) return;  // the first rank's report names the collective
  if (w.contains("seq")) n["collective_seq"] = w["seq"];
  if (w.contains("op")) n["collective_op"] = w["op"];
  if (std::regex_search(line, k, to)) set_whole(n, "timeout_ms", k[1].str());
  if (std::regex_search(line, k, ran)) set_whole(n, "ran_ms", k[1].str());
}

void read_fingerprint_numbers(const std::string& id, const std::smatch& m, const std::string& line, Scan& s) {
  json& n = s.numbers;
  if (id == "oom") {
    read_oom_numbers(line, n);
  } else if (id == "batch_assertion") {
    set_whole(n, "train_batch_size", m[1].str());
    set_whole(n, "micro_batch", m[2].str());
    set_whole(n, "grad_accum", m[3].str());
    set_whole(n, "world_size", m[4].str());
  } else if (id == "zero_to_fp32" && m[1].matched) {
    set_whole(n, "zero_stage", m[1].str());
    set_whole(n, "world_size", m[2].str());
  } else if (id == "checkpoint_world_size") {
    set_whole(n, "saved_world_size", m[1].str());
    set_whole(n, "world_size", m[2].str());
  } else if (id == "overflow") {
    n["overflow_steps"] = n.value("overflow_steps", 0) + 1;
    if (m[2].matched) {
      const double scale = parse_number(m[2].str());
      n["last_attempted_loss_scale"] = scale;
      if (scale >= 0 && scale < n.value("min_attempted_loss_scale", 1e300)) n["min_attempted_loss_scale"] = scale;
      if (scale >= 0 && scale <= 1) n["overflows_at_scale_1"] = n.value("overflows_at_scale_1", 0) + 1;
    }
  } else if (id == "cache_flush") {
    set_whole(n, "allocator_cache_flushes", m[1].str());
  } else if (id == "trainer_mismatch_key") {
    if (!n.contains("trainer_mismatch")) n["trainer_mismatch"] = json::object();
    n["trainer_mismatch"][m[1].str()] = m[2].str();
  } else if (id == "watchdog_timeout") {
    read_watchdog_line(line, n);
  } else if (id == "memory_line") {
    // DeepSpeed's see_memory_usage before the failure: what the model states took.
    if (!s.found.count("oom")) n["allocated_gb_before_failure"] = parse_number(m[1].str());
    // Every such line, in order: the job's device memory over its set-up and steps (GB as
    // DeepSpeed prints them; the label is the see_memory_usage line just before, if any).
    json& t = n["memory_timeline"];
    if (!t.is_array()) t = json::array();
    if (t.size() < 200)
      t.push_back({{"line", s.last_line}, {"label", s.last_label}, {"MA_GB", parse_number(m[1].str())}, {"Max_MA_GB", parse_number(m[2].str())},
                   {"CA_GB", parse_number(m[3].str())}, {"Max_CA_GB", parse_number(m[4].str())}});
  } else if (id == "model_state_share") {
    n["model_states_share"] = n.value("model_states_share", 0.0) + parse_number(m[3].str()) / 100.0;
  } else if (id == "zero_stage") {
    set_whole(n, "zero_stage", m[1].matched ? m[1].str() : m[2].matched ? m[2].str() : m[3].str());
  } else if (id == "completed_steps") {
    // DeepSpeed's step=N lines count before the failure; zrepro's "(N steps completed)" describes it.
    if (m[2].matched) set_whole(n, "completed_steps", m[2].str());
    else if (!s.found.count("oom")) set_whole(n, "completed_steps", m[1].str());
  } else if (id == "straggler") {
    set_whole(n, "straggler_rank", m[1].str());
  } else if (id == "wall_clock") {
    read_wall_clock(m[1].str(), n);
  }
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
    if ((id == "oom" || id == "cuda_error_oom") && !st.last_hint.empty() && !s.numbers.contains("phase_hint"))
      s.numbers["phase_hint"] = st.last_hint;
    if (id == "oom") st.oom_follow = 3;
    if (id == "pinned_frame") st.last_pinned = st.no;
    // A CUDA OOM raised within a traceback's few frames of a pinned host allocation.
    if (id == "cuda_error_oom" && st.last_pinned > 0 && st.no - st.last_pinned <= 12)
      s.numbers["pinned_allocation_oom"] = true;
  }
  return matched;
}

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

// [Note: diagnosis order] The checkpoints are tried in the order practitioners diagnose
// (the catalogue's order, configs/scenarios/): a config the engine refuses first, then memory (stage, buffers,
// fragmentation), pinned memory, numerics that end the run, communication. Checkpoint
// names are those of summary.json's failure.checkpoint (kFailures in report.cpp).
// The model states' share of the device before the failure: zrepro's scale-down table, or
// DeepSpeed's MA line against the capacity from the OOM message. -1 when unknown.
double model_states_share(const json& n) {
  if (n.contains("model_states_share")) return n["model_states_share"].get<double>();
  if (n.contains("allocated_gb_before_failure") && n.value("capacity_bytes", int64_t(0)) > 0)
    return n["allocated_gb_before_failure"].get<double>() * 1e9 / static_cast<double>(n["capacity_bytes"].get<int64_t>());
  return -1;
}

// Bytes the device holds outside this process's PyTorch allocator: capacity - free -
// what PyTorch reserved (allocated + reserved-but-unallocated, or 1.x's "reserved in
// total"). -1 when the message does not say.
int64_t held_outside_pytorch(const json& n) {
  const int64_t cap = n.value("capacity_bytes", int64_t(-1)), free = n.value("free_bytes", int64_t(-1));
  int64_t reserved = n.value("reserved_bytes", int64_t(-1));
  if (reserved < 0 && n.contains("allocated_bytes") && n.contains("reserved_unallocated_bytes"))
    reserved = n["allocated_bytes"].get<int64_t>() + n["reserved_unallocated_bytes"].get<int64_t>();
  if (cap <= 0 || free < 0 || reserved < 0) return -1;
  return cap - free - reserved;
}

// An OOM that is not the caching allocator running out under the model: a pinned host
// allocation, or a device mostly held by something else. True when decided.
bool decide_oom_elsewhere(const Scan& s, Diagnosis& d) {
  const json& n = s.numbers;
  const bool outside_allocator = s.found.count("cuda_error_oom") && !s.found.count("oom");
  if (n.value("pinned_allocation_oom", false) || outside_allocator) {
    const bool seen = n.value("pinned_allocation_oom", false);
    d.checkpoint = "pinned-memory", d.cause = "pinned-host-oom", d.confidence = seen ? "strong" : "likely";
    d.scenario = s.found.count("pinned_memory") ? "memlock-limit" : "";
    d.reason = seen ? "\"CUDA error: out of memory\" raised by a pinned (page-locked) host allocation a few frames above: "
                      "host memory that can be locked ran out (ulimit -l, a container's or WSL's limit, or the host "
                      "itself), not the GPU"
                    : "\"CUDA error: out of memory\" without the caching allocator's own message (no \"Tried to "
                      "allocate\"): a CUDA call outside PyTorch's allocator failed, most often a pinned host allocation "
                      "(WSL and containers cap page-locked memory), else NCCL's or cuBLAS's own buffers";
    d.try_next = {"offload pin_memory false (or DataLoader pin_memory=False): pageable host buffers",
                  "ulimit -l unlimited / docker run --ulimit memlock=-1; under WSL raise its memory limit (.wslconfig)",
                  "less host memory per process: fewer ranks per node, or offload only the optimizer"};
    return true;
  }
  const int64_t outside = held_outside_pytorch(n), cap = n.value("capacity_bytes", int64_t(0));
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
bool decide_oom_by_figures(const json& n, const std::string& phase, Diagnosis& d) {
  const int64_t req = n.value("request_bytes", int64_t(-1)), stranded = n.value("reserved_unallocated_bytes", int64_t(-1));
  const int64_t cap = n.value("capacity_bytes", int64_t(0));
  const std::string category = n.value("category", std::string());
  const bool bucket_sized = req > 0 && (std::llabs(req - 2000000000LL) < 50000000 || std::llabs(req - 1000000000LL) < 25000000);
  // Fragmentation: the stranded bytes exceed the request and are a real share of the device
  // (127 MiB stranded on an 8 GiB card beside a 90 MiB request is a full device, not a
  // fragmented one: LoRA_Easy_Training_Scripts#178 in the corpus).
  if (req > 0 && stranded > req && (cap <= 0 || stranded >= cap / 20)) {
    d.scenario = "fragmentation", d.cause = "fragmentation", d.confidence = "strong";
    d.reason = "the allocator holds more reserved-but-unallocated memory than the request: the free memory is fragmented";
  } else if (category == "optimizer_states" && n.value("zero_stage", 0) == 2) {
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
  } else if (n.value("zero_stage", 0) == 3 && n.value("completed_steps", int64_t(0)) >= 1 &&
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
void decide_oom_by_phase(const json& n, const std::string& phase, Diagnosis& d) {
  const int64_t req = n.value("request_bytes", int64_t(-1)), cap = n.value("capacity_bytes", int64_t(0));
  const std::string category = n.value("category", std::string());
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
               std::to_string(100 * req / cap) + "% of the device, is a flat partition or whole-model buffer, not one "
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
  const json& n = s.numbers;
  if (decide_oom_elsewhere(s, d)) return;
  d.checkpoint = "zero-stage";
  const std::string phase = n.value("phase", n.value("phase_hint", std::string()));
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

// Each timer's share of fwd + bwd + step (bwd_allreduce is part of bwd), from DeepSpeed's
// global timers, else its micro-step ones; null unless forward and backward both took time
// and the total is a finite number (a cut or garbled timer line says nothing about speed).
json wall_clock_shares(const json& n) {
  const json w = n.value("wall_clock_ms", json::object());
  const std::string p = w.contains("fwd") || w.contains("step") ? "" : "micro_";
  const double fwd = w.value(p + "fwd", 0.0), bwd = w.value(p + "bwd", 0.0), step = w.value(p + "step", 0.0);
  const double total = fwd + bwd + step;
  if (!(fwd > 0) || !(bwd > 0) || !std::isfinite(total)) return nullptr;
  return {{"fwd", fwd / total}, {"bwd", bwd / total}, {"bwd_allreduce", w.value(p + "bwd_allreduce", 0.0) / total},
          {"step", step / total}};
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
bool decide_speed(const Scan& s, Diagnosis& d) {
  const json sh = wall_clock_shares(s.numbers);
  if (!sh.is_object()) return false;
  const double fwd = sh["fwd"], bwd = sh["bwd"], step = sh["step"], allreduce = sh["bwd_allreduce"];
  std::string odd;  // the phase out of proportion
  if (step >= 0.5) odd = "the optimizer step takes " + pct(step) + " of the step time";
  else if (fwd > bwd) odd = "forward takes longer than backward (" + pct(fwd) + " vs " + pct(bwd) + "; compute alone makes backward about twice forward)";
  else if (bwd > 4 * fwd) odd = "backward takes " + std::to_string(static_cast<int64_t>(std::min(bwd / fwd, 1e6) + 0.5)) + "x forward (compute alone: about 2x)";
  const json& cfg = s.numbers.value("config", json::object());  // --config, when given
  const bool offload = s.found.count("offload_cpu") > 0 || cfg.value("offload", false);
  const bool pageable = s.found.count("offload_pageable") > 0 || (cfg.value("offload", false) && !cfg.value("pin_memory", true));
  if (step >= 0.5) {
    // The step is the optimizer: with offload_optimizer, DeepSpeedCPUAdam on the host.
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
    return true;
  }
  if (offload && !odd.empty()) {
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
    return true;
  }
  // Without offload: the all-reduce itself, or stage 3's gathers stretching forward.
  if (allreduce >= 0.4 || (!offload && fwd > bwd && s.numbers.value("zero_stage", 0) == 3)) {
    d.checkpoint = "communication", d.confidence = "likely", d.scenario = "more-ranks-no-speedup", d.cause = "comm-bound";
    d.reason = (allreduce >= 0.4 ? "the gradient all-reduce takes " + pct(allreduce) + " of the step time" : odd) +
               " (DeepSpeed's timers) without offload: the phase waits on collectives, so the interconnect, not "
               "compute, sets the pace";
    d.alternatives = {"straggler: one rank slow, the others wait in the all-reduce (\"is the straggler\" in zrepro's log)",
                      "data-starvation: a rank's loader late; the wait shows as collective time on the others"};
    d.try_next = {"a lower ZeRO stage (stage 3 gathers parameters in every forward and backward)",
                  "more gradient accumulation per optimizer step (fewer all-reduces per sample)",
                  "zrepro ab --expect scaling:E at 1 and N ranks"};
    return true;
  }
  return false;
}

// [Note: reading fp16's loss scale] OVERFLOW lines are normal at the start of fp16
// training: the scaler starts at 2^initial_scale_power and halves until gradients fit,
// usually settling in the thousands. They are a failure when the scale keeps falling: to a
// small value (<= 128) step after step, or every step at scale 1 ("Attempted loss scale:
// 1, reducing to 1": nothing left to halve), or DeepSpeed's "already at minimum" exit.
bool fp16_failing(const json& n) {
  return n.value("overflows_at_scale_1", 0) >= 2 ||
         (n.value("overflow_steps", 0) >= 3 && n.value("min_attempted_loss_scale", 1e300) <= 128);
}

void decide_fp16(const Scan& s, Diagnosis& d) {
  const json& n = s.numbers;
  const double low = n.value("min_attempted_loss_scale", 1e300);
  const int at_one = n.value("overflows_at_scale_1", 0), overflows = n.value("overflow_steps", 0);
  d.checkpoint = "numerics", d.scenario = "fp16-overflow";
  if (s.found.count("loss_scale_minimum")) {
    d.cause = "fp16-scale-minimum", d.confidence = "strong";
    d.reason = "fp16 gradients overflowed at every loss scale down to min_loss_scale";
  } else if (at_one >= 2) {
    d.cause = "fp16-scale-stuck", d.confidence = "strong";
    d.reason = std::to_string(at_one) + " steps overflowed at loss scale 1: every step is skipped, nothing trains";
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
WatchdogView watchdog_view(const json& w) {
  WatchdogView v;
  for (const auto& a : w) {
    v.seqs.insert(a.value("seq", int64_t(-1)));
    for (const auto& b : w) {
      if (a.value("seq", -1) != b.value("seq", -1)) continue;
      if (a.value("op", std::string()) != b.value("op", std::string())) v.same_seq_other_op = true;
      else if (a.value("numel_in", -1) != b.value("numel_in", -1) || a.value("numel_out", -1) != b.value("numel_out", -1))
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

// [Note: every rank's watchdog line] (read_watchdog_line): the hang's kind from what each
// rank waited in, and from what the log shows around it.
void decide_hang(const Scan& s, Diagnosis& d) {
  auto has = [&](const char* id) { return s.found.count(id) > 0; };
  const json w = s.numbers.value("watchdog", json::array());
  const WatchdogView v = watchdog_view(w);
  const std::set<int64_t>& seqs = v.seqs;
  const bool same_seq_other_size = v.same_seq_other_size && !v.same_seq_other_op;
  const std::string op = s.numbers.value("collective_op", std::string());
  const int64_t seq = s.numbers.value("collective_seq", int64_t(-1));
  const bool gather = op.find("ALLGATHER") != std::string::npos || op.find("_ALLGATHER") != std::string::npos;
  d.checkpoint = "communication";
  // A forward some ranks ran alone comes first: its gathers can meet the others' gathers too.
  if (has("collective_mismatch") && has("forward_alone")) {
    d.scenario = has("generate_work") ? "generate-early-eos" : "rank0-eval-hang";
    d.cause = "rank-alone-in-collective", d.confidence = "strong";
    d.reason = "a forward ran on some ranks only (evaluation on rank 0, or generation a rank left at its own end of "
               "sequence): under ZeRO-3 its all-gathers met the other ranks' next collectives";
  } else if (has("collective_mismatch") && has("divergent_gathers")) {
    d.scenario = "moe-divergent-gathers", d.cause = "divergent-zero3-gathers", d.confidence = "strong";
    d.reason = "the ranks met in all-gathers of different sizes: under ZeRO-3 they fetched different parameters, as "
               "data-dependent modules (MoE routing, conditional branches) do";
  } else if (has("collective_mismatch") || seqs.size() > 1 || v.same_seq_other_op) {
    d.scenario = "mismatched-collectives", d.cause = "mismatched-collectives", d.confidence = "strong";
    d.reason = has("collective_mismatch") || v.same_seq_other_op
                   ? "ranks issued different collectives at the same sequence number (one rank ran an extra micro-step "
                     "or skipped one)"
                   : "the ranks timed out at different sequence numbers: one issued more collectives than another (an "
                     "extra micro-step, an uneven last batch)";
  } else if (same_seq_other_size || (has("trace_cache") && (gather || w.empty()))) {
    d.scenario = "moe-divergent-gathers";
    d.cause = "divergent-zero3-gathers", d.confidence = same_seq_other_size ? "strong" : "likely";
    d.reason = same_seq_other_size
                   ? "the ranks wait in the same collective (one SeqNum) with different sizes: under ZeRO-3 they gathered "
                     "different parameters, as data-dependent modules (MoE routing, conditional branches) do"
                   : "ZeRO-3 re-traced its prefetch order (\"Invalidate trace cache\") and a gather never completed: the "
                     "ranks run data-dependent modules (MoE routing, conditional branches)";
  } else if (w.size() == 1 && gather && (has("eval_work") || s.numbers.value("zero_stage", 0) == 3 || s.ranks.size() <= 1)) {
    d.scenario = has("generate_work") ? "generate-early-eos" : "rank0-eval-hang";
    d.cause = "rank-alone-in-collective", d.confidence = "likely";
    d.reason = "one rank alone timed out in an all-gather: under ZeRO-3 it ran forward work the others never joined "
               "(evaluation, generation or saving on one rank only)";
  } else if ((has("preprocessing") && seq >= 0 && seq <= 20) || has("store_timeout")) {
    d.cause = "slow-preprocessing", d.confidence = "likely";
    d.reason = has("store_timeout")
                   ? "the ranks timed out waiting for rank 0 to create the NCCL communicator (the TCP store's get): rank 0 "
                     "was still busy before its first collective - preprocessing or loading - or had crashed"
                   : "a collective at SeqNum " + std::to_string(seq) + " (before training started) timed out while the log "
                     "shows dataset preprocessing: one rank was still preparing data when the others waited for it";
  } else {
    d.scenario = "mismatched-collectives", d.cause = "mismatched-collectives", d.confidence = "likely";
    d.reason = "a collective never completed: a rank is waiting in a collective its peers did not issue (give every "
               "rank's log: the ranks' SeqNums and sizes tell the causes apart)";
  }
  d.alternatives = {"straggler: a slow but live rank; the run is slow, not stuck, and the collectives do complete",
                    "slow-preprocessing: a low SeqNum while one rank still maps or tokenizes the dataset",
                    "divergent-zero3-gathers: one SeqNum, different NumelIn/NumelOut across ranks (MoE under ZeRO-3)"};
  d.alternatives.erase(std::remove_if(d.alternatives.begin(), d.alternatives.end(),
                                     [&](const std::string& a) { return a.rfind(d.cause + ":", 0) == 0; }),
                      d.alternatives.end());
  d.try_next = hang_fixes(d.cause);
}

// Failures outside a training step that the log names by their own lines: DeepSpeed
// "auto" values nobody filled, NCCL's shared-memory transport, the host running out while
// offload sets up (the process killed without a Python error). True when decided.
bool decide_setup(const Scan& s, Diagnosis& d) {
  auto has = [&](const char* id) { return s.found.count(id) > 0; };
  if (has("trainer_mismatch")) {
    d.checkpoint = "config", d.cause = "trainer-config-mismatch", d.confidence = "strong";
    std::string keys;
    const json mismatched = s.numbers.value("trainer_mismatch", json::object());
    for (const auto& [k, v] : mismatched.items())
      keys += (keys.empty() ? "" : ", ") + k + (v.is_string() ? "=" + v.get<std::string>() : std::string());
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

void decide(const Scan& s, Diagnosis& d) {
  auto has = [&](const char* id) { return s.found.count(id) > 0; };
  if (has("batch_assertion")) {
    d.checkpoint = "config", d.scenario = "mismatched-batch-triple", d.cause = "batch-triple", d.confidence = "strong";
    d.reason = "DeepSpeed refused the batch triple at init: train_batch_size != micro x gas x world size";
    d.try_next = {"set gradient_accumulation_steps = train_batch_size / (micro x world size), or drop one of the three"};
  } else if (has("host_killed") && has("zero_to_fp32")) {
    // [Note: zero_to_fp32's host memory] (trainer/checkpoint/zero_to_fp32.h).
    const bool zero12 = s.numbers.value("zero_stage", 3) < 3;
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
  } else if ((has("host_killed") || has("sigkill")) &&
             (has("save_gather") || s.numbers.value("config", json::object()).value("gather_16bit_on_save", false))) {
    // [Note: the 16-bit consolidation at save] (trainer/checkpoint/ds_checkpoint.h).
    d.checkpoint = "host-memory", d.scenario = "save-gather-oom", d.cause = "save-16bit-host-oom";
    d.confidence = has("save_gather") ? "strong" : "likely";
    d.reason = "a rank was killed for host memory with ZeRO-3's stage3_gather_16bit_weights_on_model_save on: at "
               "every save rank 0 gathers the whole 16-bit model into its host memory (2 bytes per parameter in "
               "bf16) for pytorch_model.bin, before the ZeRO checkpoint is written";
    d.try_next = {"stage3_gather_16bit_weights_on_model_save: false (the Trainer then saves only the ZeRO "
                  "checkpoint); consolidate offline with zero_to_fp32.py --max_shard_size on a host with room",
                  "more free host RAM on rank 0's node (fewer ranks per node, no offload there)",
                  "zrepro plan --save-every N shows rank 0's host bytes at a save (checkpoint_host)"};
    if (!has("save_gather"))
      d.alternatives = {"any other host-memory kill (a dataloader, offload buffers): the log does not say the kill "
                        "came at a save"};
  } else if (has("checkpoint_world_size")) {
    d.checkpoint = "config", d.scenario = "resume-world-size-change", d.cause = "checkpoint-world-size";
    d.confidence = "strong";
    d.reason = "load_checkpoint refused a ZeRO checkpoint saved at another data-parallel world size (" +
               s.numbers.value("saved_world_size", json("?")).dump() + " ranks, resumed on " +
               s.numbers.value("world_size", json("?")).dump() + "): each rank's optimizer file holds a partition "
               "cut for the saving world size";
    d.try_next = {"convert it: python deepspeed/checkpoint/ds_to_universal.py --input_folder DIR/global_stepN "
                  "--output_folder DIR/global_stepN_universal --inject_missing_state (or zrepro checkpoint "
                  "to-universal), then \"checkpoint\": {\"load_universal\": true} in the config",
                  "resume on the saving world size", "weights only: zero_to_fp32.py, then a fresh optimizer"};
  } else if (has("pinned_memory") && !has("oom")) {
    // --config without a pin_memory key: the pinning came from 0.19.5's new default.
    const bool unset = s.numbers.value("config", json::object()).value("pin_memory_unset", false);
    d.checkpoint = "pinned-memory", d.confidence = "strong", d.cause = "pinned-host-oom";
    d.scenario = unset ? "upgrade-pinned-default" : "memlock-limit";
    d.reason = unset ? "pinning the offload buffers failed at init, and the config sets no pin_memory: DeepSpeed >= "
                       "0.19.5 pins them by default (false before, deepspeedai/DeepSpeed#8207)"
                     : "pinning the offload buffers failed at init (ulimit -l / CAP_IPC_LOCK, or host memory)";
    d.alternatives = {unset ? "memlock-limit: the config asked for pinned buffers itself; the limit is the cause"
                            : "upgrade-pinned-default: the config has no pin_memory key and DeepSpeed >= 0.19.5 now pins by "
                              "default (give --config to tell)"};
    d.try_next = {"ulimit -l unlimited (docker run --ulimit memlock=-1)", "offload pin_memory false, written in the config"};
  } else if (has("oom") || has("cuda_error_oom")) {
    decide_oom(s, d);
  } else if (has("loss_scale_minimum") || fp16_failing(s.numbers)) {
    decide_fp16(s, d);
  } else if (has("watchdog_timeout") || has("collective_mismatch") || has("store_timeout") ||
             (has("trace_cache") && !s.error_lines.empty())) {
    decide_hang(s, d);
  } else if (decide_setup(s, d)) {
    // decided: a set-up failure
  } else if (has("cache_flush")) {
    d.checkpoint = "zero-stage", d.cause = "allocator-cache-flushes", d.confidence = "likely";
    d.scenario = "allocator-pressure";
    const int64_t n = s.numbers.value("allocator_cache_flushes", int64_t(0));
    d.reason = "ZeRO-3 reports the PyTorch allocator flushing its cache between steps" +
               (n > 0 ? " (" + std::to_string(n) + " in the last step it logged)" : std::string()) +
               ": memory runs so close to capacity that the caching allocator frees its cached segments and retries "
               "(num_alloc_retries; slow steps, an OOM one step away)";
    d.try_next = {"a smaller micro-batch with more gradient accumulation, activation checkpointing, or lower "
                  "stage3_max_live_parameters / stage3_prefetch_bucket_size",
                  "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (segments grow and shrink: nothing cached to flush)",
                  "get_accelerator().empty_cache() at the same point on every rank, if the pressure is transient"};
  } else if (has("straggler")) {
    d.checkpoint = "communication", d.scenario = "straggler", d.cause = "straggler", d.confidence = "strong";
    d.reason = "one rank kept the others waiting in collectives";
    d.try_next = {"check the named rank's node (throttling, a noisy neighbour, its data loader)"};
  } else if (has("wall_clock") && decide_speed(s, d)) {
    // decided: a slow job
  } else if (has("overflow")) {
    decide_fp16(s, d);  // the start-up search: no checkpoint
  } else if (has("wall_clock")) {
    const json sh = wall_clock_shares(s.numbers);
    d.confidence = "none";
    d.reason = "no known fingerprint: DeepSpeed's timers show no phase out of proportion" +
               (sh.is_object() ? " (fwd " + pct(sh["fwd"]) + ", bwd " + pct(sh["bwd"]) + " of which all-reduce " +
                                     pct(sh["bwd_allreduce"]) + ", step " + pct(sh["step"]) + ")"
                               : std::string());
  } else {
    d.confidence = "none";
    d.reason = "no known fingerprint";
  }
}

}  // namespace

namespace {

// The length of the valid UTF-8 sequence at text[i] (0: none).
size_t utf8_length(const std::string& text, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char c = b(i);
  const size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > text.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((b(i + k) & 0xC0) != 0x80) return 0;
  return n;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string from_utf16(const std::string& bytes, bool little) {
  std::string out;
  const size_t start = bytes.size() >= 2 && ((little && bytes.compare(0, 2, "\xFF\xFE") == 0) ||
                                             (!little && bytes.compare(0, 2, "\xFE\xFF") == 0))
                           ? 2
                           : 0;
  auto unit = [&](size_t i) {
    const auto lo = static_cast<unsigned char>(bytes[i + (little ? 0 : 1)]);
    const auto hi = static_cast<unsigned char>(bytes[i + (little ? 1 : 0)]);
    return static_cast<uint32_t>(hi) << 8 | lo;
  };
  for (size_t i = start; i + 1 < bytes.size(); i += 2) {
    uint32_t cp = unit(i);
    if (cp >= 0xD800 && cp < 0xDC00 && i + 3 < bytes.size()) {
      const uint32_t low = unit(i + 2);
      if (low >= 0xDC00 && low < 0xE000) {
        cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
        i += 2;
      } else {
        cp = 0xFFFD;
      }
    } else if (cp >= 0xD800 && cp < 0xE000) {
      cp = 0xFFFD;
    }
    append_utf8(out, cp);
  }
  return out;
}

}  // namespace

LogKind normalise_log(std::string& text) {
  if (text.empty()) return LogKind::empty;
  const size_t n = std::min<size_t>(text.size(), 64 * 1024);
  const bool bom_le = text.compare(0, 2, "\xFF\xFE") == 0, bom_be = text.compare(0, 2, "\xFE\xFF") == 0;
  size_t zero_odd = 0, zero_even = 0;
  for (size_t i = 0; i < n; ++i)
    if (text[i] == '\0') ++(i % 2 ? zero_odd : zero_even);
  const size_t pairs = n / 2;
  if (bom_le || bom_be || (pairs > 0 && (zero_odd * 10 > pairs * 9 || zero_even * 10 > pairs * 9))) {
    text = from_utf16(text, bom_le || (!bom_be && zero_odd >= zero_even));
    return LogKind::utf16;
  }
  size_t odd = 0;
  for (size_t i = 0; i < n;) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == 0) return LogKind::binary;
    if (c < 0x20 && c != '\n' && c != '\r' && c != '\t' && c != 0x1B && c != '\b') ++odd;
    const size_t len = utf8_length(text, i);
    if (len == 0) ++odd;  // not UTF-8: Latin-1 text counts a little, binary a lot
    i += len ? len : 1;
  }
  return odd * 10 > n ? LogKind::binary : LogKind::text;
}

const char* log_kind_name(LogKind k) {
  switch (k) {
    case LogKind::text: return "text";
    case LogKind::utf16: return "UTF-16 text";
    case LogKind::empty: return "empty";
    case LogKind::binary: return "binary";
  }
  return "?";
}

std::string printable(const std::string& line) {
  std::string out;
  for (size_t i = 0; i < line.size();) {
    const size_t len = utf8_length(line, i);
    const unsigned char c = static_cast<unsigned char>(line[i]);
    if (len == 0 || (len == 1 && ((c < 0x20 && c != '\t') || c == 0x7F))) {
      out += "\xEF\xBF\xBD";  // U+FFFD
      i += 1;
    } else {
      out.append(line, i, len);
      i += len;
    }
  }
  return out;
}

int64_t parse_printed_bytes(const std::string& number, const std::string& unit) {
  const double x = parse_number(number);
  if (x < 0) return -1;
  static const std::map<std::string, double> units = {
      {"bytes", 1},           {"B", 1},          {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0},
      {"TiB", 1099511627776.0}, {"KB", 1e3},     {"MB", 1e6},     {"GB", 1e9},        {"TB", 1e12}};
  const auto it = units.find(unit);
  if (it == units.end()) return -1;
  const double bytes = x * it->second;
  // A size no device has (the log fuzzer found "2.7e69 GiB": its cast to int64 was
  // undefined behaviour) is not a size.
  return bytes < 9.2e18 ? static_cast<int64_t>(bytes) : -1;
}

Diagnosis diagnose_log(const std::string& text, const json& job_config) {
  Scan s = scan(text);
  if (job_config.is_object()) {  // what the config print would have said
    const json z = job_config.value("zero_optimization", json::object());
    if (!s.numbers.contains("zero_stage") && z.value("stage", json()).is_number_integer())
      s.numbers["zero_stage"] = z["stage"];
    if (z.value("stage3_gather_16bit_weights_on_model_save", z.value("stage3_gather_fp16_weights_on_model_save", false)) ==
        true)
      s.numbers["config"]["gather_16bit_on_save"] = true;
    for (const char* section : {"offload_optimizer", "offload_param"}) {
      const json o = z.value(section, json::object());
      if (!o.is_object() || o.value("device", "none") == "none") continue;
      s.numbers["config"]["offload"] = true;
      // pin_memory unset: true since DeepSpeed 0.19.5 (the upgrade-pinned-default scenario)
      if (!o.value("pin_memory", true)) s.numbers["config"]["pin_memory"] = false;
      if (!o.contains("pin_memory")) s.numbers["config"]["pin_memory_unset"] = true;
    }
  }
  Diagnosis d;
  decide(s, d);
  for (const auto& [id, ev] : s.found)
    if (id != "zero_stage" && id != "completed_steps" && id != "model_state_share")  // context, in numbers
      d.evidence.insert(d.evidence.end(), ev.begin(), ev.end());
  std::sort(d.evidence.begin(), d.evidence.end(), [](const Evidence& a, const Evidence& b) { return a.line < b.line; });
  d.numbers = s.numbers;
  d.numbers.erase("phase_hint");
  if (s.numbers.contains("wall_clock_ms")) d.numbers["wall_clock_shares"] = wall_clock_shares(s.numbers);
  if (s.numbers.contains("phase_hint") && !s.numbers.contains("phase")) d.numbers["phase"] = s.numbers["phase_hint"];
  if (!s.ranks.empty()) d.numbers["ranks_seen"] = s.ranks;
  if (d.confidence == "none") d.closest = s.error_lines;
  if (d.closest.empty() && d.scenario.empty() && s.found.count("wall_clock")) d.closest = s.found.at("wall_clock");
  return d;
}

Diagnosis diagnose_flight_recorder(const std::vector<json>& rows) {
  Scan s;
  json w = json::array();
  for (const auto& r : rows) {
    w.push_back(r);
    const std::string text = "rank " + std::to_string(r.value("rank", -1)) + ": last collective #" +
                             std::to_string(r.value("seq", int64_t(-1))) + " " + r.value("op", std::string("?")) + " (" +
                             std::to_string(r.value("numel_in", int64_t(-1))) + " -> " +
                             std::to_string(r.value("numel_out", int64_t(-1))) + " elements, " +
                             (r["state"].is_string() ? r["state"].get<std::string>() : std::string("?")) + ") of " +
                             std::to_string(r.value("entries", 0)) + " recorded, " + r.value("file", std::string());
    s.found["flight_recorder"].push_back({"flight_recorder", 0, text});
  }
  s.numbers["watchdog"] = w;
  if (!rows.empty()) s.numbers["collective_seq"] = rows[0].value("seq", json()), s.numbers["collective_op"] = rows[0].value("op", json());
  Diagnosis d;
  if (rows.empty()) {
    d.confidence = "none";
    d.reason = "the Flight Recorder dumps hold no collective";
    return d;
  }
  decide_hang(s, d);
  d.reason = "PyTorch's Flight Recorder, every rank's last collective: " + d.reason;
  d.evidence = s.found["flight_recorder"];
  d.numbers = s.numbers;
  return d;
}

json Diagnosis::to_json() const {
  auto ev = [](const std::vector<Evidence>& v) {
    json a = json::array();
    for (const auto& e : v) a.push_back({{"fingerprint", e.fingerprint}, {"line", e.line}, {"text", e.text}});
    return a;
  };
  return {{"checkpoint", checkpoint.empty() ? json(nullptr) : json(checkpoint)},
          {"scenario", scenario.empty() ? json(nullptr) : json(scenario)},
          {"cause", cause.empty() ? json(nullptr) : json(cause)},
          {"confidence", confidence},
          {"reason", reason},
          {"alternatives", alternatives},
          {"try_next", try_next},
          {"numbers", numbers},
          {"evidence", ev(evidence)},
          {"closest", ev(closest)}};
}

std::string Diagnosis::to_text() const {
  std::ostringstream o;
  if (scenario.empty()) {
    o << "[zrepro diagnose] " << reason << "\n";
  } else {
    o << "[zrepro diagnose] checkpoint " << checkpoint << ": " << scenario << " (" << confidence << "): " << reason << "\n";
  }
  if (scenario.empty() && !cause.empty())
    o << "[zrepro diagnose] checkpoint " << checkpoint << ": " << cause << " (" << confidence << "; no catalogue scenario "
      << "reproduces it yet)\n";
  for (const auto& e : evidence)
    o << "  " << (e.line > 0 ? "line " + std::to_string(e.line) + " " : std::string()) << "[" << e.fingerprint << "] "
      << printable(e.text) << "\n";
  json shown = numbers;
  shown.erase("memory_timeline");  // below, in one line
  if (!shown.empty()) o << "  numbers: " << shown.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
  if (numbers.contains("memory_timeline") && !numbers["memory_timeline"].empty()) {
    const json& t = numbers["memory_timeline"];
    const auto peak = std::max_element(t.begin(), t.end(), [](const json& a, const json& b) {
      return a.value("Max_MA_GB", 0.0) < b.value("Max_MA_GB", 0.0);
    });
    o << "  memory (DeepSpeed's see_memory_usage, " << t.size() << " lines): Max_MA " << (*peak)["Max_MA_GB"].dump()
      << " GB at line " << (*peak)["line"].dump() << " (" << (*peak).value("label", std::string()) << "); last MA "
      << t.back()["MA_GB"].dump() << " GB, CA " << t.back()["CA_GB"].dump() << " GB (numbers.memory_timeline)\n";
  }
  for (const auto& a : alternatives) o << "  or " << a << "\n";
  for (const auto& t : try_next) o << "  try: " << t << "\n";
  if (!scenario.empty()) o << "  reproduce: zrepro scenario run " << scenario << "  (configs/scenarios/" << scenario << "/README.md)\n";
  for (const auto& e : closest) o << "  closest, line " << e.line << ": " << printable(e.text) << "\n";
  return o.str();
}

void WallClock::add(double forward_s, double backward_s, double comm_wait_s, double optimizer_s) {
  fwd += forward_s, bwd += backward_s, allreduce += std::min(comm_wait_s, backward_s), step += optimizer_s;
}

std::string WallClock::line_and_reset() {
  auto ms = [](double s) {
    char b[32];
    std::snprintf(b, sizeof b, "%.2f", 1000 * s);
    return std::string(b);
  };
  const std::string l = "[Rank 0] time (ms) | fwd: " + ms(fwd) + " | bwd: " + ms(bwd) + " | bwd_inner: " +
                        ms(bwd - allreduce) + " | bwd_allreduce: " + ms(allreduce) + " | step: " + ms(step);
  *this = WallClock{};
  return l;
}

}  // namespace zrepro
