// `zrepro doctor [--config X --model M --world-size N --device-memory SIZE]`: a
// preflight of this machine for a run, one line per checkpoint with ok / warn / fail
// and the fix: libraries, the config, device memory against the planner's peak, host
// memory, pinned memory (the memlock limit and a real pinned allocation), the host
// link (pinned vs pageable copies, through `zrepro bench copy`) and collectives
// (through `zrepro bench comm` on 2 ranks). Exit 0 without a failing line, 10 with one,
// 2 on bad input.
#include <cctype>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "device/device_memory.h"
#include "offload/host_memory.h"
#include "trainer/app/cli.h"
#include "trainer/app/env.h"
#include "trainer/runtime/subprocess.h"
#include "trainer/planner/fixes.h"

namespace zrepro {

using json = nlohmann::json;

namespace {

struct Check {
  std::string name, level, text;  // level: ok | warn | fail
};

Check libraries() {
  const std::string blas = blas_library();
  const bool openblas = blas.find("openblas") != std::string::npos;
  std::string text = "LibTorch " + std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
                     std::to_string(TORCH_VERSION_PATCH) + " " + libtorch_kind() +
                     "; BLAS " + blas;
  if (!openblas) text += ": LibTorch falls back to the reference BLAS (about 25x slower); install libopenblas0-pthread";
  return {"libraries", openblas ? "ok" : "warn", text};
}

// The planner's peak against the capacity, and the host memory the run keeps.
std::vector<Check> memory(const JobSpec& req) {
  std::vector<Check> out;
  const MemoryPlan p = plan_memory(req);
  if (req.device_capacity <= 0) {
    out.push_back({"device memory", "warn", "planned peak " + format_bytes(p.peak_bytes) + " per rank; give "
                   "--device-memory for a verdict"});
  } else if (p.fits) {
    out.push_back({"device memory", "ok", "planned peak " + format_bytes(p.peak_bytes) + " per rank, " +
                   std::to_string(100 * p.peak_bytes / req.device_capacity) + "% of " + format_bytes(req.device_capacity)});
  } else {
    out.push_back({"device memory", "fail", "planned OOM in phase " + std::string(phase_name(p.oom_phase)) + " (needs " +
                   format_bytes(p.peak_bytes) + " of " + format_bytes(req.device_capacity) + "); " +
                   format_fixes(predict_fixes(req))});
  }
  const int64_t host = p.host_pinned_bytes + p.host_pageable_bytes + p.host_bytes, avail = meminfo_bytes("MemAvailable:");
  if (host > 0)
    out.push_back({"host memory", avail >= 0 && host > avail ? "fail" : "ok",
                   "the run keeps " + format_bytes(host) + " in host memory per rank; " + format_bytes(avail) +
                       " available" + (avail >= 0 && host > avail ? ": fewer ranks per node or less offload" : "")});
  // Pinned memory: the limit, then a real pinned allocation of what the run needs.
  if (p.host_pinned_bytes > 0) {
    const MemlockInfo ml = memlock_info();
    std::string text = "needs " + format_bytes(p.host_pinned_bytes) + " pinned; memlock " +
                       (ml.limit_bytes < 0 ? std::string("unlimited") : format_bytes(ml.limit_bytes)) +
                       (ml.cap_ipc_lock ? ", CAP_IPC_LOCK held" : ", CAP_IPC_LOCK not held");
    if (!p.pinned_fits) {
      out.push_back({"pinned memory", "fail", text + ": raise ulimit -l (docker: --ulimit memlock=-1) or set pin_memory false"});
    } else if (avail >= 0 && p.host_pinned_bytes > avail / 2) {
      out.push_back({"pinned memory", "warn", text + "; a trial allocation of that size was not tried (over half the "
                     "available host memory)"});
    } else {
      try {
        DeviceMemory::HostScope host_scope;
        HostMemory::instance().set_backend(PinBackend::mlock);
        torch::Tensor t = HostMemory::instance().empty(p.host_pinned_bytes, torch::kByte, true, "doctor trial");
        out.push_back({"pinned memory", "ok", text + "; a trial pinned allocation of that size succeeded"});
      } catch (const std::exception& e) {
        out.push_back({"pinned memory", "fail", text + "; the trial pinned allocation failed: " + e.what()});
      }
    }
  }
  return out;
}

// The JSON rows of a bench run as a child process; empty with `why` set when it did not run.
json bench_rows(const std::vector<std::string>& args, const std::string& log, std::string& why) {
  const int code = run_self(args, log);
  std::ifstream in(log);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto at = text.find('[');
  const json rows = code == 0 && at != std::string::npos ? json::parse(text.substr(at), nullptr, false) : json();
  if (rows.is_array() && !rows.empty()) return rows;
  std::string tail = tail_of(log, 2);
  while (!tail.empty() && std::isspace(static_cast<unsigned char>(tail.back()))) tail.pop_back();
  const size_t start = tail.find_first_not_of(' ');
  why = "zrepro " + args[0] + " " + args[1] + " did not run (exit " + std::to_string(code) +
        "): " + (start == std::string::npos ? std::string() : tail.substr(start));
  return json::array();
}

Check host_link(const std::string& out) {
  std::string why;
  const json rows = bench_rows({"bench", "copy", "--sizes", "16M", "--reps", "2", "--json"}, out + "/copy.log", why);
  if (rows.empty()) return {"host link", "fail", why};
  const double pinned = rows[0].value("pinned_gbps", 0.0), pageable = rows[0].value("pageable_gbps", 0.0);
  char buf[160];
  std::snprintf(buf, sizeof buf, "16 MiB copies: pinned %.1f GB/s, pageable %.1f GB/s (%.2fx)", pinned, pageable,
                pinned > 0 ? pageable / pinned : 0.0);
  return {"host link", pageable >= pinned ? "warn" : "ok",
          std::string(buf) + (pageable >= pinned ? ": pinning buys nothing here" : "")};
}

Check collectives(const std::string& out) {
  std::string why;
  const json rows = bench_rows({"bench", "comm", "--ranks", "2", "--min-bytes", "1M", "--max-bytes", "1M", "--iters",
                                "2", "--json"},
                               out + "/comm.log", why);
  if (rows.empty()) return {"communication", "fail", why};
  const double busbw = rows[0].value("busbw_GBps", 0.0);
  char buf[160];
  std::snprintf(buf, sizeof buf, "all-reduce 1 MiB on 2 ranks: bus bandwidth %.2f GB/s", busbw);
  return {"communication", busbw < 0.1 ? "warn" : "ok", buf};
}

}  // namespace

int doctor_command(int argc, char** argv) {
  cxxopts::Options o("zrepro doctor", "Preflight this machine for a run: one line per checkpoint with the fix.");
  add_plan_flags(o);
  o.add_options("doctor")("out", "folder for the bench logs", cxxopts::value<std::string>()->default_value("doctor_out"));
  std::vector<Check> checks;
  try {
    auto r = parse(o, argc, argv);
    if (r.count("help")) {
      std::cout << o.help() << std::endl;
      return kExitOk;
    }
    const std::string out = r["out"].as<std::string>();
    make_out_dir(out);
    checks.push_back(libraries());
    if (r.count("config")) {
      const JobSpec req = plan_request_from(r);
      checks.push_back({"config", req.cfg.warnings.empty() ? "ok" : "warn",
                        req.cfg.file + " resolves (" + std::to_string(req.cfg.warnings.size()) + " warning(s)" +
                            (req.cfg.warnings.empty() ? "" : ": " + req.cfg.warnings.front()) + ")"});
      for (Check& c : memory(req)) checks.push_back(c);
    } else {
      checks.push_back({"config", "warn", "no --config: the memory checks need the run's config and model"});
    }
    checks.push_back(host_link(out));
    checks.push_back(collectives(out));
  } catch (const ConfigError& e) {
    std::cerr << "[zrepro doctor] error: " << e.what() << std::endl;
    return kExitBadInput;
  }
  bool failed = false;
  for (const Check& c : checks) {
    char head[64];
    std::snprintf(head, sizeof head, "[zrepro doctor] %-5s %-15s ", c.level.c_str(), c.name.c_str());
    std::cout << head << c.text << "\n";
    failed = failed || c.level == "fail";
  }
  std::cout << std::flush;
  return failed ? kExitDoctorFailed : kExitOk;
}

}  // namespace zrepro
