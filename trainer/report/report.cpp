// See report.h.
#include "trainer/report/report.h"

#include "trainer/config/leaf_modules.h"

#include <iterator>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "device/base/errors.h"
#include "trainer/model/data.h"
#include "trainer/report/html_report.h"
#include "trainer/report/run_lanes.h"

namespace zrepro {

using json = nlohmann::json;

namespace {
// JSON has no NaN/inf: non-finite numbers become null.
json finite_or_null(double v) { return json_of(finite_value(v)); }

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
}  // namespace

std::string summary_text(const json& summary) { return json_text(summary) + "\n"; }


void write_summary_and_report(const std::string& dir, const Summary& summary) {
  write_file_atomic(dir + "/summary.json", summary_text(summary.to_json()));
  write_file_atomic(dir + "/report.html", html_report(summary, run_lanes(dir, failing_ranks(summary))));
}

MetricsWriter::MetricsWriter(const std::string& dir)
    : final_path_(dir + "/metrics.jsonl"), partial_path_(dir + "/metrics.jsonl.partial") {
  out_.open(partial_path_, std::ios::trunc);
  if (!out_) throw ConfigError("--out: cannot write " + partial_path_ + "; pass a writable folder");
}

MetricsWriter::~MetricsWriter() {
  try {
    close();
  } catch (const std::exception&) {  // a destructor must not throw: the file keeps its .partial name
  }
}

void MetricsWriter::append(const json& line) {
  if (failed_) return;
  out_ << line.dump(-1, ' ', false, json::error_handler_t::replace) << '\n';
  out_.flush();
  if (!out_) {
    failed_ = true;
    throw IoError("cannot write " + partial_path_ + ": the disk is full, a size limit was hit or the file went away; "
                  "it keeps the .partial name");
  }
}

void MetricsWriter::close() {
  if (!out_.is_open()) return;
  out_.close();
  if (!out_) failed_ = true;
  if (failed_) return;  // never a partial file under the final name
  std::error_code ec;
  std::filesystem::rename(partial_path_, final_path_, ec);
  if (ec) throw IoError("cannot rename " + partial_path_ + " to " + final_path_ + ": " + ec.message());
}

json step_json(const StepRecord& s) {
  return {{"step", s.step},
          {"loss", finite_or_null(s.loss)},
          {"grad_norm", finite_or_null(s.grad_norm)},
          {"loss_scale", s.loss_scale},
          {"skipped", s.skipped},
          {"lr", s.lr},
          {"replicas_identical", s.replicas_identical < 0 ? json(nullptr) : json(s.replicas_identical == 1)},
          {"time_s", {{"step", s.step_s},
                      {"forward", s.forward_s},
                      {"backward", s.backward_s},
                      {"optimizer", s.optimizer_s},
                      {"data_wait", s.data_wait_s},
                      {"comm_wait", s.comm_wait_s}}},
          {"memory", {{"allocated", s.memory.allocated}, {"peak", s.memory.peak}, {"peak_phase", phase_name(s.memory.peak_phase)},
                      {"reserved", s.memory.reserved}, {"peak_reserved", s.memory.peak_reserved},
                      {"alloc_retries", s.memory.alloc_retries}}},
          {"offload", {{"d2h_bytes", s.copies.bytes[0]},
                       {"h2d_bytes", s.copies.bytes[1]},
                       {"copy_s", s.copies.busy_s()},
                       {"exposed_s", s.copies.exposed_s}}},
          {"comm_bytes", {{"all_reduce", s.comm[CollOp::all_reduce].bytes},
                          {"reduce_scatter", s.comm[CollOp::reduce_scatter].bytes},
                          {"all_gather", s.comm[CollOp::all_gather].bytes}}}};
}

namespace {

constexpr FailureRow kFailures[] = {
    {"config_error", "config_error", kExitBadInput, "config"},
    {"oom", "oom", kExitOom, "zero-stage"},
    {"host-oom", "host_oom", kExitHostOom, "host-memory"},
    {"hang", "hang", kExitHang, "communication"},
    {"numerical", "diverged", kExitNumerical, "numerics"},
    {"pinned-memory", "pinned_memory", kExitPinnedMemory, "pinned-memory"},
    {"interrupted", "interrupted", kExitInterrupted, ""},  // SIGTERM: 143 (run.cpp)
    {"io", "io_error", kExitIo, ""},
    {"error", "error", kExitInternal, ""},
};

}  // namespace

// One row per FailureKind, in its order.
static_assert(std::size(kFailures) == static_cast<size_t>(FailureKind::internal) + 1, "a FailureKind without its row");

const FailureRow& failure_row(FailureKind k) { return kFailures[static_cast<int>(k)]; }

json make_failure(FailureKind k, int rank, const std::string& phase, const std::string& message,
                  const std::string& hint) {
  const FailureRow& row = failure_row(k);
  return {{"kind", row.kind},          {"rank", rank}, {"phase", phase}, {"message", message},
          {"checkpoint", row.checkpoint}, {"hint", hint}};
}

std::vector<double> RankReport::pack() const {
  std::vector<double> v = {static_cast<double>(rank), static_cast<double>(memory.params),
                           static_cast<double>(memory.grads), static_cast<double>(memory.optimizer_states),
                           comm_wait_s, step_s,
                           static_cast<double>(device.capacity), static_cast<double>(device.peak),
                           static_cast<double>(static_cast<int>(device.peak_phase)),
                           static_cast<double>(device.peak_reserved),
                           static_cast<double>(memory.host_pinned), static_cast<double>(memory.host_pageable),
                           static_cast<double>(copies.bytes[0]), static_cast<double>(copies.bytes[1]),
                           copies.seconds[0], copies.seconds[1], copies.exposed_s,
                           copies.exposed_dir_s[0], copies.exposed_dir_s[1]};
  for (int64_t b : device.by_category_at_peak) v.push_back(static_cast<double>(b));
  for (int64_t b : device.category_peaks) v.push_back(static_cast<double>(b));
  for (int64_t b : device.phases.allocated) v.push_back(static_cast<double>(b));
  for (int64_t b : device.phases.reserved) v.push_back(static_cast<double>(b));
  v.push_back(growth ? 1.0 : 0.0);
  for (int c = 0; c <= kNumMemCategories; ++c) v.push_back(growth ? (*growth)[c] : 0.0);
  v.push_back(static_cast<double>(device.alloc_retries));
  return v;
}

RankReport RankReport::unpack(const double* v) {
  RankReport r;
  r.rank = static_cast<int>(v[0]);
  r.memory = {static_cast<int64_t>(v[1]), static_cast<int64_t>(v[2]), static_cast<int64_t>(v[3])};
  r.comm_wait_s = v[4];
  r.step_s = v[5];
  r.device.capacity = static_cast<int64_t>(v[6]);
  r.device.peak = static_cast<int64_t>(v[7]);
  r.device.peak_phase = static_cast<Phase>(static_cast<int>(v[8]));
  r.device.peak_reserved = static_cast<int64_t>(v[9]);
  r.memory.host_pinned = static_cast<int64_t>(v[10]);
  r.memory.host_pageable = static_cast<int64_t>(v[11]);
  r.copies.bytes[0] = static_cast<int64_t>(v[12]);
  r.copies.bytes[1] = static_cast<int64_t>(v[13]);
  r.copies.seconds[0] = v[14];
  r.copies.seconds[1] = v[15];
  r.copies.exposed_s = v[16];
  r.copies.exposed_dir_s[0] = v[17];
  r.copies.exposed_dir_s[1] = v[18];
  for (int c = 0; c < kNumMemCategories; ++c) {
    r.device.by_category_at_peak[c] = static_cast<int64_t>(v[19 + c]);
    r.device.category_peaks[c] = static_cast<int64_t>(v[19 + kNumMemCategories + c]);
  }
  for (int p = 0; p < kNumPhases; ++p) {
    r.device.phases.allocated[p] = static_cast<int64_t>(v[19 + 2 * kNumMemCategories + p]);
    r.device.phases.reserved[p] = static_cast<int64_t>(v[19 + 2 * kNumMemCategories + kNumPhases + p]);
  }
  const double* g = v + 19 + 2 * kNumMemCategories + 2 * kNumPhases;
  if (g[0] != 0) {
    r.growth.emplace();
    for (int c = 0; c <= kNumMemCategories; ++c) (*r.growth)[c] = g[1 + c];
  }
  r.device.alloc_retries = static_cast<int64_t>(g[2 + kNumMemCategories]);
  return r;
}

RankReport rank_report(int rank, const TrainResult& res, const MemorySnapshot& device) {
  RankReport r;
  r.rank = rank;
  r.memory = res.memory;
  r.device = device;
  r.copies = res.copies;
  int64_t tracked = 0;
  for (int64_t b : device.by_category_at_peak) tracked += b;
  if (tracked == 0 && device.peak > 0) {
    // CUDA: the caching allocator keeps no categories; the engine's model states are
    // exact, the rest of the peak is reported as other.
    auto& c = r.device.by_category_at_peak;
    c[static_cast<int>(MemCategory::params)] = res.memory.params;
    c[static_cast<int>(MemCategory::grads)] = res.memory.grads;
    c[static_cast<int>(MemCategory::optimizer_states)] = res.memory.optimizer_states;
    c[static_cast<int>(MemCategory::other)] =
        std::max<int64_t>(0, device.peak - res.memory.params - res.memory.grads - res.memory.optimizer_states);
  }
  for (const auto& s : res.steps) r.comm_wait_s += s.comm_wait_s, r.step_s += s.step_s;
  r.growth = growth_per_step(res.steps);
  return r;
}

std::optional<std::array<double, kNumMemCategories + 1>> growth_per_step(const std::vector<StepRecord>& steps) {
  const int64_t n = static_cast<int64_t>(steps.size()) - kGrowthWarmupSteps;
  if (n < kGrowthMinSteps) return std::nullopt;
  std::array<double, kNumMemCategories + 1> slope{};
  const double mean_x = static_cast<double>(n - 1) / 2;
  double sxx = 0;
  for (int64_t i = 0; i < n; ++i) sxx += (static_cast<double>(i) - mean_x) * (static_cast<double>(i) - mean_x);
  for (int c = 0; c <= kNumMemCategories; ++c) {
    auto y = [&](int64_t i) {
      const MemorySnapshot& m = steps[static_cast<size_t>(kGrowthWarmupSteps + i)].memory;
      return static_cast<double>(c < kNumMemCategories ? m.by_category[c] : m.allocated);
    };
    double mean_y = 0, sxy = 0;
    for (int64_t i = 0; i < n; ++i) mean_y += y(i) / static_cast<double>(n);
    for (int64_t i = 0; i < n; ++i) sxy += (static_cast<double>(i) - mean_x) * (y(i) - mean_y);
    slope[c] = sxy / sxx;
  }
  return slope;
}

// [Note: who is the straggler] A collective finishes when its last rank arrives, so the
// rank the others wait for waits least itself. Its peers' mean wait minus its own is the
// time it cost them.
std::optional<SummaryStraggler> straggler_of(const std::vector<RankReport>& ranks) {
  if (ranks.size() < 2) return std::nullopt;
  size_t slow = 0;
  double sum = 0, step = 0;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i].comm_wait_s < ranks[slow].comm_wait_s) slow = i;
    sum += ranks[i].comm_wait_s, step += ranks[i].step_s;
  }
  const double others = (sum - ranks[slow].comm_wait_s) / static_cast<double>(ranks.size() - 1);
  const double mean_step_total = step / static_cast<double>(ranks.size());
  if (others - ranks[slow].comm_wait_s <= 0.25 * mean_step_total) return std::nullopt;
  return SummaryStraggler{ranks[slow].rank, others, ranks[slow].comm_wait_s};
}

std::string allocator_flush_line(int64_t flushes) {
  return "[WARNING] " + std::to_string(flushes) +
         " pytorch allocator cache flushes since last step. this happens when there is high memory pressure and is "
         "detrimental to performance. if this is happening frequently consider adjusting settings to reduce memory "
         "consumption. If you are unable to make the cache flushes go away consider adding "
         "get_accelerator().empty_cache() calls in your training loop to ensure that all ranks flush their caches at "
         "the same time";
}

std::string peak_summary(const MemorySnapshot& m, int64_t step) {
  std::vector<std::pair<int64_t, int>> cats;
  for (int c = 0; c < kNumMemCategories; ++c)
    if (m.by_category_at_peak[c] > 0) cats.push_back({m.by_category_at_peak[c], c});
  std::sort(cats.begin(), cats.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string s = "peak " + format_bytes(m.peak);
  if (m.capacity > 0)
    s += " (" + std::to_string(static_cast<int>(std::lround(100.0 * static_cast<double>(m.peak) /
                                                            static_cast<double>(m.capacity)))) +
         "% of " + format_bytes(m.capacity) + ")";
  s += std::string(" in ") + phase_name(m.peak_phase) + (step > 0 ? " of step " + std::to_string(step) : "");
  for (size_t i = 0; i < cats.size() && i < 3; ++i)
    s += std::string(i == 0 ? ": " : ", ") + mem_category_name(static_cast<MemCategory>(cats[i].second)) + " " +
         format_bytes(cats[i].first);
  return s;
}

std::string memory_line(const MemorySnapshot& m) {
  char buf[200];
  // CA: reserved (caching mode: segments; otherwise nothing is cached and CA = MA).
  std::snprintf(buf, sizeof buf, "MA %.2f GB         Max_MA %.2f GB         CA %.2f GB         Max_CA %.2f GB ",
                m.allocated / 1e9, m.peak / 1e9, m.reserved / 1e9, m.peak_reserved / 1e9);
  return buf;
}

namespace {

// Per collective type: bytes per step (ZeRO convention) and, in ops, calls, bytes and time
// per step with nccl-tests bandwidths from the whole-run totals of rank 0.
SummaryComm comm_of(const std::vector<StepRecord>& steps, int world, double modelled_busbw_gbps) {
  SummaryComm c;
  c.ops = json::object();
  CommStats total;
  for (const auto& s : steps)
    for (int i = 0; i < kNumCollOps; ++i) {
      total.ops[i].calls += s.comm.ops[i].calls;
      total.ops[i].bytes += s.comm.ops[i].bytes;
      total.ops[i].array_bytes += s.comm.ops[i].array_bytes;
      total.ops[i].seconds += s.comm.ops[i].seconds;
    }
  const double n = steps.empty() ? 1.0 : static_cast<double>(steps.size());
  for (CollOp op : {CollOp::all_reduce, CollOp::reduce_scatter, CollOp::all_gather, CollOp::broadcast}) {
    const OpStats& t = total[op];
    c.bytes_per_step[coll_op_name(op)] = steps.empty() ? std::nullopt : std::optional<double>(static_cast<double>(t.bytes) / n);
    const double algbw = t.seconds > 0 ? static_cast<double>(t.array_bytes) / t.seconds / 1e9 : 0;
    c.ops[coll_op_name(op)] = {{"calls_per_step", static_cast<double>(t.calls) / n},
                               {"bytes_per_step", static_cast<double>(t.bytes) / n},
                               {"seconds_per_step", t.seconds / n},
                               {"algbw_GBps", t.seconds > 0 ? json(algbw) : json(nullptr)},
                               {"busbw_GBps", t.seconds > 0 ? json(algbw * busbw_factor(op, world)) : json(nullptr)}};
  }
  if (modelled_busbw_gbps > 0) c.modelled_busbw_GBps = modelled_busbw_gbps;
  return c;
}

// What offload moved over the host link per rank, how long the link was busy and
// how much of that the compute thread waited for (exposed); the rest overlapped.
json offload_json(const DsConfig& c, const SummaryInput& in, const std::vector<RankReport>& ranks) {
  const OffloadConfig& oo = c.zero.offload_optimizer;
  const OffloadConfig& op = c.zero.offload_param;
  if (!oo.enabled() && !op.enabled()) return nullptr;
  json rj = json::array();
  for (const auto& r : ranks) {
    const CopyStats& k = r.copies;
    rj.push_back({{"rank", r.rank},
                  {"d2h_bytes", k.bytes[0]},
                  {"h2d_bytes", k.bytes[1]},
                  {"copy_s", k.busy_s()},
                  {"d2h_copy_s", k.seconds[0]},
                  {"h2d_copy_s", k.seconds[1]},
                  {"exposed_s", k.exposed_s},
                  {"d2h_exposed_s", k.exposed_dir_s[0]},  // waits on gradients going down
                  {"h2d_exposed_s", k.exposed_dir_s[1]},  // waits on parameters coming up
                  {"overlapped_s", k.overlapped_s()},
                  {"overlap_ratio", k.busy_s() > 0 ? json(k.overlapped_s() / k.busy_s()) : json(nullptr)},
                  // The compute thread ("the device") is idle while it waits on copies.
                  {"device_busy_fraction", r.step_s > 0 ? json(1.0 - k.exposed_s / r.step_s) : json(nullptr)},
                  {"host_pinned_bytes", r.memory.host_pinned},
                  {"host_pageable_bytes", r.memory.host_pageable}});
  }
  return {{"offload_optimizer", {{"device", oo.device}, {"pin_memory", oo.pin_memory}, {"ratio", oo.ratio}}},
          {"offload_param", {{"device", op.device}, {"pin_memory", op.pin_memory}}},
          {"host_link_gbps", in.host_link_gbps > 0 ? json(in.host_link_gbps) : json(nullptr)},
          {"pageable_ratio", in.pageable_ratio},
          {"ranks", rj}};
}

// --zero-to-fp32's consolidation (trainer/checkpoint/zero_to_fp32.h), or null.
json fp32_export_json(const TrainResult* r) {
  if (!r || !r->fp32_export) return nullptr;
  const Fp32Export& e = *r->fp32_export;
  return {{"mode", e.api ? "api" : "script"},
          {"max_shard_bytes", e.api ? json(nullptr) : json(e.max_shard_bytes)},
          {"tag", e.tag},
          {"files", e.files},
          {"parameters", e.parameters},
          {"numel", e.numel},
          {"peak_anon_host_bytes", e.peak_anon_bytes},
          {"mapped_bytes", e.mapped_bytes}};
}

// The loss a perfect model approaches on the data, and how it was fed.
json data_json(const SummaryInput& in) {
  if (!in.model) return nullptr;
  json d = {{"kind", "markov"}, {"entropy_floor_nats", MarkovData::entropy_floor()}};
  if (!in.train) return d;
  const LossNormalizationRow& n = loss_normalization_row(in.train->loss_normalization);
  d["seq_len_dist"] = in.train->seq_len_dist.spec();
  d["loss_normalization"] = {{"kind", n.name}, {"as", n.transformers}};
  const LoaderOptions& l = in.train->loader;
  // The loader's own pin_memory: input batches only, never the offload buffers.
  d["loader"] = {{"workers", l.workers},
                 {"prefetch_factor", l.prefetch_factor},
                 {"sample_ms_emulated", l.sample_ms},
                 {"pin_memory", l.pin_memory},
                 {"pinned_bytes_peak", in.result ? json(in.result->input_pinned_peak) : json(nullptr)}};
  return d;
}

json model_json(const SummaryInput& in) {
  if (!in.model) return nullptr;
  json m = in.model->to_json();
  if (in.model->moe() && in.config) {  // how this run's ZeRO fetched them (leaf_modules.h)
    try {
      const ExpertFetch f = expert_fetch(*in.model, in.config->zero);
      m["experts"]["fetched"] = f.one_by_one ? "expert by expert" : "with their block";
      m["experts"]["fetched_why"] = f.why;
    } catch (const ConfigError&) {
      // The leaf names were refused: the summary's failure says why.
    }
  }
  return m;
}

// --save-every / --resume: what was saved and what the run resumed from.
json checkpoint_json(const SummaryInput& in) {
  if (!in.train || (in.train->save_every <= 0 && in.train->resume_dir.empty())) return nullptr;
  json saved = json::array();
  json resumed = nullptr;
  if (in.result) {
    for (const auto& c : in.result->saved)
      saved.push_back({{"step", c.step}, {"folder", c.folder}, {"seconds", c.seconds},
                       {"consolidated_16bit_host_bytes", c.consolidated_host_bytes}});
    if (in.result->resumed)
      resumed = {{"folder", in.result->resumed->folder}, {"tag", in.result->resumed->tag},
                 {"step", in.result->resumed->step}, {"universal", in.result->resumed->universal}};
  }
  return {{"format", "DeepSpeed 0.19.8 ZeRO checkpoint (engine.save_checkpoint's files)"},
          {"save_every", in.train->save_every > 0 ? json(in.train->save_every) : json(nullptr)},
          {"save_dir", in.train->save_dir.empty() ? json(nullptr) : json(in.train->save_dir)},
          {"saved", saved},
          {"resumed", resumed},
          {"zero_to_fp32", fp32_export_json(in.result)}};
}

// The run's setting: schema, status, world, precision, device, model, env, data, batch
// and checkpoints (the parts other modules own stay their JSON: summary.h).
Summary typed_setting(const SummaryInput& in) {
  Summary s;
  s.schema = kSummarySchema;
  s.status = in.status;
  if (const DsConfig* c = in.config) {
    s.world_size = c->world_size, s.zero_stage = c->zero.stage, s.precision = precision_name(c->precision);
    s.deepspeed_version = c->deepspeed_version;  // the release whose semantics resolved the config
    s.batch = SummaryBatch{c->micro_batch, c->grad_accum, c->train_batch_size};
    s.effective_config = c->effective_json();
  }
  if (!in.device.empty()) s.device = in.device;
  s.model = model_json(in);
  s.env = in.env;
  s.virtual_ranks = in.virtual_ranks;
  if (!in.config_mismatch.empty()) s.config_mismatch = in.config_mismatch;
  s.data = data_json(in);
  s.checkpoint = checkpoint_json(in);
  s.inputs = in.inputs;
  if (in.scale_down) s.scale_down = in.scale_down->to_json();
  return s;
}

// summary.json's steps: what metrics.jsonl has of each step without its detail.
std::vector<SummaryStep> typed_steps(const TrainResult& result) {
  std::vector<SummaryStep> steps;
  for (const auto& r : result.steps)
    steps.push_back({r.step, finite_value(r.loss), finite_value(r.grad_norm), r.loss_scale, r.skipped, r.lr, r.step_s,
                     r.replicas_identical < 0 ? std::nullopt : std::optional<bool>(r.replicas_identical == 1)});
  return steps;
}

// The median step, throughput, the time by part, each rank's times and the straggler.
SummaryTime typed_time(const SummaryInput& in, const std::vector<RankReport>& ranks) {
  std::vector<double> st;
  double fwd = 0, bwd = 0, opt = 0, data = 0, wait = 0, copy = 0;
  for (const auto& r : in.result->steps) {
    st.push_back(r.step_s);
    fwd += r.forward_s, bwd += r.backward_s, opt += r.optimizer_s, data += r.data_wait_s, wait += r.comm_wait_s;
    copy += r.copies.exposed_s;
  }
  const double med = median(st);
  const double tokens = in.config && in.model ? static_cast<double>(in.config->train_batch_size * in.model->seq) : 0;
  SummaryTime t;
  if (!st.empty()) t.step_s_median = med;
  if (med > 0) t.tokens_per_s = tokens / med;
  t.breakdown_s = {{"forward", fwd}, {"backward", bwd}, {"comm_wait", wait}, {"optimizer", opt},
                   {"offload_copy", copy}, {"data_wait", data}};
  for (const auto& r : ranks) t.ranks.push_back({r.rank, r.comm_wait_s, r.step_s});
  t.straggler = straggler_of(ranks);
  t.calibration = SummaryCalibration::from_json(in.calibration);
  return t;
}

SummaryCategories by_category(const std::array<int64_t, kNumMemCategories>& bytes) {
  SummaryCategories c;
  for (int i = 0; i < kNumMemCategories; ++i) c[mem_category_name(static_cast<MemCategory>(i))] = bytes[i];
  return c;
}

// [Note: phase windows] as memory.timeline: rank 0's (the reporting rank's) peak per step
// and phase, with the categories at that peak; the failing step's phases last, marked
// unfinished. At most kTimelinePoints: the first and last halves of a longer run.
constexpr size_t kTimelinePoints = 400;

std::vector<SummaryTimelinePoint> typed_timeline(const SummaryInput& in) {
  std::vector<SummaryTimelinePoint> points;
  auto add = [&](int64_t step, const PhaseWindow& w, bool unfinished) {
    if (w.peak <= 0) return;  // a device the tracking allocator does not see (CUDA)
    points.push_back({step, phase_name(w.phase), w.peak, by_category(w.by_category), unfinished});
  };
  for (const StepRecord& r : in.result->steps)
    for (const PhaseWindow& w : r.windows) add(r.step, w, false);
  const int64_t next = in.result->steps.empty() ? 0 : in.result->steps.back().step + 1;
  // Only the phase it failed in is unfinished; the phases before it completed.
  for (size_t i = 0; i < in.unfinished.size(); ++i) add(next, in.unfinished[i], i + 1 == in.unfinished.size());
  if (points.size() <= kTimelinePoints) return points;
  const size_t half = kTimelinePoints / 2;
  std::vector<SummaryTimelinePoint> kept(points.begin(), points.begin() + half);
  kept.insert(kept.end(), points.end() - half, points.end());
  return kept;
}


}  // namespace

SummaryRankMemory rank_memory(const RankReport& r) {
  SummaryRankMemory m;
  m.rank = r.rank, m.peak_bytes = r.device.peak, m.peak_phase = phase_name(r.device.peak_phase);
  m.peak_reserved_bytes = r.device.peak_reserved;
  m.by_category = by_category(r.device.by_category_at_peak);
  m.category_peaks = by_category(r.device.category_peaks);
  m.model_states = {{"params", r.memory.params}, {"grads", r.memory.grads}, {"optimizer_states", r.memory.optimizer_states}};
  // [Note: phase peaks]: the phases the run entered, in Phase order.
  for (int p = 0; p < kNumPhases; ++p)
    if (r.device.phases.allocated[p] > 0 || r.device.phases.reserved[p] > 0)
      m.phases.push_back({phase_name(static_cast<Phase>(p)), r.device.phases.allocated[p], r.device.phases.reserved[p]});
  m.host_pinned_bytes = r.memory.host_pinned, m.host_pageable_bytes = r.memory.host_pageable;
  m.comm_wait_s = r.comm_wait_s;
  m.alloc_retries = r.device.alloc_retries;
  if (r.growth)
    for (int c = 0; c <= kNumMemCategories; ++c)
      m.growth_bytes_per_step[c < kNumMemCategories ? mem_category_name(static_cast<MemCategory>(c)) : "total"] = (*r.growth)[c];
  return m;
}

Summary build_summary(const SummaryInput& in) {
  Summary s = typed_setting(in);
  const DsConfig* c = in.config;
  // Every rank's report, or rank 0's own when it ran alone.
  std::vector<RankReport> ranks = in.ranks;
  if (ranks.empty() && in.result) ranks.push_back(rank_report(0, *in.result, MemorySnapshot{}));
  if (in.result) {
    s.steps = typed_steps(*in.result);
    s.skipped_steps = in.result->skipped_steps;
    s.time = typed_time(in, ranks);
    SummaryMemory memory;
    if (ranks[0].device.capacity > 0) memory.device_capacity_bytes = ranks[0].device.capacity;
    for (const auto& r : ranks) memory.ranks.push_back(rank_memory(r));
    memory.timeline = typed_timeline(in);
    s.memory = memory;
    s.comm = comm_of(in.result->steps, c ? c->world_size : 1, in.modelled_busbw_gbps);
  }
  if (in.planned) {
    if (!s.memory) s.memory.emplace();
    s.memory->planned = in.planned->to_json();
  }
  if (c && in.result) s.offload = offload_json(*c, in, ranks);
  if (in.failure.is_object()) s.failure = SummaryFailure::from_json(in.failure);
  return s;
}

void check_summary_schema(const json& summary, const std::string& where) {
  if (!summary.is_object()) return;
  const json schema = summary.value("schema", json());
  if (schema == kSummarySchema) return;
  throw ConfigError(where + ": a summary of schema " + (schema.is_null() ? std::string("none (written by a zrepro before "
                    "summaries named their schema)") : "\"" + json_text(schema, -1) + "\"") + ", and this zrepro reads " +
                    kSummarySchema + ": rerun that run with this zrepro (docs/reference/summary-json.md)");
}

std::optional<Summary> read_summary(const std::string& path) {
  const json s = read_json_file(path);
  if (!s.is_object()) return std::nullopt;
  check_summary_schema(s, path);
  try {
    return Summary::from_json(s);
  } catch (const json::exception& e) {
    throw ConfigError(path + ": not a summary of schema " + kSummarySchema + " (" + e.what() +
                      "): give a summary.json this zrepro's run wrote");
  }
}

std::string oom_hint(const MemorySnapshot& at, Phase phase, const StagePolicy& policy) {
  int top = 0;
  for (int c = 1; c < kNumMemCategories; ++c)
    if (at.by_category[c] > at.by_category[top]) top = c;
  // A request larger than all that is allocated is the cause itself (a 2 GB bucket on a
  // device holding 1 MB of activations): its category decides the hint.
  if (at.request_category >= 0 && at.request > at.allocated) {
    const MemCategory c = static_cast<MemCategory>(at.request_category);
    const std::string asked = "the failed request: " + format_bytes(at.request) + " of " + mem_category_name(c) +
                              (at.capacity > 0 ? ", " + std::to_string(100 * at.request / at.capacity) + "% of the device" : "") +
                              ", more than all that was allocated before it. ";
    if (c == MemCategory::comm_buffers)
      return asked + "A communication bucket this size does not fit: smaller reduce_bucket_size / allgather_bucket_size "
                     "(stage3_prefetch_bucket_size at stage 3), e.g. hidden^2 elements.";
  }
  // Its share of the device too: the same at a scaled-down toy's scale and the target's.
  const std::string share =
      at.capacity > 0 ? ", " + std::to_string(100 * at.by_category[top] / at.capacity) + "% of the device" : "";
  const std::string largest = std::string("largest category: ") + mem_category_name(static_cast<MemCategory>(top)) +
                              " (" + format_bytes(at.by_category[top]) + share + "). ";
  const int64_t params = at.by_category[static_cast<int>(MemCategory::params)];
  switch (phase) {
    case Phase::init:
      return largest + "The 16-bit parameters do not fit: ZeRO stage 3 shards them (stage 1/2 keep a full copy per rank).";
    case Phase::partition:
      return largest + "Optimizer states (fp32 master + Adam moments, 12 bytes/param) do not fit: more ranks with "
                       "stage >= 1, or offload_optimizer to cpu.";
    case Phase::forward:
    case Phase::backward:
      // Replicated parameters: every 16-bit parameter on every rank (configs/scenarios/zero2-params-dont-fit).
      if (policy.replicated_params() && at.capacity > 0 && params * 4 > at.capacity)
        return largest + "The full 16-bit parameters take " + std::to_string(100 * params / at.capacity) +
               "% of the device on every rank (stage " + std::to_string(policy.stage) +
               " does not shard them): ZeRO stage 3 keeps 1/N of them per rank; otherwise activation "
               "checkpointing or a smaller micro-batch.";
      return largest + "Model states fit but this micro-batch's activations or buffers do not: activation "
                       "checkpointing, or a smaller micro-batch with more gradient accumulation (same global batch); "
                       "if comm_buffers dominate, smaller reduce_bucket_size / stage3_prefetch_bucket_size.";
    default:
      return largest + "Out of memory in the optimizer step: optimizer offload, or more ranks.";
  }
}

std::string pin_memory_default_note(const DsConfig& cfg) {
  for (const auto& e : cfg.entries)
    if (e.source == Source::default_ && e.value == true && e.path.find("offload_") != std::string::npos &&
        e.path.size() > 11 && e.path.compare(e.path.size() - 11, 11, ".pin_memory") == 0)
      return "; " + e.path + " is true because the config does not set it (DeepSpeed " + cfg.deepspeed_version +
             "'s default, " + e.note + "): set it false in the config to keep pageable buffers";
  return "";
}

}  // namespace zrepro
