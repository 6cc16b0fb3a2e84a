// `zrepro verify --config X`: the equivalence suite for one config. Every line runs
// zrepro twice in a way that must not change the losses and gradient norms
// (docs/design/ARCHITECTURE.md, "Determinism and equivalence": the data is addressed by global
// sample index, so splits of the same global batch see the same samples) and says PASS
// or FAIL with the largest difference:
//   stage k vs stage 0 (k = 1, 2, 3), N ranks vs 1, micro-batch x accumulation split,
//   optimizer offload on vs off (stage >= 2 with accumulation, where host-side
//   accumulation bugs show), activation checkpointing on vs off.
// With variable-length samples (--seq-len-dist) the split also runs under the other loss
// normalisation ([Note: the loss of an accumulated step], trainer/loop/loss_normalization.h):
// token must PASS; mean's line is DIFF, the size of the difference a per-micro-batch mean
// makes (a contrast, not a failure).
// Every other flag (--model, --steps, --inject, ...) goes to every run. Exit 0 when all
// lines pass, 8 when one fails, 2 on bad input, the reference run's code when it fails.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <iostream>

#include "trainer/app/cli.h"
#include "trainer/config/user_file.h"
#include "trainer/runtime/subprocess.h"
#include "trainer/report/ab.h"
#include "trainer/report/report.h"
#include "trainer/report/summary.h"
#include "zero/comm/mpi_communicator.h"

namespace zrepro {

using json = nlohmann::json;

namespace {

struct Verify {
  std::string config, out;
  std::vector<std::string> common;
  int last_code = 0;

  // One run into OUT/name; its summary (none when it failed).
  std::optional<Summary> run(const std::string& name, std::vector<std::string> extra,
                             const std::string& config_path = "") {
    const std::string dir = out + "/" + name;
    std::filesystem::remove_all(dir);
    std::vector<std::string> args = {"run", "--config", config_path.empty() ? config : config_path, "--out", dir};
    args.insert(args.end(), common.begin(), common.end());
    args.insert(args.end(), extra.begin(), extra.end());
    const int code = last_code = run_self_or_refuse("the " + name + " run", args, dir + ".log");
    if (code != 0) return std::nullopt;
    return read_summary(dir + "/summary.json");
  }
};

struct Line {
  std::string what;
  std::string status;  // PASS | FAIL | n/a | DIFF (a contrast line's expected difference)
  double loss_diff = NAN, grad_norm_diff = NAN;
  std::string note;
  bool regroups = false;  // the two runs group the samples into different micro-batches
};

Line compare(const std::string& what, const std::optional<Summary>& base, const std::optional<Summary>& other,
             double tol) {
  Line l{what, "", NAN, NAN, ""};
  if (!base || !other) {
    l.status = "FAIL";
    l.note = "a run did not complete (see its log)";
    return l;
  }
  l.loss_diff = max_step_rel_diff(base->steps, other->steps, "loss");
  l.grad_norm_diff = max_step_rel_diff(base->steps, other->steps, "grad_norm");
  const bool ok = std::isfinite(l.loss_diff) && l.loss_diff <= tol &&
                  (!std::isfinite(l.grad_norm_diff) || l.grad_norm_diff <= tol);
  l.status = ok ? "PASS" : "FAIL";
  return l;
}

std::string sci(double v) {
  if (!std::isfinite(v)) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "%.2e", v);
  return b;
}

// The config with optimizer offload to the host switched on.
std::string offload_config(const std::string& config, const std::string& out) {
  json c = parse_user_json("--config " + config, read_user_file("--config", config, "a DeepSpeed JSON config"));
  if (c.is_discarded() || !c.is_object()) throw ConfigError("--config: \"" + config + "\" is not a JSON object");
  c["zero_optimization"]["offload_optimizer"] = {{"device", "cpu"}, {"pin_memory", true}};
  const std::string path = out + "/offload_config.json";
  write_json_file(path, c);
  return path;
}

// Variable-length samples: the split's line gets what its normalisation implies, and the
// split runs again under the other normalisation (token, or mean as the contrast).
void add_normalisation_lines(Verify& v, const Summary& ref, const std::string& split_what,
                             std::vector<std::string> split_flags, double tol, std::vector<Line>& lines) {
  const SummaryData data = ref.data_figures().value_or(SummaryData{});
  if (data.seq_len_dist == "fixed") return;
  const std::string norm = data.loss_normalization;
  const std::string token_note =
      "token normalisation (the Trainer's num_items_in_batch): every split of the same samples has one gradient";
  const std::string mean_note =
      "per-micro-batch means over variable-length samples (transformers <= 4.45): a short sample weighs as much as "
      "a long one, so the split changes the gradient; --loss-normalization token makes it exact";
  for (Line& l : lines)
    if (l.regroups && l.status == "FAIL" && norm != "token") l.note = mean_note;
  const std::string other = norm == "token" ? "mean" : "token";
  split_flags.insert(split_flags.end(), {"--loss-normalization", other});
  Line c = compare(split_what + ", " + other + "-normalised", v.run("reference-" + other, {"--loss-normalization", other}),
                   v.run("split-" + other, split_flags), tol);
  c.note = other == "token" ? token_note : mean_note;
  if (other == "mean" && c.status == "FAIL") c.status = "DIFF";
  lines.push_back(c);
}

// The checks, in order; each appends its line.
std::vector<Line> run_checks(Verify& v, const Summary& ref, int ranks) {
  std::vector<Line> lines;
  const std::string precision = ref.precision.value_or("fp32");
  // 16-bit: different reduction orders round differently; the difference grows with steps.
  const double tol = precision == "fp32" ? 1e-5 : 2e-2;
  const int stage = static_cast<int>(ref.zero_stage.value_or(0));
  const int64_t micro = ref.batch ? ref.batch->micro : 1, gas = ref.batch ? ref.batch->grad_accum : 1;
  const std::string mb = "--micro-batch", ga = "--grad-accum";

  const std::optional<Summary> s0 = stage == 0 ? ref : v.run("stage0", {"--zero-stage", "0"});
  std::vector<std::optional<Summary>> by_stage = {s0};
  for (int k = 1; k <= 3; ++k) {
    by_stage.push_back(k == stage ? ref : v.run("stage" + std::to_string(k), {"--zero-stage", std::to_string(k)}));
    lines.push_back(compare("stage " + std::to_string(k) + " vs stage 0", s0, by_stage.back(), tol));
  }
  // N ranks: the same global batch, split by micro-batch or accumulation.
  const std::string n = std::to_string(ranks);
  if (gas % ranks == 0 || micro % ranks == 0) {
    const int64_t m = gas % ranks == 0 ? micro : micro / ranks, g = gas % ranks == 0 ? gas / ranks : gas;
    lines.push_back(compare(n + " ranks vs 1", ref,
                            v.run("ranks" + n, {"--ranks", n, mb, std::to_string(m), ga, std::to_string(g)}), tol));
    lines.back().regroups = m != micro;
  } else {
    lines.push_back({n + " ranks vs 1", "n/a", NAN, NAN,
                     "micro " + std::to_string(micro) + " x gas " + std::to_string(gas) + " does not split over " + n});
  }
  // Accumulation: half the micro-batch, twice the steps.
  const bool split = micro % 2 == 0;
  const std::vector<std::string> split_flags = {mb, std::to_string(micro / 2), ga, std::to_string(gas * 2)};
  const std::string split_what = "micro " + std::to_string(micro / 2) + " x gas " + std::to_string(gas * 2) +
                                 " vs micro " + std::to_string(micro) + " x gas " + std::to_string(gas);
  if (split) {
    lines.push_back(compare(split_what, ref, v.run("split", split_flags), tol));
    lines.back().regroups = true;
  } else {
    lines.push_back({"accumulation split", "n/a", NAN, NAN, "micro-batch " + std::to_string(micro) + " is odd"});
  }
  // Offload at stage >= 2 (there every micro-step's reduced gradient lands on the host,
  // which accumulates it; stage 1 reduces once per step), with the split so the host
  // accumulates across micro-steps.
  const int os = std::max(stage, 2);
  std::vector<std::string> off = {"--zero-stage", std::to_string(os)};
  if (split) off.insert(off.end(), split_flags.begin(), split_flags.end());
  lines.push_back(compare("optimizer offload vs none (stage " + std::to_string(os) + (split ? ", with accumulation)" : ")"),
                          by_stage[os], v.run("offload", off, offload_config(v.config, v.out)), tol));
  lines.back().regroups = split;
  lines.push_back(compare("activation checkpointing vs none", ref, v.run("ckpt", {"--activation-checkpointing"}), tol));
  if (split) add_normalisation_lines(v, ref, split_what, split_flags, tol, lines);
  return lines;
}

}  // namespace

int verify_command(int argc, char** argv) {
  cxxopts::Options o("zrepro verify",
                     "The equivalence suite for one config: stages, ranks, accumulation, offload and activation "
                     "checkpointing must not change the losses. Every other flag goes to every run.");
  o.allow_unrecognised_options();
  o.add_options("verify")
      ("config", "DeepSpeed JSON config", cxxopts::value<std::string>())
      ("ranks", "rank count of the N-vs-1 line", cxxopts::value<int>()->default_value("2"))
      ("steps", "optimizer steps per run", cxxopts::value<int64_t>()->default_value("5"))
      ("out", "folder for every run, verify.json", cxxopts::value<std::string>()->default_value("verify_out"))
      ("h,help", "show this help");
  return command_main(o, argc, argv, [&](const cxxopts::ParseResult& r) -> int {
    if (launched_by_mpi()) throw ConfigError("zrepro verify starts its runs itself: run it without mpirun");
    Verify v;
    v.config = require_config(opt<std::string>(r, "config"));
    if (!std::filesystem::is_regular_file(v.config)) throw ConfigError("--config: \"" + v.config + "\" is not a readable file");
    const int ranks = r["ranks"].as<int>();
    if (ranks < 2) throw ConfigError("--ranks: got " + std::to_string(ranks) + ", expected 2 or more");
    v.out = r["out"].as<std::string>();
    return with_out_dir(v.out, "zrepro verify", [&]() -> int {
      v.common = r.unmatched();
      v.common.insert(v.common.end(), {"--steps", std::to_string(r["steps"].as<int64_t>())});

      std::cout << "[zrepro verify] reference run: " << v.config << std::endl;
      const std::optional<Summary> ref = v.run("reference", {});
      if (!ref) {
        std::cerr << "[zrepro verify] the reference run failed (exit " << v.last_code << "), nothing to compare:\n"
                  << tail_of(v.out + "/reference.log", 8);
        return v.last_code;
      }
      const std::vector<Line> lines = run_checks(v, *ref, ranks);
      json j = json::array();
      bool all = true;
      for (const Line& l : lines) {
        all = all && l.status != "FAIL";
        char buf[256];
        std::snprintf(buf, sizeof buf, "[zrepro verify] %-58s %-4s", l.what.c_str(), l.status.c_str());
        std::cout << buf;
        if (std::isfinite(l.loss_diff))
          std::cout << "  max loss diff " << sci(l.loss_diff) << ", grad-norm diff " << sci(l.grad_norm_diff);
        if (!l.note.empty()) std::cout << "  (" << l.note << ")";
        std::cout << "\n";
        j.push_back({{"check", l.what}, {"status", l.status},
                     {"max_loss_rel_diff", std::isfinite(l.loss_diff) ? json(l.loss_diff) : json(nullptr)},
                     {"max_grad_norm_rel_diff", std::isfinite(l.grad_norm_diff) ? json(l.grad_norm_diff) : json(nullptr)},
                     {"note", l.note}});
      }
      write_json_file(v.out + "/verify.json", json{{"config", v.config}, {"passed", all}, {"checks", j}});
      std::cout << "[zrepro verify] " << (all ? "all checks pass" : "FAILED") << "; " << v.out << "/verify.json"
                << std::endl;
      return all ? kExitOk : kExitVerifyFailed;
    });
  }, nullptr, Words::the_command_reads_them);
}

}  // namespace zrepro
