// Command-line parsing (cxxopts) and the run / config subcommands: flags become a
// ConfigFlags + ModelSpec + TrainOptions, failures become a summary and an exit code.
// Human output is printed by rank 0 only; machine output goes to --out.
#include "trainer/cli.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>

#include <cxxopts.hpp>

#include "device/device.h"
#include "device/errors.h"
#include "trainer/ds_config.h"
#include "trainer/model_spec.h"
#include "trainer/report.h"
#include "trainer/train.h"

namespace zrepro {

using json = nlohmann::json;

namespace {

// Flags shared by run and config: they resolve DeepSpeed "auto" values (or override).
void add_config_flags(cxxopts::Options& o) {
  o.add_options("config")
      ("config", "DeepSpeed JSON config (ds_config.json)", cxxopts::value<std::string>())
      ("model", "model preset or Hugging Face config.json", cxxopts::value<std::string>()->default_value("tiny"))
      ("micro-batch", "train_micro_batch_size_per_gpu for \"auto\" (default 8)", cxxopts::value<int64_t>())
      ("grad-accum", "gradient_accumulation_steps for \"auto\" (default 1)", cxxopts::value<int64_t>())
      ("lr", "optimizer lr for \"auto\" (default 1e-3)", cxxopts::value<double>())
      ("weight-decay", "optimizer weight_decay for \"auto\" (default 0)", cxxopts::value<double>())
      ("max-grad-norm", "gradient_clipping for \"auto\" (default 1.0)", cxxopts::value<double>())
      ("adam-beta1", "optimizer betas[0] for \"auto\" (default 0.9)", cxxopts::value<double>())
      ("adam-beta2", "optimizer betas[1] for \"auto\" (default 0.999)", cxxopts::value<double>())
      ("adam-eps", "optimizer eps for \"auto\" (default 1e-8)", cxxopts::value<double>())
      ("precision", "fp32|fp16|bf16: fp16/bf16 \"enabled\" (default fp32)", cxxopts::value<std::string>())
      ("warmup-steps", "scheduler warmup_num_steps for \"auto\" (default 0)", cxxopts::value<int64_t>())
      ("zero-stage", "override zero_optimization.stage", cxxopts::value<int64_t>())
      ("strict", "unknown config keys are errors")
      ("layers", "override the model's layer count", cxxopts::value<int64_t>())
      ("hidden", "override the model's hidden size", cxxopts::value<int64_t>())
      ("heads", "override the model's attention heads", cxxopts::value<int64_t>())
      ("seq", "override the model's sequence length", cxxopts::value<int64_t>())
      ("vocab", "override the model's vocabulary size", cxxopts::value<int64_t>())
      ("intermediate", "override the model's MLP width", cxxopts::value<int64_t>())
      ("h,help", "show this help");
}

template <class T>
std::optional<T> opt(const cxxopts::ParseResult& r, const char* name) {
  return r.count(name) ? std::optional<T>(r[name].as<T>()) : std::nullopt;
}

ModelSpec model_from(const cxxopts::ParseResult& r) {
  ModelOverrides o{opt<int64_t>(r, "vocab"),  opt<int64_t>(r, "seq"),   opt<int64_t>(r, "hidden"),
                   opt<int64_t>(r, "layers"), opt<int64_t>(r, "heads"), opt<int64_t>(r, "intermediate")};
  return resolve_model(r["model"].as<std::string>(), o);
}

ConfigFlags flags_from(const cxxopts::ParseResult& r, const ModelSpec& m, int world_size, int64_t steps) {
  ConfigFlags f;
  f.micro_batch = opt<int64_t>(r, "micro-batch");
  f.grad_accum = opt<int64_t>(r, "grad-accum");
  f.lr = opt<double>(r, "lr");
  f.weight_decay = opt<double>(r, "weight-decay");
  f.max_grad_norm = opt<double>(r, "max-grad-norm");
  f.adam_beta1 = opt<double>(r, "adam-beta1");
  f.adam_beta2 = opt<double>(r, "adam-beta2");
  f.adam_eps = opt<double>(r, "adam-eps");
  f.precision = opt<std::string>(r, "precision");
  f.warmup_steps = opt<int64_t>(r, "warmup-steps");
  f.zero_stage = opt<int64_t>(r, "zero-stage");
  f.strict = r.count("strict") > 0;
  f.hidden_size = m.hidden;
  f.world_size = world_size;
  f.total_steps = steps;
  return f;
}

std::string require_config(const cxxopts::ParseResult& r) {
  if (!r.count("config"))
    throw ConfigError("--config: missing. Pass a DeepSpeed JSON config, e.g. --config configs/examples/stage0_fp32.json");
  return r["config"].as<std::string>();
}

// Parses argv, turning cxxopts errors into ConfigError (exit 2).
cxxopts::ParseResult parse(cxxopts::Options& o, int argc, char** argv) {
  try {
    return o.parse(argc, argv);
  } catch (const cxxopts::exceptions::incorrect_argument_type& e) {
    // cxxopts names the bad value only: find the flag it was given to.
    std::string flag;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      const auto eq = a.find('=');
      if (eq != std::string::npos && e.what() == "Argument ‘" + a.substr(eq + 1) + "’ failed to parse")
        flag = a.substr(0, eq);
      else if (i > 1 && std::string(e.what()) == "Argument ‘" + a + "’ failed to parse")
        flag = argv[i - 1];
    }
    throw ConfigError((flag.empty() ? "" : flag + ": ") + std::string(e.what()) + " (wrong type, e.g. text where a " +
                      "number is expected). See " + o.program() + " --help");
  } catch (const cxxopts::exceptions::exception& e) {
    throw ConfigError(std::string(e.what()) + ". See " + o.program() + " --help");
  }
}

std::string fmt(double v, int prec = 4) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", prec, v);
  return buf;
}

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

}  // namespace

int run_command(int argc, char** argv) {
  cxxopts::Options o("zrepro run", "Train the toy GPT under a DeepSpeed config and record what happens.");
  add_config_flags(o);
  o.add_options("run")
      ("steps", "optimizer steps", cxxopts::value<int64_t>()->default_value("50"))
      ("seed", "seed for init and data", cxxopts::value<uint64_t>()->default_value("1234"))
      ("device", "cpu|cuda", cxxopts::value<std::string>()->default_value("cpu"))
      ("out", "output folder for summary.json and metrics.jsonl", cxxopts::value<std::string>())
      ("log-every", "step log line interval when steps_per_print is unset", cxxopts::value<int64_t>()->default_value("10"))
      ("threads", "intra-op threads per rank", cxxopts::value<int>()->default_value("1"))
      ("inject", "fault injection KIND:RANK[:ARG] (repeatable), e.g. inf-grad:0:3-", cxxopts::value<std::vector<std::string>>())
      ("print-config", "print the effective config at init");

  std::string out_dir;
  DsConfig cfg;
  ModelSpec model;
  TrainResult result;
  DeviceInfo dev;
  bool have_cfg = false, have_model = false;
  const int rank = 0;
  Progress progress(true);

  auto finish = [&](const std::string& status, json failure, int code) {
    progress.clear();
    if (!out_dir.empty()) {
      SummaryInput in{status, have_cfg ? &cfg : nullptr, have_model ? &model : nullptr, dev.description,
                      have_cfg ? &result : nullptr, std::move(failure)};
      write_file_atomic(out_dir + "/summary.json", build_summary(in).dump(2) + "\n");
    }
    return code;
  };

  try {
    auto r = parse(o, argc, argv);
    if (r.count("help")) { std::cout << o.help() << std::endl; return kExitOk; }
    if (r.count("out")) {
      out_dir = r["out"].as<std::string>();
      std::error_code ec;
      std::filesystem::create_directories(out_dir, ec);
      if (ec) { const std::string bad = out_dir; out_dir.clear();
        throw ConfigError("--out: cannot create \"" + bad + "\": " + ec.message()); }
    }
    TrainOptions topt;
    topt.steps = r["steps"].as<int64_t>();
    if (topt.steps <= 0) throw ConfigError("--steps: must be > 0, got " + std::to_string(topt.steps));
    topt.seed = r["seed"].as<uint64_t>();
    const int threads = r["threads"].as<int>();
    if (threads <= 0) throw ConfigError("--threads: must be > 0, got " + std::to_string(threads));
    set_compute_threads(threads);
    if (r.count("inject"))
      for (const auto& s : r["inject"].as<std::vector<std::string>>()) topt.inject.push_back(parse_injection(s));
    model = model_from(r);
    have_model = true;
    const std::string config_path = require_config(r);
    cfg = load_ds_config(config_path, flags_from(r, model, 1, topt.steps));
    have_cfg = true;
    dev = select_device(r["device"].as<std::string>(), 0);
    topt.device = dev.device;

    if (rank == 0) {
      for (const auto& w : cfg.warnings) std::cout << "[zrepro] warning: " << w << "\n";
      if (r.count("print-config")) std::cout << format_config_dump(cfg);
      std::cout << "[zrepro] world_size=" << cfg.world_size << " zero_stage=" << cfg.zero.stage
                << " precision=" << precision_name(cfg.precision) << " device=" << dev.description << "\n"
                << "[zrepro] model " << model.name << ": " << model.param_count() << " params, " << model.layers
                << " layers, hidden " << model.hidden << ", heads " << model.heads << ", seq " << model.seq
                << ", vocab " << model.vocab << "\n"
                << "[zrepro] batch: micro " << cfg.micro_batch << " x gas " << cfg.grad_accum << " x world "
                << cfg.world_size << " = " << cfg.train_batch_size << " samples/step\n"
                << std::flush;
    }

    std::unique_ptr<MetricsWriter> metrics;
    if (!out_dir.empty()) metrics = std::make_unique<MetricsWriter>(out_dir);
    const int64_t every = cfg.steps_per_print.value_or(r["log-every"].as<int64_t>());
    if (every <= 0) throw ConfigError("--log-every: must be > 0, got " + std::to_string(every));
    auto on_step = [&](const StepRecord& s, const std::string& scale_log) {
      if (metrics) metrics->append(step_json(s));
      if (rank != 0) return;
      if (!scale_log.empty()) { progress.clear(); std::cout << scale_log << "\n"; }
      if ((s.step + 1) % every == 0 || s.step + 1 == topt.steps) {
        progress.clear();
        const double sps = s.step_s > 0 ? cfg.train_batch_size / s.step_s : 0;
        std::cout << "[deepspeed] step=" << s.step + 1 << ", skipped=" << result.skipped_steps << ", lr=["
                  << fmt(s.lr) << "], mom=[(" << cfg.optimizer.beta1 << ", " << cfg.optimizer.beta2 << ")]\n"
                  << "[zrepro] step=" << s.step + 1 << "/" << topt.steps << " loss=" << fmt(s.loss, 6)
                  << " grad_norm=" << fmt(s.grad_norm) << " loss_scale=" << fmt(s.loss_scale, 8)
                  << " samples/sec=" << fmt(sps, 6) << " tokens/sec=" << fmt(sps * model.seq, 6) << "\n";
      }
      std::cout << std::flush;
      progress.update(s, topt.steps);
    };
    train(cfg, model, topt, result, on_step);
    if (metrics) metrics->close();
    progress.clear();
    if (rank == 0 && !result.steps.empty()) {
      std::cout << "[zrepro] done: " << result.steps.size() << " steps, loss " << fmt(result.steps.front().loss)
                << " -> " << fmt(result.steps.back().loss) << ", skipped " << result.skipped_steps
                << (out_dir.empty() ? "" : ", summary " + out_dir + "/summary.json") << "\n";
    }
    return finish("ok", nullptr, kExitOk);
  } catch (const ConfigError& e) {
    std::cerr << "[zrepro] error: " << e.what() << std::endl;
    return finish("config_error",
                  make_failure("config_error", rank, "init", e.what(), "config", "fix the flag, key or file named above"),
                  kExitBadInput);
  } catch (const NumericalError& e) {
    progress.clear();
    std::cerr << "[deepspeed] " << e.what() << std::endl;
    return finish("diverged",
                  make_failure("numerical", rank, "step", e.what(), "numerics",
                               "fp16 overflowed until the loss scale hit min_loss_scale (or the loss went non-finite): "
                               "use bf16, lower the lr, or keep gradient clipping on"),
                  kExitNumerical);
  } catch (const std::exception& e) {
    progress.clear();
    std::cerr << "[zrepro] internal error: " << e.what() << std::endl;
    return finish("error", make_failure("error", rank, "unknown", e.what(), "", "report this as a zrepro bug"),
                  kExitInternal);
  }
}

int config_command(int argc, char** argv) {
  cxxopts::Options o("zrepro config", "Print the effective DeepSpeed config with the source of every value.");
  add_config_flags(o);
  o.add_options("output")
      ("world-size", "world size for the batch triple", cxxopts::value<int>()->default_value("1"))
      ("steps", "total steps (resolves scheduler total_num_steps \"auto\")", cxxopts::value<int64_t>()->default_value("50"))
      ("json", "print JSON instead of the name ..... value table");
  try {
    auto r = parse(o, argc, argv);
    if (r.count("help")) { std::cout << o.help() << std::endl; return kExitOk; }
    ModelSpec model = model_from(r);
    DsConfig cfg = load_ds_config(require_config(r), flags_from(r, model, r["world-size"].as<int>(),
                                                               r["steps"].as<int64_t>()));
    if (r.count("json"))
      std::cout << cfg.effective_json().dump(2) << std::endl;
    else
      std::cout << format_config_dump(cfg);
    return kExitOk;
  } catch (const ConfigError& e) {
    std::cerr << "[zrepro] error: " << e.what() << std::endl;
    return kExitBadInput;
  }
}

}  // namespace zrepro
