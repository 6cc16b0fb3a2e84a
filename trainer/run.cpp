// `zrepro run`: train under a DeepSpeed config on 1..N ranks and record what
// happens. Under mpirun (or with --ranks N, which starts mpirun) every rank runs
// this; rank 0 alone prints for humans and writes summary.json, gathering the
// other ranks' reports. A watchdog turns a stuck collective into a diagnosed hang
// (exit 4 on every rank); every other failure becomes a summary and its exit code.
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "device/cuda_memory.h"
#include "device/device.h"
#include "device/errors.h"
#include "offload/host_memory.h"
#include "trainer/cli.h"
#include "trainer/hang.h"
#include "trainer/html_report.h"
#include "trainer/data.h"
#include "trainer/gpt.h"
#include "trainer/launch.h"
#include "trainer/link_profile.h"
#include "trainer/report.h"
#include "trainer/scale_down.h"
#include "trainer/trace.h"
#include "trainer/train.h"
#include "zero/comm/mpi_communicator.h"
#include "zero/comm/watchdog.h"

namespace zrepro {

using json = nlohmann::json;

namespace {

// One-line progress on a terminal (stderr), overwritten in place.
class Progress {
 public:
  explicit Progress(bool enabled) : on_(enabled && ::isatty(STDERR_FILENO)) {}
  void update(const StepRecord& s, int64_t total) {
    if (!on_) return;
    std::fprintf(stderr, "\r[zrepro] step %lld/%lld  loss %.4f  %.3f s/step  ETA %.0fs   ",
                 static_cast<long long>(s.step + 1), static_cast<long long>(total), s.loss, s.step_s,
                 s.step_s * static_cast<double>(total - s.step - 1));
    std::fflush(stderr);
    dirty_ = true;
  }
  void clear() {
    if (dirty_) std::fprintf(stderr, "\r%80s\r", "");
    dirty_ = false;
  }

 private:
  bool on_;
  bool dirty_ = false;
};

// What to try, from the phase and the category that filled the device (SCENARIOS.md 1).
std::string oom_hint(const MemorySnapshot& at, Phase phase, int zero_stage) {
  int top = 0;
  for (int c = 1; c < kNumMemCategories; ++c)
    if (at.by_category[c] > at.by_category[top]) top = c;
  const std::string largest = std::string("largest category: ") + mem_category_name(static_cast<MemCategory>(top)) +
                              " (" + format_bytes(at.by_category[top]) + "). ";
  switch (phase) {
    case Phase::init:
      return largest + "The 16-bit parameters do not fit: ZeRO stage 3 shards them (stage 1/2 keep a full copy per rank).";
    case Phase::partition:
      return largest + "Optimizer states (fp32 master + Adam moments, 12 bytes/param) do not fit: more ranks with "
                       "stage >= 1, or offload_optimizer to cpu.";
    case Phase::forward:
    case Phase::backward:
      // Stages 0-2 keep every 16-bit parameter on every rank (SCENARIOS.md zero2-params-dont-fit).
      if (zero_stage < 3 && at.capacity > 0 &&
          at.by_category[static_cast<int>(MemCategory::params)] * 4 > at.capacity)
        return largest + "The full 16-bit parameters take " +
               std::to_string(100 * at.by_category[static_cast<int>(MemCategory::params)] / at.capacity) +
               "% of the device on every rank (stage " + std::to_string(zero_stage) +
               " does not shard them): ZeRO stage 3 keeps 1/N of them per rank; otherwise activation "
               "checkpointing or a smaller micro-batch.";
      return largest + "Model states fit but this micro-batch's activations or buffers do not: activation "
                       "checkpointing, or a smaller micro-batch with more gradient accumulation (same global batch); "
                       "if comm_buffers dominate, smaller reduce_bucket_size / stage3_prefetch_bucket_size.";
    default:
      return largest + "Out of memory in the optimizer step: optimizer offload, or more ranks.";
  }
}

bool wait_for(const std::function<bool()>& ready, double seconds) {
  const double until = wall_seconds() + seconds;
  while (!ready()) {
    if (wall_seconds() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

}  // namespace

int run_command(int argc, char** argv) {
  cxxopts::Options o("zrepro run", "Train the toy GPT under a DeepSpeed config and record what happens.");
  add_config_flags(o);
  o.add_options("run")
      ("steps", "optimizer steps", cxxopts::value<int64_t>()->default_value("50"))
      ("seed", "seed for init and data", cxxopts::value<uint64_t>()->default_value("1234"))
      ("device", "cpu|cuda", cxxopts::value<std::string>()->default_value("cpu"))
      ("out", "output folder for summary.json, metrics.jsonl and flight dumps", cxxopts::value<std::string>())
      ("ranks", "start N ranks on this node under mpirun", cxxopts::value<int>())
      ("device-memory", "device capacity, e.g. 80GB, 512MiB (CPU-emulated device; default: unlimited)",
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
      ("pageable-ratio", "offload: pageable copy bandwidth as a fraction of pinned (CPU-emulated device)",
       cxxopts::value<double>()->default_value("0.5"))
      ("comm-timeout", "watchdog: seconds a collective may take before the job is declared hung",
       cxxopts::value<double>()->default_value("1800"))
      ("log-every", "step log line interval when steps_per_print is unset", cxxopts::value<int64_t>()->default_value("10"))
      ("threads", "intra-op threads per rank", cxxopts::value<int>()->default_value("1"))
      ("inject", "fault injection KIND:RANK[:ARG] (repeatable): inf-grad:R[:STEPS], gas-mismatch:R, "
                 "skip-forward:R[:STEP], straggler:R:MS, drop-accumulated-grads:R", cxxopts::value<std::vector<std::string>>())
      ("target-model", "scale down from this model (preset or HF config.json): train a toy that keeps each memory "
                       "category's share of --target-device-memory", cxxopts::value<std::string>())
      ("target-world-size", "ranks of the target run (default and required: this run's)", cxxopts::value<int>())
      ("target-device-memory", "the target's device capacity, e.g. 80GB", cxxopts::value<std::string>())
      ("scale", "scale-down parameter factor K, or auto (a toy of at most 2M parameters)",
       cxxopts::value<std::string>()->default_value("auto"))
      ("dynamic-seq", "dynamic padding: each step's batches are MIN..seq tokens long (varying shapes, as "
                      "HF's dynamic padding gives)", cxxopts::value<int64_t>())
      ("activation-checkpointing", "recompute each block in backward (HF gradient_checkpointing); the "
                                   "config's activation_checkpointing.cpu_checkpointing keeps checkpoints on the host")
      ("verify-replicas", "stages 0-2: check after every step that all ranks hold bit-identical parameters")
      ("print-config", "print the effective config at init");

  std::string out_dir;
  DsConfig cfg;
  ModelSpec model;
  TrainResult result;
  DeviceInfo dev;
  bool have_cfg = false, have_model = false;
  Progress progress(true);
  std::unique_ptr<Ranks> ranks;
  std::unique_ptr<ScaleDown> scaled;  // --target-model: the toy derived from the target
  json planned;                       // the planner's prediction for this run (CPU-emulated device)
  double host_link_gbps = 0, pageable_ratio = 0.5;
  int rank = 0;

  // Rank 0 writes the summary from every rank's report. A run that fails writes
  // the failing rank's own view: summary.json on rank 0, summary_rank<r>.json elsewhere.
  DeviceMemory& mem = DeviceMemory::instance();
  auto write_summary = [&](const std::string& status, json failure, std::vector<RankReport> reports, bool all_ranks) {
    if (out_dir.empty() || (all_ranks && rank != 0)) return;
    if (reports.empty()) reports.push_back(rank_report(rank, result, device_memory_snapshot(dev.device)));
    SummaryInput in{status, have_cfg ? &cfg : nullptr, have_model ? &model : nullptr, dev.description,
                    have_cfg ? &result : nullptr, std::move(reports), std::move(failure), host_link_gbps,
                    pageable_ratio};
    const std::string name = rank == 0 ? "summary" : "summary_rank" + std::to_string(rank);
    json summary = build_summary(in);
    if (!planned.is_null()) summary["memory"]["planned"] = planned;
    if (scaled) summary["scale_down"] = scaled->to_json();
    write_file_atomic(out_dir + "/" + name + ".json", summary.dump(2) + "\n");
    if (rank == 0) write_file_atomic(out_dir + "/report.html", html_report(summary));
  };
  auto finish = [&](const std::string& status, json failure, int code) {
    progress.clear();
    write_summary(status, std::move(failure), {}, false);
    // With peers, never finalize MPI on a failure (peers may be inside a collective
    // and MPI_Finalize would wait for them): exit now, and mpirun ends the others.
    if (ranks && ranks->comm->world_size() > 1) {
      std::fflush(nullptr);
      std::_Exit(code);
    }
    return code;
  };

  try {
    auto r = parse(o, argc, argv);
    if (r.count("help")) { std::cout << o.help() << std::endl; return kExitOk; }
    if (r.count("ranks")) {
      const int n = r["ranks"].as<int>();
      if (n < 1) throw ConfigError("--ranks: must be >= 1, got " + std::to_string(n));
      if (launched_by_mpi()) throw ConfigError("--ranks: already running under an MPI launcher; drop --ranks");
      relaunch_under_mpirun(n, {"run"}, argc, argv);
    }
    ranks = std::make_unique<Ranks>(&argc, &argv, r["device"].as<std::string>() == "cuda");
    Communicator& comm = *ranks->comm;
    rank = comm.rank();
    const int world = comm.world_size();
    if (r.count("out")) {
      out_dir = r["out"].as<std::string>();
      std::error_code ec;
      std::filesystem::create_directories(out_dir, ec);
      if (ec) { const std::string bad = out_dir; out_dir.clear();
        throw ConfigError("--out: cannot create \"" + bad + "\": " + ec.message()); }
    }
    TrainOptions topt;
    topt.comm = &comm;
    topt.steps = r["steps"].as<int64_t>();
    if (topt.steps <= 0) throw ConfigError("--steps: must be > 0, got " + std::to_string(topt.steps));
    topt.seed = r["seed"].as<uint64_t>();
    topt.verify_replicas = r.count("verify-replicas") > 0;
    topt.activation_checkpointing = r.count("activation-checkpointing") > 0;
    if (r.count("dynamic-seq")) topt.dynamic_seq_min = r["dynamic-seq"].as<int64_t>();
    const int threads = r["threads"].as<int>();
    if (threads <= 0) throw ConfigError("--threads: must be > 0, got " + std::to_string(threads));
    set_compute_threads(threads);
    topt.host_link_gbps = host_link_gbps = r["host-link-gbps"].as<double>();
    topt.pageable_ratio = pageable_ratio = r["pageable-ratio"].as<double>();
    if (topt.host_link_gbps < 0) throw ConfigError("--host-link-gbps: must be >= 0, got " + fmt(topt.host_link_gbps));
    if (r.count("host-link-profile") && r.count("host-link-gbps"))
      throw ConfigError("--host-link-profile and --host-link-gbps: give one");
    if (topt.pageable_ratio <= 0 || topt.pageable_ratio > 1)
      throw ConfigError("--pageable-ratio: must be in (0, 1], got " + fmt(topt.pageable_ratio));
    const double timeout = r["comm-timeout"].as<double>();
    if (timeout <= 0) throw ConfigError("--comm-timeout: must be > 0 seconds, got " + fmt(timeout));
    if (r.count("inject"))
      for (const auto& s : r["inject"].as<std::vector<std::string>>()) {
        topt.inject.push_back(parse_injection(s));
        if (topt.inject.back().rank >= world)
          throw ConfigError("--inject \"" + s + "\": rank " + std::to_string(topt.inject.back().rank) +
                            " does not exist in a world of " + std::to_string(world));
      }
    if (r.count("target-model")) {
      if (r.count("model")) throw ConfigError("--model and --target-model: give one; the toy is derived from the target");
      if (r.count("device-memory"))
        throw ConfigError("--device-memory and --target-device-memory: give the target's; the toy's capacity is derived");
      const int target_world = r.count("target-world-size") ? r["target-world-size"].as<int>() : world;
      if (target_world != world)
        throw ConfigError("--target-world-size " + std::to_string(target_world) + ": this run has " +
                          std::to_string(world) + " rank(s); ZeRO's per-rank partitions depend on the world size, so "
                          "run the toy on as many ranks: --ranks " + std::to_string(target_world));
      if (!r.count("target-device-memory"))
        throw ConfigError("--target-device-memory: required with --target-model, e.g. --target-device-memory 80GB");
      ScaleRequest sr;
      sr.target = resolve_model(r["target-model"].as<std::string>());
      sr.cfg = load_ds_config(require_config(r), flags_from(r, sr.target, world, topt.steps));
      sr.world_size = world;
      sr.target_capacity = parse_size("--target-device-memory", r["target-device-memory"].as<std::string>());
      const std::string k = r["scale"].as<std::string>();
      if (k != "auto") {
        size_t used = 0;
        try { sr.scale = std::stod(k, &used); } catch (const std::exception&) { used = 0; }
        if (used != k.size() || sr.scale < 1) throw ConfigError("--scale: got \"" + k + "\", expected auto or a factor >= 1");
      }
      sr.activation_checkpointing = topt.activation_checkpointing;
      scaled = std::make_unique<ScaleDown>(scale_down(sr));
      model = scaled->toy;
      cfg = scaled->toy_cfg;
    } else {
      model = model_from(r);
      cfg = load_ds_config(require_config(r), flags_from(r, model, world, topt.steps));
    }
    have_model = true;
    have_cfg = true;
    if (r.count("dynamic-seq") && (topt.dynamic_seq_min < 1 || topt.dynamic_seq_min > model.seq))
      throw ConfigError("--dynamic-seq: got " + std::to_string(topt.dynamic_seq_min) + ", expected 1.." +
                        std::to_string(model.seq) + " (the model's sequence length)");
    dev = select_device(r["device"].as<std::string>(), mpi_local_rank());
    topt.device = dev.device;
    const std::string allocator = r["allocator"].as<std::string>();
    if (allocator != "tracking" && allocator != "caching" && allocator != "plain")
      throw ConfigError("--allocator: got \"" + allocator + "\", expected tracking, caching or plain");
    if (dev.device.is_cpu()) {
      const int64_t cap = scaled ? scaled->toy_capacity
                          : r.count("device-memory") ? parse_size("--device-memory", r["device-memory"].as<std::string>())
                                                     : 0;
      if (allocator == "plain" && cap > 0)
        throw ConfigError("--device-memory needs a tracking allocator; drop --allocator plain");
      // The caching emulation honours PyTorch's own switch for expandable segments.
      const char* conf = std::getenv("PYTORCH_CUDA_ALLOC_CONF");
      const bool expandable = allocator == "caching" && conf && std::strstr(conf, "expandable_segments:True");
      if (allocator != "plain") mem.install(cap, allocator == "caching", expandable);
      if (r.count("memory-log")) {
        if (allocator == "plain") throw ConfigError("--memory-log needs a tracking allocator; drop --allocator plain");
        const std::string path = r["memory-log"].as<std::string>() + (world > 1 ? ".rank" + std::to_string(rank) : "");
        try {
          mem.log_to(path);
        } catch (const std::exception& e) {
          throw ConfigError("--memory-log: " + std::string(e.what()));
        }
      }
      dev.description += ", " + allocator + " allocator" + (expandable ? " (expandable segments)" : "") +
                         (cap > 0 ? ", capacity " + format_bytes(cap) : "");
      PlanRequest pr;
      pr.model = model;
      pr.cfg = cfg;
      pr.world_size = world;
      pr.device_capacity = cap;
      pr.activation_checkpointing = topt.activation_checkpointing;
      planned = plan_memory(pr).to_json();
    } else {
      // CUDA: LibTorch's caching allocator, its memory fraction as the capacity.
      const int64_t cap = scaled ? scaled->toy_capacity
                          : r.count("device-memory") ? parse_size("--device-memory", r["device-memory"].as<std::string>())
                                                     : 0;
      if (cap > 0) {
        cuda_set_capacity(dev.device.index(), cap);
        dev.description += ", capacity " + format_bytes(cap) + " (memory fraction)";
      }
    }

    if (r.count("host-link-profile")) {
      if (!dev.device.is_cpu()) throw ConfigError("--host-link-profile: only the CPU-emulated device models the link");
      const DerivedLink d = derive_link(r["host-link-profile"].as<std::string>(), compute_dtype(cfg.precision, dev.device),
                                        cfg.micro_batch * model.seq, model.hidden, model.intermediate);
      // Every rank must model the same link: rank 0's measurement decides.
      torch::Tensor v = torch::tensor({d.link_gbps}, torch::kDouble);
      comm.broadcast(v, 0, "host link profile")->wait();
      topt.host_link_gbps = host_link_gbps = v.item<double>();
      if (rank == 0)
        std::cout << "[zrepro] host link " << d.profile.name << ": target " << fmt(d.profile.link_gbps) << " GB/s for "
                  << fmt(d.profile.achieved_tflops) << " achieved TFLOPS; this CPU " << fmt(d.cpu_gflops)
                  << " GFLOPS -> modelled link " << fmt(host_link_gbps) << " GB/s\n";
    }
    if (rank == 0) {
      for (const auto& w : cfg.warnings) std::cout << "[zrepro] warning: " << w << "\n";
      if (r.count("print-config")) std::cout << format_config_dump(cfg);
      if (scaled) {
        const MemoryPlan& tp = scaled->target_plan;
        std::cout << "[zrepro] scale-down: target " << scaled->target.name << " ("
                  << scaled->target.param_count() << " params) on " << world << " rank(s) with "
                  << format_bytes(tp.capacity) << " -> toy " << model.param_count() << " params (factor "
                  << fmt(scaled->factor, 5) << ", hidden " << model.hidden << ", seq " << model.seq << ", vocab "
                  << model.vocab << ") with " << format_bytes(scaled->toy_capacity) << "\n[zrepro] scaled:";
        for (const auto& k : scaled->scaled_keys) std::cout << " " << k << ";";
        std::cout << "\n[zrepro] planner, target: "
                  << (tp.fits ? std::string("fits") : "OOM in phase " + std::string(phase_name(tp.oom_phase)))
                  << " (peak " << format_bytes(tp.peak_bytes) << " per rank); fidelity (planned, at the peak):\n"
                  << scaled->table();
        for (const auto& w : scaled->warnings) std::cout << "[zrepro] warning: " << w << "\n";
      }
      std::cout << "[zrepro] world_size=" << world << " zero_stage=" << cfg.zero.stage
                << " precision=" << precision_name(cfg.precision) << " device=" << dev.description
                << " comm=" << comm.backend() << "\n"
                << "[zrepro] model " << model.name << ": " << model.param_count() << " params, " << model.layers
                << " layers, hidden " << model.hidden << ", heads " << model.heads << ", seq " << model.seq
                << ", vocab " << model.vocab << "\n"
                << "[zrepro] batch: micro " << cfg.micro_batch << " x gas " << cfg.grad_accum << " x world "
                << world << " = " << cfg.train_batch_size << " samples/step; data: Markov chain, a perfect model "
                << "reaches " << fmt(MarkovData(model.vocab, model.seq, topt.seed).entropy_floor(), 3) << " nats\n"
                << std::flush;
    }

    // Hang path: dump this rank's flight recorder; rank 0 merges and writes the
    // summary; everyone exits 4. Runs on the watchdog thread (or the thread that
    // saw a collective fail), while the training thread may be blocked.
    std::unique_ptr<MetricsWriter> metrics;
    if (!out_dir.empty() && rank == 0) metrics = std::make_unique<MetricsWriter>(out_dir);
    const std::string flight_dir = (out_dir.empty() ? std::string("zrepro_flight") : out_dir) + "/flight";
    auto on_hang = [&, world](const std::string& reason) {
      static std::atomic<bool> once{false};
      if (once.exchange(true)) return;
      progress.clear();
      std::error_code ec;
      std::filesystem::create_directories(flight_dir, ec);
      const auto mine = comm.recorder().snapshot();
      write_file_atomic(flight_dir + "/rank" + std::to_string(rank) + ".json",
                        json{{"rank", rank}, {"reason", reason}, {"entries", flight_json(mine)}}.dump(1));
      if (rank == 0) {
        if (metrics) metrics->close();  // the training thread is blocked in a collective
        std::vector<std::vector<FlightEntry>> all(world);
        wait_for([&] {
          for (int k = 0; k < world; ++k)
            if (!std::filesystem::exists(flight_dir + "/rank" + std::to_string(k) + ".json")) return false;
          return true;
        }, std::min(timeout, 30.0) + 5.0);
        for (int k = 0; k < world; ++k) {
          std::ifstream in(flight_dir + "/rank" + std::to_string(k) + ".json");
          if (in) all[k] = flight_from_json(json::parse(in).at("entries"));
        }
        HangDiagnosis d = diagnose_hang(all, cfg.grad_accum);
        std::cerr << "[zrepro] Watchdog caught collective operation timeout: " << reason << "\n"
                  << "[zrepro] hang diagnosis: " << d.text << std::endl;
        if (!out_dir.empty())
          write_file_atomic(out_dir + "/hang_report.json",
                            json{{"reason", reason}, {"timeout_s", timeout}, {"diagnosis", d.to_json()}}.dump(2));
        write_summary("hang",
                      make_failure("hang", d.culprits.empty() ? rank : d.culprits.front(), "collective #" +
                                   std::to_string(d.seq), reason + ". " + d.text, "communication",
                                   "ranks issued different collectives (per-rank gradient accumulation, a rank that "
                                   "stops early or skips a forward): make every rank run the same micro-steps; see "
                                   "flight/ and hang_report.json"),
                      {}, true);
      } else {
        wait_for([&] { return out_dir.empty() || std::filesystem::exists(out_dir + "/hang_report.json"); },
                 std::min(timeout, 30.0) + 10.0);
      }
      std::fflush(nullptr);
      std::_Exit(kExitHang);
    };
    comm.on_failure(on_hang);
    std::unique_ptr<Watchdog> watchdog;
    if (world > 1)
      watchdog = std::make_unique<Watchdog>(comm.recorder(), timeout, [&](const FlightEntry& e) {
        on_hang("collective #" + std::to_string(e.seq) + " " + coll_op_name(e.op) + " (" + e.label + ", numel in " +
                std::to_string(e.in_numel) + ", out " + std::to_string(e.out_numel) + ") ran for " +
                fmt(wall_seconds() - e.t_scheduled, 3) + " s, past --comm-timeout " + fmt(timeout) + " s");
      });

    const int64_t every = cfg.steps_per_print.value_or(r["log-every"].as<int64_t>());
    if (every <= 0) throw ConfigError("--log-every: must be > 0, got " + std::to_string(every));
    auto on_step = [&](const StepRecord& s, const std::string& scale_log) {
      if (rank != 0) return;
      if (metrics) metrics->append(step_json(s));
      if (!scale_log.empty()) { progress.clear(); std::cout << scale_log << "\n"; }
      if ((s.step + 1) % every == 0 || s.step + 1 == topt.steps) {
        progress.clear();
        const double sps = s.step_s > 0 ? cfg.train_batch_size / s.step_s : 0;
        std::cout << "[deepspeed] step=" << s.step + 1 << ", skipped=" << result.skipped_steps << ", lr=["
                  << fmt(s.lr) << "], mom=[(" << cfg.optimizer.beta1 << ", " << cfg.optimizer.beta2 << ")]\n"
                  << "[zrepro] step=" << s.step + 1 << "/" << topt.steps << " loss=" << fmt(s.loss, 6)
                  << " grad_norm=" << fmt(s.grad_norm) << " loss_scale=" << fmt(s.loss_scale, 8)
                  << " samples/sec=" << fmt(sps, 6) << " tokens/sec=" << fmt(sps * model.seq, 6)
                  << " comm_wait=" << fmt(s.comm_wait_s, 3) << "s\n";
        if (cfg.memory_breakdown) std::cout << "[deepspeed] " << memory_line(s.memory) << "\n";
      }
      std::cout << std::flush;
      progress.update(s, topt.steps);
    };
    TraceRecorder trace(rank);
    if (!out_dir.empty()) topt.trace = &trace;
    try {
      train(cfg, model, topt, result, on_step);
      // Each rank leaves its trace in OUT/trace/ before the report gather below, so
      // rank 0 can merge them once the gather says every rank got there.
      if (!out_dir.empty()) {
        trace.add_collectives(comm.recorder().snapshot());
        trace.add_copies(result.copy_log);
        std::error_code ec;
        std::filesystem::create_directories(out_dir + "/trace", ec);
        write_file_atomic(out_dir + "/trace/rank" + std::to_string(rank) + ".json", trace.events().dump());
      }
      // Every rank reports to rank 0 (a collective, so a rank still stuck elsewhere
      // makes this one time out too, and the watchdog diagnoses it).
      torch::Tensor mine = torch::tensor(rank_report(rank, result, device_memory_snapshot(dev.device)).pack(), torch::kDouble);
      torch::Tensor all = torch::empty({world * RankReport::kPacked}, torch::kDouble);
      comm.all_gather(all, mine, "gather rank reports")->wait();
      std::vector<RankReport> reports;
      for (int k = 0; k < world; ++k) reports.push_back(RankReport::unpack(all.data_ptr<double>() + k * RankReport::kPacked));
      if (metrics) metrics->close();
      progress.clear();
      if (rank == 0 && !result.steps.empty())
        std::cout << "[zrepro] done: " << result.steps.size() << " steps, loss " << fmt(result.steps.front().loss)
                  << " -> " << fmt(result.steps.back().loss) << ", skipped " << result.skipped_steps
                  << (out_dir.empty() ? "" : ", summary " + out_dir + "/summary.json") << "\n";
      if (rank == 0 && !out_dir.empty()) {
        std::vector<json> per_rank;
        for (int k = 0; k < world; ++k) {
          const std::string f = out_dir + "/trace/rank" + std::to_string(k) + ".json";
          std::ifstream in(f);
          per_rank.push_back(in ? json::parse(in) : json::array());
          std::filesystem::remove(f);
        }
        std::filesystem::remove(out_dir + "/trace");
        write_file_atomic(out_dir + "/trace.json", merge_traces(per_rank).dump());
      }
      write_summary("ok", nullptr, reports, true);
      return kExitOk;
    } catch (const CommError& e) {
      on_hang(e.what());
    }
    return kExitHang;
  } catch (const ConfigError& e) {
    if (rank == 0) std::cerr << "[zrepro] error: " << e.what() << std::endl;
    return finish("config_error",
                  make_failure("config_error", rank, "init", e.what(), "config", "fix the flag, key or file named above"),
                  kExitBadInput);
  } catch (const c10::OutOfMemoryError& e) {
    progress.clear();
    const MemorySnapshot at = dev.device.is_cuda() ? device_memory_snapshot(dev.device) : mem.at_oom();
    const std::string msg = mem.last_oom().empty() ? e.what_without_backtrace() : mem.last_oom();
    std::cerr << "[zrepro] rank " << rank << ": torch.OutOfMemoryError: " << msg << std::endl;
    json failure = make_failure("oom", rank, phase_name(mem.phase()), msg, "zero-stage", oom_hint(at, mem.phase(), have_cfg ? cfg.zero.stage : 0));
    json breakdown = json::object();
    for (int c = 0; c < kNumMemCategories; ++c) breakdown[mem_category_name(static_cast<MemCategory>(c))] = at.by_category[c];
    failure["by_category"] = breakdown;
    failure["allocated_bytes"] = at.allocated;
    failure["capacity_bytes"] = at.capacity;
    failure["reserved_bytes"] = at.reserved;  // caching emulation: segments; reserved - allocated is stranded
    failure["request_bytes"] = at.request;
    failure["step"] = static_cast<int64_t>(result.steps.size());  // the optimizer step that was running
    return finish("oom", failure, kExitOom);
  } catch (const PinnedMemoryError& e) {
    progress.clear();
    std::cerr << "[zrepro] rank " << rank << ": " << e.what() << std::endl;
    json failure = make_failure("pinned-memory", rank, "init", e.what(), "pinned-memory",
                                "raise the memlock limit (ulimit -l), or set pin_memory false for offload "
                                "(pageable buffers: synchronous, slower copies)");
    failure["needed_bytes"] = e.needed;
    failure["memlock_limit_bytes"] = e.info.limit_bytes < 0 ? json(nullptr) : json(e.info.limit_bytes);
    failure["locked_bytes"] = e.info.locked_bytes;
    failure["cap_ipc_lock"] = e.info.cap_ipc_lock;
    return finish("error", failure, kExitInternal);
  } catch (const NumericalError& e) {
    progress.clear();
    if (rank == 0) std::cerr << "[deepspeed] " << e.what() << std::endl;
    return finish("diverged",
                  make_failure("numerical", rank, "step", e.what(), "numerics",
                               "fp16 overflowed until the loss scale hit min_loss_scale (or the loss went non-finite): "
                               "use bf16, lower the lr, or keep gradient clipping on"),
                  kExitNumerical);
  } catch (const std::exception& e) {
    progress.clear();
    std::cerr << "[zrepro] internal error on rank " << rank << ": " << e.what() << std::endl;
    return finish("error", make_failure("error", rank, "unknown", e.what(), "", "report this as a zrepro bug"),
                  kExitInternal);
  }
}

}  // namespace zrepro
