// `zrepro plan`: predicted device memory per rank for a DeepSpeed config, a model
// and a world size, without training (trainer/planner.h), as a table or JSON.
// Exit 0 when the run fits (or no capacity is given), 3 when it is predicted to
// run out of memory, 9 when its offload buffers cannot be pinned on this machine,
// 2 on bad input.
#include <iostream>
#include <optional>

#include "device/base/errors.h"
#include "trainer/app/cli.h"
#include "trainer/planner/fixes.h"
#include "trainer/planner/planner.h"
#include "trainer/report/gpu_fidelity.h"
#include "trainer/report/report.h"


namespace zrepro {

void add_plan_flags(cxxopts::Options& o) {
  add_config_flags(o);
  o.add_options("plan")
      ("world-size", "data-parallel ranks", cxxopts::value<int>()->default_value("1"))
      ("as-rank", "the rank to plan (ranks differ at stage 2: DeepSpeed's gradient partition follows whole "
                  "parameters; default: the rank that holds the most, which runs out first)", cxxopts::value<int>())
      ("gpus-per-node", "GPUs per node, for DeepSpeed's estimator figures (default: every rank on one node)",
       cxxopts::value<int>())
      ("device-memory", "device capacity: a preset (a100-40gb, a100-80gb, h100-80gb, h200-141gb, l40s-48gb, rtx4090-24gb, ...: the capacity PyTorch reports on it) or a size, e.g. 80GB, 40GiB (GB = 1e9 bytes, GiB = 2^30; no verdict without it)", cxxopts::value<std::string>())
      ("activation-checkpointing", "recompute each block in backward (as zrepro run's flag)")
      ("save-every", "the job saves DeepSpeed's checkpoint (as zrepro run's flag): a save phase after the step",
       cxxopts::value<int64_t>())
      ("resume", "the job resumes from a checkpoint (as zrepro run's flag; the folder is not read): a load phase "
                 "before the first step", cxxopts::value<std::string>())
      ("device", "cpu|cuda: the device the run would use (fp16 computes in fp32 on the CPU)",
       cxxopts::value<std::string>()->default_value("cpu"))
      ("steps", "total steps (resolves scheduler \"auto\")", cxxopts::value<int64_t>()->default_value("50"));
}

JobSpec plan_request_from(const cxxopts::ParseResult& r) {
  JobSpec req;
  req.world_size = r["world-size"].as<int>();
  if (req.world_size < 1) throw ConfigError("--world-size: must be >= 1, got " + std::to_string(req.world_size));
  if (r.count("as-rank")) req.rank = r["as-rank"].as<int>();
  if (req.rank && (*req.rank < 0 || *req.rank >= req.world_size))
    throw ConfigError("--as-rank: got " + std::to_string(*req.rank) + ", expected 0.." +
                      std::to_string(req.world_size - 1) + " (a rank of --world-size " +
                      std::to_string(req.world_size) + ")");
  if (r.count("gpus-per-node")) {
    req.gpus_per_node = r["gpus-per-node"].as<int>();
    if (req.gpus_per_node < 1 || req.world_size % req.gpus_per_node != 0)
      throw ConfigError("--gpus-per-node: got " + std::to_string(req.gpus_per_node) + ", expected a divisor of " +
                        "--world-size " + std::to_string(req.world_size) + " (nodes x GPUs per node = world size)");
  }
  req.model = model_from(r);
  req.cfg = load_job_config(opt<std::string>(r, "config"), flags_from(r, req.model, req.world_size, steps_from(r)));
  if (r.count("device-memory")) req.device_capacity = parse_device_memory("--device-memory", r["device-memory"].as<std::string>());
  req.activation_checkpointing = checkpointing_from(r);
  req.saves_checkpoints = save_every_from(r).has_value();
  req.resumes = r.count("resume") > 0;
  const std::string device = r["device"].as<std::string>();
  if (device != "cpu" && device != "cuda") throw ConfigError("--device: got \"" + device + "\", expected cpu or cuda");
  req.cpu_device = device == "cpu";
  check_job(req);  // [Note: plan and run refuse alike]
  return req;
}

int plan_command(int argc, char** argv) {
  cxxopts::Options o("zrepro plan", "Predict per-rank device memory by category and phase, and a verdict.");
  add_plan_flags(o);
  o.add_options("plan")("json", "print JSON");
  return command_main(o, argc, argv, [&](const cxxopts::ParseResult& r) -> int {
    const JobSpec req = plan_request_from(r);
    const MemoryPlan plan = plan_memory(req);
    // An OOM verdict comes with the usual fixes, each planned.
    // (--json lists them whenever there is a capacity: diagnose --write-scenario verifies them.)
    const bool oom = plan.capacity > 0 && !plan.fits;
    const std::vector<FixPrediction> fixes =
        oom || (r.count("json") && plan.capacity > 0) ? predict_fixes(req) : std::vector<FixPrediction>{};
    const std::optional<GpuFidelity>& fidelity = gpu_band();
    // A GPU plan with a capacity: where real DeepSpeed's peak may lie, and whether that
    // straddles the capacity ([Note: a verdict inside the band]).
    std::optional<BandCall> call;
    if (fidelity && !req.cpu_device && plan.capacity > 0)
      call = band_call(*fidelity, band_inputs(plan));
    if (r.count("json")) {
      nlohmann::json j = plan.to_json();
      j["model"] = req.model.to_json();
      j["batch"] = {{"micro", req.cfg.micro_batch}, {"grad_accum", req.cfg.grad_accum},
                    {"global", req.cfg.train_batch_size}};
      j["precision"] = precision_name(req.cfg.precision);
      j["activation_checkpointing"] = req.activation_checkpointing;
      j["warnings"] = req.cfg.warnings;
      if (!fixes.empty()) {
        j["fixes"] = nlohmann::json::array();
        for (const auto& f : fixes)
          j["fixes"].push_back(f.to_json());
      }
      j["gpu_fidelity"] = fidelity ? fidelity->to_json() : nlohmann::json(nullptr);
      j["band_call"] = call ? call->to_json() : nlohmann::json(nullptr);
      std::cout << json_text(j) << std::endl;
    } else {
      for (const auto& w : req.cfg.warnings) std::cout << "[zrepro] warning: " << w << "\n";
      std::cout << format_plan(plan, req);
      if (!fixes.empty()) std::cout << "\n" << format_fixes(fixes) << "\n" << format_fix_details(fixes);
      if (fidelity) std::cout << "\n" << format_gpu_fidelity(*fidelity);
      if (call) std::cout << "  " << call->text() << "\n";
    }
    if (!plan.pinned_fits) return kExitPinnedMemory;  // the run would fail at init, before any OOM
    return plan.capacity > 0 && !plan.fits ? kExitOom : kExitOk;
  });
}

}  // namespace zrepro
