// See report.h.
#include "trainer/report.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "device/errors.h"

namespace zrepro {

using json = nlohmann::json;

namespace {
// JSON has no NaN/inf: non-finite numbers become null.
json num(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
}  // namespace

void write_file_atomic(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << content;
    out.flush();
    if (!out) throw std::runtime_error("cannot write " + tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    throw std::runtime_error("cannot rename " + tmp + " to " + path + ": " + ec.message());
  }
}

MetricsWriter::MetricsWriter(const std::string& dir)
    : final_path_(dir + "/metrics.jsonl"), partial_path_(dir + "/metrics.jsonl.partial") {
  out_.open(partial_path_, std::ios::trunc);
  if (!out_) throw ConfigError("--out: cannot write " + partial_path_ + "; pass a writable folder");
}

MetricsWriter::~MetricsWriter() { close(); }

void MetricsWriter::append(const json& line) {
  out_ << line.dump() << '\n';
  out_.flush();
}

void MetricsWriter::close() {
  if (!out_.is_open()) return;
  out_.close();
  std::filesystem::rename(partial_path_, final_path_);
}

json step_json(const StepRecord& s) {
  return {{"step", s.step},
          {"loss", num(s.loss)},
          {"grad_norm", num(s.grad_norm)},
          {"loss_scale", s.loss_scale},
          {"skipped", s.skipped},
          {"lr", s.lr},
          {"time_s", {{"step", s.step_s},
                      {"forward", s.forward_s},
                      {"backward", s.backward_s},
                      {"optimizer", s.optimizer_s},
                      {"data_wait", s.data_wait_s}}}};
}

json make_failure(const std::string& kind, int rank, const std::string& phase, const std::string& message,
                  const std::string& checkpoint, const std::string& hint) {
  return {{"kind", kind},          {"rank", rank}, {"phase", phase}, {"message", message},
          {"checkpoint", checkpoint}, {"hint", hint}};
}

json build_summary(const SummaryInput& in) {
  json s;
  s["status"] = in.status;
  const DsConfig* c = in.config;
  s["world_size"] = c ? json(c->world_size) : json(nullptr);
  s["zero_stage"] = c ? json(c->zero.stage) : json(nullptr);
  s["precision"] = c ? json(precision_name(c->precision)) : json(nullptr);
  s["device"] = in.device.empty() ? json(nullptr) : json(in.device);
  s["model"] = in.model ? in.model->to_json() : json(nullptr);
  s["batch"] = c ? json{{"micro", c->micro_batch}, {"grad_accum", c->grad_accum}, {"global", c->train_batch_size}}
                 : json(nullptr);
  json steps = json::array();
  json time = nullptr, memory = nullptr;
  if (in.result) {
    std::vector<double> st;
    double fwd = 0, bwd = 0, opt = 0, data = 0;
    for (const auto& r : in.result->steps) {
      json j = step_json(r);
      j.erase("time_s");
      steps.push_back(j);
      st.push_back(r.step_s);
      fwd += r.forward_s, bwd += r.backward_s, opt += r.optimizer_s, data += r.data_wait_s;
    }
    const double med = median(st);
    const double tokens = c && in.model ? static_cast<double>(c->train_batch_size * in.model->seq) : 0;
    time = {{"step_s_median", st.empty() ? json(nullptr) : json(med)},
            {"tokens_per_s", med > 0 ? json(tokens / med) : json(nullptr)},
            {"breakdown_s",
             {{"forward", fwd}, {"backward", bwd}, {"comm_wait", nullptr}, {"optimizer", opt},
              {"offload_copy", nullptr}, {"data_wait", data}}}};
    // Engine-owned persistent storage is known exactly; peaks, activations and
    // buffers need the tracking allocator (not in this build): null.
    memory = {{"device_capacity_bytes", nullptr},
              {"ranks", json::array({{{"rank", 0},
                                      {"peak_bytes", nullptr},
                                      {"peak_phase", nullptr},
                                      {"by_category",
                                       {{"params", in.result->params_bytes},
                                        {"grads", in.result->grads_bytes},
                                        {"optimizer_states", in.result->optimizer_states_bytes},
                                        {"activations", nullptr},
                                        {"comm_buffers", nullptr},
                                        {"other", nullptr}}},
                                      {"host_pinned_bytes", nullptr}}})}};
    s["skipped_steps"] = in.result->skipped_steps;
  }
  s["steps"] = steps;
  s["time"] = time;
  s["memory"] = memory;
  s["comm"] = {{"bytes_per_step", {{"all_reduce", nullptr}, {"reduce_scatter", nullptr},
                                   {"all_gather", nullptr}, {"broadcast", nullptr}}}};
  s["failure"] = in.failure;
  s["effective_config"] = c ? c->effective_json() : json(nullptr);
  return s;
}

}  // namespace zrepro
