// `zrepro bench comm`: a collective benchmark in the nccl-tests format (size,
// count, time, algbw, busbw, #wrong) through zrepro's Communicator, compared in
// the same run with the raw MPI call of the same size on the calling thread, so
// the comm layer's overhead (worker hand-off, accounting) shows as a ratio.
#include <chrono>
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "device/device.h"
#include "device/errors.h"
#include "trainer/cli.h"
#include "trainer/launch.h"
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

}  // namespace

int bench_comm(int argc, char** argv) {
  cxxopts::Options o("zrepro bench comm", "Collective bandwidth of zrepro's comm layer vs raw MPI (nccl-tests format).");
  o.add_options()
      ("op", "all_reduce|reduce_scatter|all_gather|broadcast|all", cxxopts::value<std::string>()->default_value("all"))
      ("min-bytes", "smallest message", cxxopts::value<std::string>()->default_value("8K"))
      ("max-bytes", "largest message", cxxopts::value<std::string>()->default_value("16M"))
      ("iters", "timed iterations per size", cxxopts::value<int>()->default_value("20"))
      ("warmup", "untimed iterations per size", cxxopts::value<int>()->default_value("3"))
      ("ranks", "start N ranks on this node under mpirun", cxxopts::value<int>())
      ("json", "print JSON rows instead of the table")
      ("h,help", "show this help");
  try {
    auto r = parse(o, argc, argv);
    if (r.count("help")) { std::cout << o.help() << std::endl; return kExitOk; }
    if (r.count("ranks")) relaunch_under_mpirun(r["ranks"].as<int>(), {"bench", "comm"}, argc, argv);
    const int64_t lo = parse_size("--min-bytes", r["min-bytes"].as<std::string>());
    const int64_t hi = parse_size("--max-bytes", r["max-bytes"].as<std::string>());
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
      std::printf("# %-15s %10s %12s | %10s %8s %8s %6s | %10s %8s %8s | %6s\n", "op", "size(B)", "count", "time",
                  "algbw", "busbw", "#wrong", "raw time", "algbw", "busbw", "ratio");
    }
    for (CollOp op : ops)
      for (int64_t bytes = lo; bytes <= hi; bytes *= 2) {
        // S (nccl-tests): the whole array; each rank contributes S / ws to RS/AG.
        const int64_t count = std::max<int64_t>(ws, bytes / 4 / ws * ws);
        const bool split = op == CollOp::reduce_scatter || op == CollOp::all_gather;
        torch::Tensor in = torch::empty({op == CollOp::all_gather ? count / ws : count});
        torch::Tensor out = op == CollOp::all_reduce || op == CollOp::broadcast ? in
                            : torch::empty({op == CollOp::reduce_scatter ? count / ws : count});
        auto ours = [&] {
          switch (op) {
            case CollOp::all_reduce: comm.all_reduce(in, "bench")->wait(); break;
            case CollOp::reduce_scatter: comm.reduce_scatter(out, in, "bench")->wait(); break;
            case CollOp::all_gather: comm.all_gather(out, in, "bench")->wait(); break;
            case CollOp::broadcast: comm.broadcast(in, 0, "bench")->wait(); break;
            case CollOp::barrier: break;
          }
        };
        auto raw = [&] {
          if (ranks.mpi) raw_mpi_collective(op, out, in, 0);
          else if (split) out.copy_(in);
        };
        auto timed = [&](const std::function<void()>& f) {
          for (int i = 0; i < warmup; ++i) f();
          comm.barrier("bench");
          const auto t0 = Clock::now();
          for (int i = 0; i < iters; ++i) f();
          const double t = std::chrono::duration<double>(Clock::now() - t0).count() / iters;
          return ranks.mpi ? mpi_max(t) : t;
        };
        fill(op, out, in, rank);
        ours();  // checked once on fresh inputs, then timed
        const int64_t bad = wrong(op, out, in, rank, ws);
        const double t_ours = timed(ours), t_raw = timed(raw);
        const double S = static_cast<double>(count) * 4;
        const double factor = busbw_factor(op, ws);
        json row = {{"op", coll_op_name(op)}, {"bytes", S}, {"count", count}, {"ranks", ws},
                    {"time_us", t_ours * 1e6}, {"algbw_GBps", S / t_ours / 1e9}, {"busbw_GBps", S / t_ours / 1e9 * factor},
                    {"wrong", bad}, {"raw_time_us", t_raw * 1e6}, {"raw_algbw_GBps", S / t_raw / 1e9},
                    {"raw_busbw_GBps", S / t_raw / 1e9 * factor}, {"ratio", t_raw / t_ours}};
        rows.push_back(row);
        if (rank == 0 && !as_json)
          std::printf("  %-15s %10.0f %12lld | %10.1f %8.3f %8.3f %6lld | %10.1f %8.3f %8.3f | %6.3f\n",
                      coll_op_name(op), S, static_cast<long long>(count), t_ours * 1e6, S / t_ours / 1e9,
                      S / t_ours / 1e9 * factor, static_cast<long long>(bad), t_raw * 1e6, S / t_raw / 1e9,
                      S / t_raw / 1e9 * factor, t_raw / t_ours);
      }
    if (rank == 0 && as_json) std::cout << rows.dump(1) << std::endl;
    int64_t total_bad = 0;
    for (const auto& row : rows) total_bad += row["wrong"].get<int64_t>();
    return total_bad == 0 ? kExitOk : kExitInternal;
  } catch (const ConfigError& e) {
    std::cerr << "[zrepro] error: " << e.what() << std::endl;
    return kExitBadInput;
  }
}

}  // namespace zrepro
