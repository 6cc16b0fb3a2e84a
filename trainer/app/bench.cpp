// `zrepro bench comm`: a collective benchmark in the nccl-tests format (size,
// count, time, algbw, busbw, #wrong) through zrepro's Communicator, compared in
// the same run with the raw MPI call of the same size on the calling thread, so
// the comm layer's overhead (signature, accounting; the worker hand-off for the stream
// form) shows as a ratio.
// `zrepro bench adam`: the fused CPU Adam against LibTorch's AdamW and against
// the machine's memory bandwidth (a STREAM triad) measured in the same run.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "device/device.h"
#include "device/base/errors.h"
#include "trainer/app/bench_util.h"
#include "trainer/app/cli.h"
#include "trainer/runtime/launch.h"
#include "offload/cpu_adam.h"
#include "zero/comm/mpi_communicator.h"

namespace zrepro {

using json = nlohmann::json;

namespace {

using Clock = std::chrono::steady_clock;

// Inputs with rank-dependent small integers, so sums are exact in fp32 and a
// result can be checked element by element.
void fill(CollOp op, torch::Tensor& out, torch::Tensor& in, int rank) {
  const int64_t n = in.numel();
  in.copy_(torch::arange(n, torch::kFloat).remainder(97).add_(rank + 1));
  if (op == CollOp::broadcast && rank != 0) in.zero_();
  if (out.data_ptr() != in.data_ptr()) out.zero_();
}

int64_t wrong(CollOp op, const torch::Tensor& out, const torch::Tensor& in, int rank, int ws) {
  const int64_t n = in.numel();
  torch::Tensor expect;
  const double rank_sum = ws * (ws + 1) / 2.0;
  switch (op) {
    case CollOp::all_reduce:
      expect = torch::arange(n, torch::kFloat).remainder(97).mul_(ws).add_(rank_sum);
      return (out != expect).sum().item<int64_t>();
    case CollOp::reduce_scatter:
      expect = torch::arange(rank * out.numel(), (rank + 1) * out.numel(), torch::kFloat).remainder(97).mul_(ws).add_(rank_sum);
      return (out != expect).sum().item<int64_t>();
    case CollOp::all_gather: {
      std::vector<torch::Tensor> parts;
      for (int r = 0; r < ws; ++r) parts.push_back(torch::arange(n, torch::kFloat).remainder(97).add_(r + 1));
      return (out != torch::cat(parts)).sum().item<int64_t>();
    }
    case CollOp::broadcast:
      expect = torch::arange(n, torch::kFloat).remainder(97).add_(1);
      return (out != expect).sum().item<int64_t>();
    case CollOp::barrier: break;
  }
  return 0;
}

CollOp parse_op(const std::string& s) {
  for (CollOp op : {CollOp::all_reduce, CollOp::reduce_scatter, CollOp::all_gather, CollOp::broadcast})
    if (s == coll_op_name(op)) return op;
  throw ConfigError("--op: got \"" + s + "\", expected all_reduce, reduce_scatter, all_gather, broadcast or all");
}

// The blocking form of a collective (a caller that waits at once: [Note: a collective on
// the caller]) and the stream form (issued, then waited for, as overlapped buckets are).
void issue_blocking(Communicator& comm, CollOp op, torch::Tensor& out, torch::Tensor& in) {
  switch (op) {
    case CollOp::all_reduce: comm.all_reduce_wait(in, "bench"); break;
    case CollOp::reduce_scatter: comm.reduce_scatter_wait(out, in, "bench"); break;
    case CollOp::all_gather: comm.all_gather_wait(out, in, "bench"); break;
    case CollOp::broadcast: comm.broadcast_wait(in, 0, "bench"); break;
    case CollOp::barrier: break;
  }
}

void issue_stream(Communicator& comm, CollOp op, torch::Tensor& out, torch::Tensor& in) {
  switch (op) {
    case CollOp::all_reduce: comm.all_reduce(in, "bench")->wait(); break;
    case CollOp::reduce_scatter: comm.reduce_scatter(out, in, "bench")->wait(); break;
    case CollOp::all_gather: comm.all_gather(out, in, "bench")->wait(); break;
    case CollOp::broadcast: comm.broadcast(in, 0, "bench")->wait(); break;
    case CollOp::barrier: break;
  }
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// [Note: interleaved rounds] The paths take turns in kRounds rounds of iters / kRounds
// calls each, and each reports its median round: a machine whose speed drifts during a
// row (a shared 2-core runner halved its raw MPI speed between two rows) then moves all
// alike, and the ratios compare like with like. Seconds per call, per path.
std::vector<double> interleaved_medians(Communicator& comm, bool mpi, const std::vector<std::function<void()>>& paths,
                                        int iters) {
  constexpr int kRounds = 5;
  const int per_round = std::max(1, iters / kRounds);
  auto round = [&](const std::function<void()>& f) {
    comm.barrier("bench");
    const auto t0 = Clock::now();
    for (int i = 0; i < per_round; ++i) f();
    const double t = std::chrono::duration<double>(Clock::now() - t0).count() / per_round;
    return mpi ? mpi_max(t) : t;
  };
  std::vector<std::vector<double>> rounds(paths.size());
  for (int k = 0; k < kRounds; ++k)
    for (size_t p = 0; p < paths.size(); ++p) rounds[p].push_back(round(paths[p]));
  std::vector<double> out;
  for (const auto& r : rounds) out.push_back(median_of(r));
  return out;
}

// One collective at one size (nccl-tests' row): checked once on fresh inputs, then timed
// through zrepro's Communicator (both forms) and through the raw MPI call of the same size.
json bench_one(Communicator& comm, bool mpi, CollOp op, int64_t bytes, int iters, int warmup) {
  const int rank = comm.rank(), ws = comm.world_size();
  // S (nccl-tests): the whole array; each rank contributes S / ws to RS/AG.
  const int64_t count = std::max<int64_t>(ws, bytes / 4 / ws * ws);
  const bool split = op == CollOp::reduce_scatter || op == CollOp::all_gather;
  torch::Tensor in = torch::empty({op == CollOp::all_gather ? count / ws : count});
  torch::Tensor out = op == CollOp::all_reduce || op == CollOp::broadcast ? in
                      : torch::empty({op == CollOp::reduce_scatter ? count / ws : count});
  const std::vector<std::function<void()>> paths = {
      [&] { issue_blocking(comm, op, out, in); }, [&] { issue_stream(comm, op, out, in); },
      [&] {
        if (mpi) raw_mpi_collective(op, out, in, 0);
        else if (split) out.copy_(in);
      }};
  int64_t bad = 0;
  for (size_t p = 0; p < 2; ++p) {  // zrepro's two forms, each checked once on fresh inputs
    fill(op, out, in, rank);
    paths[p]();
    bad += wrong(op, out, in, rank, ws);
  }
  for (const auto& f : paths)
    for (int i = 0; i < warmup; ++i) f();
  const std::vector<double> t = interleaved_medians(comm, mpi, paths, iters);
  const double t_ours = t[0], t_stream = t[1], t_raw = t[2];
  const double S = static_cast<double>(count) * 4;
  const double factor = busbw_factor(op, ws);
  return {{"op", coll_op_name(op)}, {"bytes", S}, {"count", count}, {"ranks", ws},
          {"time_us", t_ours * 1e6}, {"algbw_GBps", S / t_ours / 1e9}, {"busbw_GBps", S / t_ours / 1e9 * factor},
          {"wrong", bad}, {"raw_time_us", t_raw * 1e6}, {"raw_algbw_GBps", S / t_raw / 1e9},
          {"raw_busbw_GBps", S / t_raw / 1e9 * factor}, {"ratio", t_raw / t_ours},
          {"stream_time_us", t_stream * 1e6}, {"stream_ratio", t_raw / t_stream}};
}

}  // namespace

int bench_comm(int argc, char** argv) {
  cxxopts::Options o("zrepro bench comm", "Collective bandwidth of zrepro's comm layer vs raw MPI (nccl-tests format).");
  o.add_options()
      ("op", "all_reduce|reduce_scatter|all_gather|broadcast|all", cxxopts::value<std::string>()->default_value("all"))
      ("min-bytes", "smallest message", cxxopts::value<std::string>()->default_value("8K"))
      ("max-bytes", "largest message", cxxopts::value<std::string>()->default_value("16M"))
      ("iters", "timed iterations per size and path (in 5 interleaved rounds)", cxxopts::value<int>()->default_value("20"))
      ("warmup", "untimed iterations per size", cxxopts::value<int>()->default_value("3"))
      ("ranks", "start N ranks on this node under mpirun", cxxopts::value<int>())
      ("json", "print JSON rows instead of the table")
      ("h,help", "show this help");
  return command_main(o, argc, argv, [&](const cxxopts::ParseResult& r) -> int {
    if (r.count("ranks")) relaunch_under_mpirun(r["ranks"].as<int>(), {"bench", "comm"}, argc, argv);
    const int64_t lo = parse_size("--min-bytes", r["min-bytes"].as<std::string>());
    const int64_t hi = parse_size("--max-bytes", r["max-bytes"].as<std::string>());
    check_fits_host("--max-bytes", r["max-bytes"].as<std::string>(), 3.0 * static_cast<double>(hi),
                    "per rank: the collective's input and output and MPI's own buffer of the largest size");
    const int iters = r["iters"].as<int>(), warmup = r["warmup"].as<int>();
    if (iters < 1 || warmup < 0) throw ConfigError("--iters must be >= 1 and --warmup >= 0");
    std::vector<CollOp> ops;
    if (r["op"].as<std::string>() == "all")
      ops = {CollOp::all_reduce, CollOp::reduce_scatter, CollOp::all_gather, CollOp::broadcast};
    else
      ops = {parse_op(r["op"].as<std::string>())};
    const bool as_json = r.count("json") > 0;

    Ranks ranks(&argc, &argv);
    Communicator& comm = *ranks.comm;
    const int rank = comm.rank(), ws = comm.world_size();
    set_compute_threads(1);
    json rows = json::array();
    if (rank == 0 && !as_json) {
      std::printf("# zrepro bench comm: %d rank(s), backend %s, float32, sum; times in us, bandwidths in GB/s\n", ws,
                  comm.backend().c_str());
      std::printf("# time: the blocking form; stream: issued to the comm stream, then waited for; ratio: raw time / time\n");
      std::printf("# %-15s %10s %12s | %10s %8s %8s %6s | %10s %8s %8s | %6s | %10s %6s\n", "op", "size(B)", "count",
                  "time", "algbw", "busbw", "#wrong", "raw time", "algbw", "busbw", "ratio", "stream", "ratio");
    }
    for (CollOp op : ops)
      for (int64_t bytes = lo; bytes <= hi; bytes *= 2) {
        const json row = bench_one(comm, ranks.mpi, op, bytes, iters, warmup);
        rows.push_back(row);
        if (rank == 0 && !as_json)
          std::printf("  %-15s %10.0f %12lld | %10.1f %8.3f %8.3f %6lld | %10.1f %8.3f %8.3f | %6.3f | %10.1f %6.3f\n",
                      coll_op_name(op), row["bytes"].get<double>(), static_cast<long long>(row["count"].get<int64_t>()),
                      row["time_us"].get<double>(), row["algbw_GBps"].get<double>(), row["busbw_GBps"].get<double>(),
                      static_cast<long long>(row["wrong"].get<int64_t>()), row["raw_time_us"].get<double>(),
                      row["raw_algbw_GBps"].get<double>(), row["raw_busbw_GBps"].get<double>(), row["ratio"].get<double>(),
                      row["stream_time_us"].get<double>(), row["stream_ratio"].get<double>());
      }
    if (rank == 0 && as_json) std::cout << rows.dump(1) << std::endl;
    int64_t total_bad = 0;
    for (const auto& row : rows) total_bad += row["wrong"].get<int64_t>();
    return total_bad == 0 ? kExitOk : kExitInternal;
  });
}

namespace {

// STREAM triad a = b + s * c: 12 bytes per element (two reads, one write).
double triad_gbps(int64_t n, int reps) {
  std::vector<float> a(n), b(n, 1.0f), c(n, 2.0f);
  float* pa = a.data();
  const float* pb = b.data();
  const float* pc = c.data();
  double best = 1e30;
  for (int r = 0; r < reps + 1; ++r) {
    const auto t0 = Clock::now();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) pa[i] = pb[i] + 3.0f * pc[i];
    const double t = std::chrono::duration<double>(Clock::now() - t0).count();
    if (r > 0) best = std::min(best, t);  // the first pass pays the page faults
  }
  return 12.0 * static_cast<double>(n) / best / 1e9;
}

}  // namespace

int bench_adam(int argc, char** argv) {
  cxxopts::Options o("zrepro bench adam",
                     "Fused CPU Adam vs LibTorch's AdamW vs memory bandwidth (STREAM triad and Adam's "
                     "access pattern), same run.");
  o.add_options()
      ("sizes", "parameter counts", cxxopts::value<std::vector<std::string>>()->default_value("1M,10M,100M"))
      ("reps", "timed repetitions per size (best is reported)", cxxopts::value<int>()->default_value("5"))
      ("threads", "threads for all three (0: all cores)", cxxopts::value<int>()->default_value("0"))
      ("json", "print JSON rows instead of the table")
      ("h,help", "show this help");
  return command_main(o, argc, argv, [&](const cxxopts::ParseResult& r) -> int {
    const int reps = r["reps"].as<int>();
    if (reps < 1) throw ConfigError("--reps: must be >= 1");
    int threads = r["threads"].as<int>();
    if (threads < 0) throw ConfigError("--threads: must be >= 0");
    if (threads == 0) threads = static_cast<int>(std::thread::hardware_concurrency());
    set_compute_threads(threads);
    omp_set_num_threads(threads);
    const bool as_json = r.count("json") > 0;
    json rows = json::array();
    for (const auto& spec : r["sizes"].as<std::vector<std::string>>())  // every size checked before the first runs
      check_fits_host("--sizes", spec, 46.0 * static_cast<double>(parse_size("--sizes", spec)),
                      "46 bytes per parameter: fp32 p, g, m, v and a bf16 copy, torch's AdamW beside, the triad's arrays");
    if (!as_json)
      std::printf("# zrepro bench adam: %d thread(s); Adam moves 28 bytes/param (read p g m v, write p m v), "
                  "+2 with the bf16 copy; probe: that access pattern alone\n"
                  "# %10s | %9s %8s %6s %6s | %9s %7s | %9s | %9s %7s %7s\n",
                  threads, "params", "Mparam/s", "GB/s", "probe", "triad", "bf16 Mp/s", "GB/s", "torch Mp/s", "speedup",
                  "triad GB/s", "probe GB/s");
    for (const auto& spec : r["sizes"].as<std::vector<std::string>>()) {
      const int64_t n = parse_size("--sizes", spec);
      torch::NoGradGuard no_grad;
      torch::Tensor p = torch::randn({n}), g = torch::randn({n}), m = torch::zeros({n}), v = torch::zeros({n});
      torch::Tensor half = torch::empty({n}, torch::kBFloat16);
      AdamHyper h;
      h.weight_decay = 0.01;
      int64_t step = 0;
      const double t_fused = best_seconds(reps, [&] { cpu_adam_step(p, g, m, v, h, ++step); });
      const double t_half = best_seconds(reps, [&] { cpu_adam_step(p, g, m, v, h, ++step, half); });
      torch::Tensor ref = p.clone().requires_grad_(true);
      ref.mutable_grad() = g.clone();
      torch::optim::AdamW opt({ref}, torch::optim::AdamWOptions(h.lr).weight_decay(h.weight_decay));
      const double t_torch = best_seconds(reps, [&] { opt.step(); });
      const double triad = triad_gbps(n, reps);
      const double probe = 28.0 * n / best_seconds(reps, [&] { adam_access_probe(p, g, m, v); }) / 1e9;
      const double mps = n / t_fused / 1e6, gbps = 28.0 * n / t_fused / 1e9;
      const double mps_half = n / t_half / 1e6, gbps_half = 30.0 * n / t_half / 1e9;
      const double mps_torch = n / t_torch / 1e6;
      rows.push_back({{"params", n}, {"threads", threads}, {"fused_mparams_per_s", mps}, {"fused_gbps", gbps},
                      {"fused_fraction_of_triad", gbps / triad}, {"fused_bf16_mparams_per_s", mps_half},
                      {"fused_bf16_gbps", gbps_half}, {"torch_adamw_mparams_per_s", mps_torch},
                      {"speedup_vs_torch", mps / mps_torch}, {"triad_gbps", triad},
                      {"adam_pattern_gbps", probe}, {"fused_fraction_of_adam_pattern", gbps / probe}});
      if (!as_json)
        std::printf("  %10lld | %9.0f %8.2f %5.0f%% %5.0f%% | %9.0f %7.2f | %9.0f | %8.2fx %7.2f %7.2f\n",
                    static_cast<long long>(n), mps, gbps, 100.0 * gbps / probe, 100.0 * gbps / triad, mps_half,
                    gbps_half, mps_torch, mps / mps_torch, triad, probe);
    }
    if (as_json) std::cout << rows.dump(1) << std::endl;
    return kExitOk;
  });
}

}  // namespace zrepro
