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
        {"batch_assertion", "train_batch_size is not equal",
         re(R"(train_batch_size is not equal to micro_batch_per_gpu \* gradient_acc_step \* world_size\s*(\d+)\s*!=\s*(\d+)\s*\*\s*(\d+)\s*\*\s*(\d+))")},
        {"overflow", "OVERFLOW!", re(R"(OVERFLOW! Rank (\d+) Skipping step\.?(?: Attempted loss scale: ([0-9.e+]+))?)")},
        {"loss_scale_minimum", "loss scale already at minimum", re(R"(Current loss scale already at minimum)")},
        {"watchdog_timeout", "Watchdog caught collective operation timeout",
         re(R"(Watchdog caught collective operation timeout)")},
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

double num(const std::string& s) {
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
      {"allocated_bytes", std::regex(R"(([0-9.]+) ?([KMGT]i?B|bytes) is allocated by PyTorch)")}};
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
      {"init", std::regex(R"(deepspeed\.initialize|_configure_zero_optimizer|DeepSpeedEngine\.__init__|engine\.py.*__init__)")},
      {"backward", std::regex(R"(in backward|\.backward\(|reduce_ipg_grads|average_tensor)")},
      {"forward", std::regex(R"(in forward|\.forward\()")}};
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
  int last_line = 0;
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
    if (name != "fwd" && name != "bwd" && name != "bwd_allreduce" && name != "step") continue;
    const std::string key = (micro ? "micro_" : "") + name;
    w[key] = w.value(key, 0.0) + num((*it)[2].str());
  }
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
  } else if (id == "overflow") {
    n["overflow_steps"] = n.value("overflow_steps", 0) + 1;
    if (m[2].matched) n["last_attempted_loss_scale"] = num(m[2].str());
  } else if (id == "watchdog_timeout") {
    static const std::regex seq(R"(SeqNum=(\d+))"), op(R"(OpType=(\w+))"), to(R"(Timeout\(ms\)=(\d+))"),
        ran(R"(ran for (\d+) milliseconds)");
    std::smatch k;
    if (n.contains("collective_seq")) return;  // the first rank's report names the collective
    if (std::regex_search(line, k, seq)) set_whole(n, "collective_seq", k[1].str());
    if (std::regex_search(line, k, op)) n["collective_op"] = k[1].str();
    if (std::regex_search(line, k, to)) set_whole(n, "timeout_ms", k[1].str());
    if (std::regex_search(line, k, ran)) set_whole(n, "ran_ms", k[1].str());
  } else if (id == "memory_line") {
    // DeepSpeed's see_memory_usage before the failure: what the model states took.
    if (!s.found.count("oom")) n["allocated_gb_before_failure"] = num(m[1].str());
  } else if (id == "model_state_share") {
    n["model_states_share"] = n.value("model_states_share", 0.0) + num(m[3].str()) / 100.0;
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

Scan scan(const std::string& text) {
  Scan s;
  std::istringstream in(text);
  static const std::regex errorish(R"(error|exception|traceback|fail|abort|killed|timeout|nan)", std::regex::icase);
  int no = 0;
  std::string last_hint;
  for (std::string line; std::getline(in, line);) {
    ++no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    note_rank(line, s);
    const std::string hint = phase_hint_of(line);
    if (!hint.empty()) last_hint = hint;
    bool matched = false;
    for (const auto& f : fingerprints()) {
      if (*f.needle && line.find(f.needle) == std::string::npos) continue;
      std::smatch m;
      if (!std::regex_search(line, m, f.pattern)) continue;
      matched = true;
      auto& ev = s.found[f.id];
      if (ev.size() < 12) ev.push_back({f.id, no, trimmed(line)});
      read_fingerprint_numbers(f.id, m, line, s);
      if (std::string(f.id) == "oom" && !last_hint.empty() && !s.numbers.contains("phase_hint"))
        s.numbers["phase_hint"] = last_hint;
    }
    if (!matched && s.error_lines.size() < 5 && std::regex_search(line, errorish))
      s.error_lines.push_back({"closest", no, trimmed(line)});
  }
  s.last_line = no;
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

void decide_oom(const Scan& s, Diagnosis& d) {
  const json& n = s.numbers;
  d.checkpoint = "zero-stage";
  const int64_t req = n.value("request_bytes", int64_t(-1)), stranded = n.value("reserved_unallocated_bytes", int64_t(-1));
  const std::string phase = n.value("phase", n.value("phase_hint", std::string()));
  const std::string category = n.value("category", std::string());
  const bool bucket_sized = req > 0 && (std::llabs(req - 2000000000LL) < 50000000 || std::llabs(req - 1000000000LL) < 25000000);
  if (req > 0 && stranded > req) {
    d.scenario = "fragmentation", d.confidence = "strong";
    d.reason = "the allocator holds more reserved-but-unallocated memory than the request: the free memory is fragmented";
  } else if (phase == "partition" || category == "optimizer_states") {
    d.scenario = "optimizer-partition-oom", d.confidence = "strong";
    d.reason = "the OOM comes while ZeRO creates or partitions the optimizer states (12 bytes/param of fp32 Adam state)";
  } else if (category == "comm_buffers" || bucket_sized) {
    d.scenario = "bucket-buffers", d.confidence = category == "comm_buffers" ? "strong" : "likely";
    d.reason = "the failing request is the size of a 5e8-element reduce / all-gather bucket";
  } else if (model_states_share(n) >= 0.5) {
    d.scenario = "zero2-params-dont-fit", d.confidence = "likely";
    d.reason = "the model states alone took " + std::to_string(static_cast<int64_t>(std::min(100 * model_states_share(n), 1e9))) +
               "% of the device before the failing allocation: the parameters (and below stage 3 every rank's full "
               "16-bit copy) leave no room";
  } else if (n.value("zero_stage", 0) == 3 && n.value("completed_steps", int64_t(0)) >= 1 &&
             (phase == "forward" || phase == "backward")) {
    d.scenario = "zero3-live-params", d.confidence = "likely";
    d.reason = "under ZeRO-3 the OOM comes after a completed step: layers kept gathered between their forward and "
               "backward (stage3_max_live_parameters, prefetch bucket, reuse distance), not one batch's activations";
  } else if (category == "activations") {
    d.scenario = "first-batch-activations", d.confidence = "strong";
    d.reason = "model states fit; the activations of one micro-batch do not";
  } else if (category == "params" || phase == "init") {
    d.scenario = "zero2-params-dont-fit", d.confidence = category == "params" ? "strong" : "likely";
    d.reason = "the 16-bit parameters every rank holds below stage 3 do not fit with what comes on top";
  } else {
    d.scenario = "first-batch-activations", d.confidence = "likely";
    d.reason = "an OOM in forward/backward with no sign of buckets or fragmentation: usually activations";
  }
  const std::vector<std::pair<std::string, std::string>> others = {
      {"first-batch-activations", "the OOM on the first forward/backward; activation checkpointing fixes it"},
      {"zero2-params-dont-fit", "the OOM at init or first forward under stage <= 2; zrepro plan shows 16-bit params near capacity"},
      {"bucket-buffers", "the request is ~1.86 GiB (5e8 fp32 elements) or ~0.93 GiB (bf16)"},
      {"zero3-live-params", "stage 3, the OOM in a later step's forward; stage3_max_live_parameters / prefetch set high"},
      {"fragmentation", "a large \"reserved by PyTorch but unallocated\" figure, many steps in"}};
  for (const auto& [name, tell] : others)
    if (name != d.scenario) d.alternatives.push_back(name + ": " + tell);
  d.try_next = {"zrepro plan --config ds_config.json --model M --world-size N --device-memory SIZE (which fixes fit)",
                "activation checkpointing or a smaller micro-batch with more accumulation",
                "a higher ZeRO stage, or optimizer offload", "smaller reduce_bucket_size / allgather_bucket_size"};
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
  if (offload && !odd.empty()) {
    d.checkpoint = "offload-target", d.confidence = "likely";
    d.scenario = pageable ? "pageable-copies" : "offload-link-bottleneck";
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
    d.checkpoint = "communication", d.confidence = "likely", d.scenario = "more-ranks-no-speedup";
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

void decide(const Scan& s, Diagnosis& d) {
  auto has = [&](const char* id) { return s.found.count(id) > 0; };
  if (has("batch_assertion")) {
    d.checkpoint = "config", d.scenario = "mismatched-batch-triple", d.confidence = "strong";
    d.reason = "DeepSpeed refused the batch triple at init: train_batch_size != micro x gas x world size";
    d.try_next = {"set gradient_accumulation_steps = train_batch_size / (micro x world size), or drop one of the three"};
  } else if (has("oom")) {
    decide_oom(s, d);
  } else if (has("pinned_memory")) {
    // --config without a pin_memory key: the pinning came from 0.19.5's new default.
    const bool unset = s.numbers.value("config", json::object()).value("pin_memory_unset", false);
    d.checkpoint = "pinned-memory", d.confidence = "strong";
    d.scenario = unset ? "upgrade-pinned-default" : "memlock-limit";
    d.reason = unset ? "pinning the offload buffers failed at init, and the config sets no pin_memory: DeepSpeed >= "
                       "0.19.5 pins them by default (false before, deepspeedai/DeepSpeed#8207)"
                     : "pinning the offload buffers failed at init (ulimit -l / CAP_IPC_LOCK, or host memory)";
    d.alternatives = {unset ? "memlock-limit: the config asked for pinned buffers itself; the limit is the cause"
                            : "upgrade-pinned-default: the config has no pin_memory key and DeepSpeed >= 0.19.5 now pins by "
                              "default (give --config to tell)"};
    d.try_next = {"ulimit -l unlimited (docker run --ulimit memlock=-1)", "offload pin_memory false, written in the config"};
  } else if (has("loss_scale_minimum")) {
    d.checkpoint = "numerics", d.scenario = "fp16-overflow", d.confidence = "strong";
    d.reason = "fp16 gradients overflowed at every loss scale down to min_loss_scale";
    d.try_next = {"bf16 instead of fp16", "find the loss spike (an outlier batch, a layer whose activations explode)"};
  } else if (has("watchdog_timeout") || has("collective_mismatch")) {
    d.checkpoint = "communication", d.scenario = "mismatched-collectives", d.confidence = "strong";
    d.reason = has("collective_mismatch") ? "ranks issued different collectives at the same sequence number"
                                          : "a collective never completed: a rank is waiting in a collective its peers did not issue";
    d.alternatives = {"straggler: a slow but live rank; the run is slow, not stuck, and the collectives do complete",
                      "data-starvation: ranks waiting on their loaders; the timeout would follow long data waits"};
    d.try_next = {"the same gradient_accumulation_steps and number of batches on every rank (drop_last)",
                  "zrepro run --ranks N --inject gas-mismatch:R reproduces it with a flight-recorder dump"};
  } else if (has("straggler")) {
    d.checkpoint = "communication", d.scenario = "straggler", d.confidence = "strong";
    d.reason = "one rank kept the others waiting in collectives";
    d.try_next = {"check the named rank's node (throttling, a noisy neighbour, its data loader)"};
  } else if (has("wall_clock") && decide_speed(s, d)) {
    // decided: a slow job
  } else if (has("overflow")) {
    d.checkpoint = "", d.scenario = "", d.confidence = "none";
    d.reason = "only loss-scale overflow lines: the normal search for a loss scale at the start of fp16 training";
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
  const double x = num(number);
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

json Diagnosis::to_json() const {
  auto ev = [](const std::vector<Evidence>& v) {
    json a = json::array();
    for (const auto& e : v) a.push_back({{"fingerprint", e.fingerprint}, {"line", e.line}, {"text", e.text}});
    return a;
  };
  return {{"checkpoint", checkpoint.empty() ? json(nullptr) : json(checkpoint)},
          {"scenario", scenario.empty() ? json(nullptr) : json(scenario)},
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
  for (const auto& e : evidence) o << "  line " << e.line << " [" << e.fingerprint << "] " << printable(e.text) << "\n";
  if (!numbers.empty()) o << "  numbers: " << numbers.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
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
