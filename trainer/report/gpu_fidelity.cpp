// See gpu_fidelity.h.
#include "trainer/report/gpu_fidelity.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

namespace zrepro {

using json = nlohmann::json;

namespace {

void widen(std::pair<double, double>& range, double x, bool& first) {
  if (first) range = {x, x};
  range.first = std::min(range.first, x), range.second = std::max(range.second, x);
  first = false;
}

std::string signed_pct(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%+.0f%%", 100 * x);
  return b;
}

std::string range(const std::pair<double, double>& r) { return signed_pct(r.first) + " .. " + signed_pct(r.second); }

// NAME.replan.json beside NAME.json: today's planner against the record's DeepSpeed figures.
void read_replan(GpuFidelity& f) {
  std::filesystem::path path(f.record);
  path.replace_extension(".replan.json");
  std::ifstream in(path);
  if (!in) return;
  const json rep = json::parse(in, nullptr, false);
  if (!rep.is_object() || !rep.value("rows", json()).is_array()) return;
  GpuFidelity g = f;
  g.by_phase.clear();
  g.cases = 0;
  g.reserved_peak.reset();
  bool first_peak = true, first_reserved = true;
  std::map<std::string, bool> first_phase;
  for (const auto& row : rep["rows"]) {
    const json e = row.value("plan_vs_deepspeed", json());
    if (!e.is_number()) continue;
    const std::string phase = row.value("phase", std::string("?"));
    if (phase == "reserved_peak") {
      if (!g.reserved_peak) g.reserved_peak.emplace(0, 0);
      widen(*g.reserved_peak, e.get<double>(), first_reserved);
      continue;
    }
    if (phase == "peak") {
      widen(g.peak, e.get<double>(), first_peak);
      ++g.cases;
      continue;
    }
    if (!first_phase.count(phase)) first_phase[phase] = true;
    widen(g.by_phase[phase], e.get<double>(), first_phase[phase]);
  }
  if (g.cases == 0) return;
  g.replan = path.string();
  g.replanned = rep.value("replanned", std::string("?"));
  f = g;
}

}  // namespace

namespace {

// One case of a GPU record: every phase's error widens its phase's range; the case's peak
// error (the largest plan against the largest DeepSpeed figure) is returned, none when the
// case has no DeepSpeed figure.
std::optional<double> read_case(const json& c, GpuFidelity& f, std::map<std::string, bool>& first_phase) {
  double plan = 0, ds = 0;
  for (const auto& row : c.value("phases", json::array())) {
    const json p = row.value("plan", json()), d = row.value("deepspeed", json());
    if (!p.is_number() || !d.is_number() || d.get<double>() <= 0) continue;
    plan = std::max(plan, p.get<double>()), ds = std::max(ds, d.get<double>());
    const std::string phase = row.value("phase", std::string("?"));
    if (!first_phase.count(phase)) first_phase[phase] = true;
    widen(f.by_phase[phase], (p.get<double>() - d.get<double>()) / d.get<double>(), first_phase[phase]);
  }
  if (ds <= 0) return std::nullopt;
  const json v = c.value("deepspeed", json::object()).value("versions", json::object());
  if (v.is_object() && v.value("deepspeed", json()).is_string()) f.deepspeed = v["deepspeed"];
  return (plan - ds) / ds;
}

// A record's file (conformance/results/gpu/*.json), none when it holds no case.
std::optional<GpuFidelity> read_record(const std::filesystem::path& path) {
  std::ifstream in(path);
  const json rec = json::parse(in, nullptr, false);
  if (!rec.is_object() || !rec.value("cases", json()).is_array()) return std::nullopt;
  GpuFidelity f;
  f.record = path.string();
  const json m = rec.value("machine", json::object());
  f.machine = m.value("gpu", std::string("?")) + ", torch " + m.value("torch", std::string("?"));
  f.recorded = rec.value("recorded", std::string("?"));
  bool first_peak = true;
  std::map<std::string, bool> first_phase;
  for (const auto& c : rec["cases"])
    if (const auto peak = read_case(c, f, first_phase)) {
      widen(f.peak, *peak, first_peak);
      ++f.cases;
    }
  if (f.cases == 0) return std::nullopt;
  return f;
}

}  // namespace

std::optional<GpuFidelity> load_gpu_fidelity(const std::string& dir_arg) {
  const char* env = std::getenv("ZREPRO_GPU_RECORDS");
  const std::string dir = env && *env ? env : dir_arg;
  std::error_code ec;
  std::optional<GpuFidelity> best;  // the newest record
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().extension() != ".json") continue;
    const std::optional<GpuFidelity> f = read_record(e.path());
    if (f && (!best || f->recorded > best->recorded)) best = f;
  }
  if (best) read_replan(*best);
  return best;
}

json GpuFidelity::to_json() const {
  json phases = json::object();
  for (const auto& [p, r] : by_phase) phases[p] = {{"min", r.first}, {"max", r.second}};
  return {{"record", record}, {"machine", machine}, {"recorded", recorded}, {"deepspeed", deepspeed},
          {"replan", replan.empty() ? json(nullptr) : json(replan)},
          {"replanned", replanned.empty() ? json(nullptr) : json(replanned)},
          {"cases", cases}, {"plan_vs_deepspeed_peak", {{"min", peak.first}, {"max", peak.second}}},
          {"plan_vs_deepspeed_by_phase", phases},
          {"plan_vs_deepspeed_reserved_peak",
           reserved_peak ? json{{"min", reserved_peak->first}, {"max", reserved_peak->second}} : json(nullptr)}};
}

std::string format_gpu_fidelity(const GpuFidelity& f) {
  const std::string who = f.replan.empty() ? "the planner's peak was" : "this planner's peak (replanned " + f.replanned + ") is";
  std::string s = "what this plan rests on (docs/lab/GPU.md): measured on " + f.machine + " (" + f.recorded + "), over " +
                  std::to_string(f.cases) + " cases, " + who + " " + range(f.peak) + " off real DeepSpeed " +
                  f.deepspeed + " with Hugging Face's models;";
  for (const char* p : {"init", "forward", "backward", "step"})
    if (f.by_phase.count(p)) s += std::string(" ") + p + " " + range(f.by_phase.at(p)) + ",";
  s.back() = '.';
  if (f.reserved_peak)
    s += " The caching allocator's reserved peak (emulated) is " + range(*f.reserved_peak) +
         " off DeepSpeed's (torch.cuda.max_memory_reserved); on a GPU the verdict binds on reserved bytes, as PyTorch's OOM does.";
  return s + "\n";
}

BandInputs band_inputs(const MemoryPlan& p) {
  BandInputs in{static_cast<double>(p.peak_bytes), static_cast<double>(p.capacity), 0, false};
  if (p.binds_on_reserved) {
    in.planned_reserved = static_cast<double>(p.unbounded_reserved_peak_bytes);
    in.allocator_edge = !p.reserved_fits || p.alloc_retries_per_step > 0;
  }
  return in;
}

BandCall band_call(const GpuFidelity& f, const BandInputs& in) {
  BandCall b;
  b.planned = in.planned_peak, b.capacity = in.capacity;
  b.deepspeed_low = b.planned / (1 + f.peak.second);
  b.deepspeed_high = b.planned / (1 + f.peak.first);
  double high = b.deepspeed_high;
  if (in.planned_reserved > 0 && f.reserved_peak) {
    b.planned_reserved = in.planned_reserved;
    b.reserved_low = in.planned_reserved / (1 + f.reserved_peak->second);
    b.reserved_high = in.planned_reserved / (1 + f.reserved_peak->first);
    b.allocator_edge = in.allocator_edge;
    if (b.allocator_edge) high = std::max(high, b.reserved_high);
  }
  b.inside = b.capacity > 0 && b.deepspeed_low <= b.capacity && b.capacity <= high;
  return b;
}

json BandCall::to_json() const {
  json j = {{"planned_peak_bytes", planned}, {"capacity_bytes", capacity},
            {"deepspeed_peak_range_bytes", {deepspeed_low, deepspeed_high}}, {"inside_band", inside}};
  if (planned_reserved > 0) {
    j["planned_reserved_peak_bytes"] = planned_reserved;
    j["deepspeed_reserved_peak_range_bytes"] = {reserved_low, reserved_high};
    j["allocator_edge"] = allocator_edge;
  }
  return j;
}

BandCall BandCall::from_json(const json& j) {
  BandCall b;
  b.planned = j.at("planned_peak_bytes").get<double>();
  b.capacity = j.at("capacity_bytes").get<double>();
  b.deepspeed_low = j.at("deepspeed_peak_range_bytes").at(0).get<double>();
  b.deepspeed_high = j.at("deepspeed_peak_range_bytes").at(1).get<double>();
  b.inside = j.at("inside_band").get<bool>();
  if (j.contains("planned_reserved_peak_bytes")) {
    b.planned_reserved = j.at("planned_reserved_peak_bytes").get<double>();
    b.reserved_low = j.at("deepspeed_reserved_peak_range_bytes").at(0).get<double>();
    b.reserved_high = j.at("deepspeed_reserved_peak_range_bytes").at(1).get<double>();
    b.allocator_edge = j.at("allocator_edge").get<bool>();
  }
  return b;
}

std::string BandCall::text() const {
  auto range = [&](double lo, double hi) {
    char b[64];
    std::snprintf(b, sizeof b, "%.0f%% .. %.0f%%", 100 * lo / capacity, 100 * hi / capacity);
    return std::string(b);
  };
  std::string s = "real DeepSpeed's peak, by the planner's measured band: " + range(deepspeed_low, deepspeed_high) +
                  " of capacity";
  if (planned_reserved > 0) s += ", its reserved peak " + range(reserved_low, reserved_high);
  if (capacity < deepspeed_low) return s + ": out of memory beyond the band's error";
  if (!inside && planned_reserved > 0 && capacity < reserved_high)
    return s + ": fits beyond the band's error; real DeepSpeed may flush PyTorch's cache to fit (its \"pytorch "
               "allocator cache flushes\" warning, slower steps)";
  if (!inside) return s + ": fits beyond the band's error";
  if (planned_reserved > 0 && capacity > deepspeed_high)
    return s + ": the allocated bytes fit and this plan's caching allocator is at its edge (it flushes its cache or "
               "runs out): whether real DeepSpeed's finds room depends on fragmentation the band allows (too close "
               "to call; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True narrows it)";
  return s + ": the capacity is inside it, too close to call (fits or not depends on the error the band allows)";
}

const std::optional<GpuFidelity>& gpu_band() {
  static const std::optional<GpuFidelity> band = load_gpu_fidelity(ZREPRO_GPU_RECORDS_DIR);
  return band;
}

}  // namespace zrepro
