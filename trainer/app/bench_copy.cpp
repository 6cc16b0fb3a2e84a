// `zrepro bench copy`: the offload copy engine's bandwidth, device-to-host and
// host-to-device, pinned against pageable, beside a plain memcpy of the same size
// measured in the same run (on the CPU-emulated device with the --host-link-gbps
// model when given; on CUDA the real link), and how much of a copy hides behind
// compute: a matmul loop alone, the copies alone, then both at once.
#include <cstdio>
#include <cstring>
#include <iostream>

#include <nlohmann/json.hpp>

#include "device/device.h"
#include "device/base/errors.h"
#include "offload/copy_engine.h"
#include "offload/host_memory.h"
#include "trainer/app/bench_util.h"
#include "trainer/app/cli.h"

namespace zrepro {

using json = nlohmann::json;

namespace {

struct CopyBench {
  const DeviceInfo& dev;
  CopyEngine& ce;
  HostMemory& host;
  int reps;
  double link;  // the link model's GB/s, 0: none
  bool as_json;
};
struct OverlapTimes {
  double compute, copies, both, efficiency;
};

// One size: device to host and back, pinned and pageable, against a plain memcpy.
void bench_size(const CopyBench& b, int64_t bytes, json& rows) {
  const int64_t n = std::max<int64_t>(1, bytes / 4);
  torch::Tensor device_buf = torch::rand({n}, torch::TensorOptions().device(b.dev.device));
  torch::Tensor pinned = b.host.empty(n, torch::kFloat, true, "bench copy");
  torch::Tensor pageable = b.host.empty(n, torch::kFloat, false, "bench copy");
  std::vector<char> src(static_cast<size_t>(n) * 4), dst(src.size());
  const double t_memcpy = best_seconds(b.reps, [&] { std::memcpy(dst.data(), src.data(), src.size()); });
  for (CopyDir dir : {CopyDir::d2h, CopyDir::h2d}) {
    auto timed = [&](torch::Tensor& h, bool is_pinned) {
      return best_seconds(b.reps, [&] {
        auto e = dir == CopyDir::d2h ? b.ce.copy(h, device_buf, dir, is_pinned) : b.ce.copy(device_buf, h, dir, is_pinned);
        b.ce.wait(e);
      });
    };
    const double t_pin = timed(pinned, true), t_page = timed(pageable, false);
    const double gb = static_cast<double>(n) * 4 / 1e9;
    const double pin = gb / t_pin, page = gb / t_page, cpy = gb / t_memcpy;
    rows.push_back({{"bytes", n * 4}, {"dir", copy_dir_name(dir)}, {"pinned_gbps", pin}, {"pageable_gbps", page},
                    {"pageable_over_pinned", page / pin}, {"memcpy_gbps", cpy}, {"pinned_over_memcpy", pin / cpy},
                    {"link_model_gbps", b.link > 0 ? json(b.link) : json(nullptr)}, {"device", b.dev.description}});
    if (!b.as_json)
      std::printf("  %11lld %4s | %9.2f %9.2f %7.2fx | %9.2f %7.2fx\n", static_cast<long long>(n * 4),
                  copy_dir_name(dir), pin, page, page / pin, cpy, pin / cpy);
  }
}

// Overlap: a matmul loop on this thread while the engine copies the same bytes down.
// Overlap efficiency = (compute + copies - both) / min(compute, copies): 1 when the shorter of
// the two hides entirely behind the longer.
OverlapTimes bench_overlap(const CopyBench& b) {
  const int64_t n = 4 << 20;  // 16 MiB per copy
  torch::Tensor x = torch::rand({256, 256}, torch::TensorOptions().device(b.dev.device));
  torch::Tensor dbuf = torch::rand({n}, torch::TensorOptions().device(b.dev.device));
  torch::Tensor hbuf = b.host.empty(n, torch::kFloat, true, "bench copy overlap");
  auto compute = [&] {
    torch::NoGradGuard g;
    for (int i = 0; i < 40; ++i) x = torch::matmul(x, x).div_(256.0);
  };
  auto copies = [&] {
    std::vector<CopyEventPtr> ev;
    for (int i = 0; i < 4; ++i) ev.push_back(b.ce.copy(hbuf, dbuf, CopyDir::d2h, true));
    return ev;
  };
  const double t_compute = best_seconds(b.reps, compute);
  const double t_copies = best_seconds(b.reps, [&] { for (auto& e : copies()) b.ce.wait(e); });
  const double t_both = best_seconds(b.reps, [&] {
    auto ev = copies();
    compute();
    for (auto& e : ev) b.ce.wait(e);
  });
  return {t_compute, t_copies, t_both,
          std::clamp((t_compute + t_copies - t_both) / std::min(t_compute, t_copies), 0.0, 1.0)};
}

}  // namespace

int bench_copy(int argc, char** argv) {
  cxxopts::Options o("zrepro bench copy", "Offload copy bandwidth: pinned vs pageable, d2h and h2d, and overlap.");
  o.add_options()
      ("sizes", "bytes per copy", cxxopts::value<std::vector<std::string>>()->default_value("1M,16M,128M"))
      ("reps", "repetitions per size (best is reported)", cxxopts::value<int>()->default_value("5"))
      ("device", "cpu|cuda", cxxopts::value<std::string>()->default_value("cpu"))
      ("host-link-gbps", "CPU-emulated device: modelled pinned link bandwidth (0: memcpy speed)",
       cxxopts::value<double>()->default_value("0"))
      ("pageable-ratio", "CPU-emulated device: pageable bandwidth / pinned", cxxopts::value<double>()->default_value("0.5"))
      ("json", "print JSON rows instead of the table")
      ("h,help", "show this help");
  try {
    auto r = parse(o, argc, argv);
    if (r.count("help")) { std::cout << o.help() << std::endl; return kExitOk; }
    const int reps = r["reps"].as<int>();
    if (reps < 1) throw ConfigError("--reps: must be >= 1");
    const std::string kind = r["device"].as<std::string>();
    const DeviceInfo dev = for_flag("--device " + kind, [&] { return select_device(kind, 0); });
    const double link = r["host-link-gbps"].as<double>(), ratio = r["pageable-ratio"].as<double>();
    if (link < 0) throw ConfigError("--host-link-gbps: must be >= 0");
    if (ratio <= 0 || ratio > 1) throw ConfigError("--pageable-ratio: must be in (0, 1]");
    const std::vector<std::string> sizes = r["sizes"].as<std::vector<std::string>>();
    for (const auto& spec : sizes)  // every size checked before the first runs
      check_fits_host("--sizes", spec, 3.0 * static_cast<double>(parse_size("--sizes", spec)),
                      "3 buffers of the size: the device's, a pinned and a pageable one");
    set_compute_threads(1);
    HostMemory& host = HostMemory::instance();
    host.set_backend(dev.is_cuda() ? PinBackend::cuda : PinBackend::mlock);
    CopyEngine ce({link, ratio, dev.is_cuda()});
    const bool as_json = r.count("json") > 0;
    json rows = json::array();
    if (!as_json)
      std::printf("# zrepro bench copy: device %s, link model %s, pageable ratio %.2f; GB/s = bytes / time\n"
                  "# %11s %4s | %9s %9s %8s | %9s %8s\n",
                  dev.description.c_str(), link > 0 ? (fmt(link) + " GB/s").c_str() : "none", ratio, "size(B)", "dir",
                  "pinned", "pageable", "pg/pin", "memcpy", "pin/cpy");
    const CopyBench bench{dev, ce, host, reps, link, as_json};
    for (const auto& spec : sizes) bench_size(bench, parse_size("--sizes", spec), rows);
    const OverlapTimes ov = bench_overlap(bench);
    rows.push_back({{"overlap", {{"compute_s", ov.compute}, {"copies_s", ov.copies}, {"both_s", ov.both},
                                 {"overlap_efficiency", ov.efficiency}}}});
    if (as_json)
      std::cout << rows.dump(1) << std::endl;
    else
      std::printf("# overlap: compute %.2f ms, 4 x 16 MiB pinned d2h %.2f ms, both at once %.2f ms: overlap "
                  "efficiency %.0f%% (share of the shorter one hidden behind the longer)\n",
                  1e3 * ov.compute, 1e3 * ov.copies, 1e3 * ov.both, 100 * ov.efficiency);
    return kExitOk;
  } catch (const ConfigError& e) {
    std::cerr << "[zrepro] error: " << e.what() << std::endl;
    return kExitBadInput;
  } catch (const PinnedMemoryError& e) {
    std::cerr << "[zrepro] error: " << e.what() << std::endl;
    return kExitInternal;
  }
}

}  // namespace zrepro
