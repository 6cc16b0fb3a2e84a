// Command-line flags shared by the subcommands (cxxopts), and `zrepro config`.
#include <cmath>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <mutex>

#include "device/base/errors.h"
#include "trainer/app/cli.h"
#include "trainer/config/ds_versions.h"
#include "trainer/config/training_args.h"
#include "trainer/config/version_diff.h"
#include "trainer/report/report.h"

namespace zrepro {

using json = nlohmann::json;

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
      ("z3-leaf-modules", "ZeRO-3 leaf module classes, comma-separated, as the script's "
                          "deepspeed.utils.set_z3_leaf_modules(model, [...]) gives them (e.g. MixtralSparseMoeBlock): "
                          "fetched as one unit, added to zero_optimization.leaf_module.classes",
       cxxopts::value<std::string>())
      ("training-args", "the job's Hugging Face TrainingArguments as JSON (trainer.args.to_json_string(), or the "
                        "keys the script sets): fills \"auto\" as the Trainer does (per_device_train_batch_size, "
                        "gradient_accumulation_steps, bf16/fp16, learning_rate, max_grad_norm, ...), turns on "
                        "gradient_checkpointing, max_seq_length sets --seq; a config without \"scheduler\" runs "
                        "the Trainer's lr_scheduler_type (warmup_steps, warmup_ratio); a flag given wins",
       cxxopts::value<std::string>())
      ("launcher", "who fills the config's \"auto\" values: trainer (the Hugging Face Trainer's rules, with "
                   "--training-args) or accelerate (Accelerate's DeepSpeed plugin and prepare(), with "
                   "--accelerate-config)", cxxopts::value<std::string>()->default_value("trainer"))
      ("accelerate-config", "the job's accelerate config (YAML from `accelerate config`, or JSON): its "
                            "deepspeed_config (zero_stage, gradient_accumulation_steps, gradient_clipping, offload "
                            "devices, deepspeed_config_file) and mixed_precision fill \"auto\" as Accelerate does; "
                            "implies --launcher accelerate", cxxopts::value<std::string>())
      ("strict", "unknown config keys are errors")
      ("deepspeed-version", "resolve the config as this DeepSpeed release would (0.14.0 ... newest; default the "
                            "newest): its defaults, the keys it refuses", cxxopts::value<std::string>())
      ("layers", "override the model's layer count", cxxopts::value<int64_t>())
      ("hidden", "override the model's hidden size", cxxopts::value<int64_t>())
      ("heads", "override the model's attention heads", cxxopts::value<int64_t>())
      ("seq", "override the model's sequence length", cxxopts::value<int64_t>())
      ("vocab", "override the model's vocabulary size", cxxopts::value<int64_t>())
      ("intermediate", "override the model's MLP width", cxxopts::value<int64_t>())
      ("output-router-logits", "MoE: add the router's load-balancing loss (router_aux_loss_coef x Switch "
                               "Transformer's aux loss of every layer), as model.config.output_router_logits = True "
                               "does (LLaMA-Factory and axolotl set it for MoE training)")
      ("router-aux-loss-coef", "MoE: the aux loss's weight (config.router_aux_loss_coef; LLaMA-Factory's "
                               "moe_aux_loss_coef); default the model's (Mixtral-8x7B 0.02, transformers 0.001)",
       cxxopts::value<double>())
      ("attn", "attention implementation: eager (keeps the s x s probabilities for backward) or sdpa (keeps q, k, "
               "v, the output and the log-sum-exp; recomputes); default the config.json's _attn_implementation, "
               "else eager", cxxopts::value<std::string>())
      ("h,help", "show this help");
}

std::optional<TrainingArgs> training_args_from(const cxxopts::ParseResult& r) {
  if (!r.count("training-args")) return std::nullopt;
  // Several readers of one command line ask for it (the config flags, checkpointing, the
  // sequence length, the loss normalisation): the file is read and checked once.
  static std::mutex mu;
  static std::map<std::string, TrainingArgs> parsed;
  const std::string path = r["training-args"].as<std::string>();
  std::lock_guard<std::mutex> lock(mu);
  auto it = parsed.find(path);
  if (it == parsed.end()) it = parsed.emplace(path, load_training_args(path)).first;
  return it->second;
}

bool checkpointing_from(const cxxopts::ParseResult& r) {
  if (r.count("activation-checkpointing")) return true;
  const std::optional<TrainingArgs> t = training_args_from(r);
  return t && t->gradient_checkpointing;
}

ModelOverrides overrides_from(const cxxopts::ParseResult& r) {
  ModelOverrides o;
  o.vocab = opt<int64_t>(r, "vocab"), o.seq = opt<int64_t>(r, "seq"), o.hidden = opt<int64_t>(r, "hidden");
  o.layers = opt<int64_t>(r, "layers"), o.heads = opt<int64_t>(r, "heads");
  o.intermediate = opt<int64_t>(r, "intermediate"), o.attention = opt<std::string>(r, "attn");
  if (r.count("output-router-logits")) o.output_router_logits = true;
  o.router_aux_loss_coef = opt<double>(r, "router-aux-loss-coef");
  if (!o.seq)
    if (const std::optional<TrainingArgs> t = training_args_from(r); t && t->max_seq_length)
      o.seq = t->max_seq_length, o.seq_from = "the Trainer's max_seq_length (--training-args " + t->file + ")";
  return o;
}

ModelSpec model_from(const cxxopts::ParseResult& r) { return resolve_model(r["model"].as<std::string>(), overrides_from(r)); }

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
  f.z3_leaf_modules = opt<std::string>(r, "z3-leaf-modules");
  f.strict = r.count("strict") > 0;
  if (r.count("deepspeed-version"))
    f.deepspeed_version = check_deepspeed_version("--deepspeed-version", r["deepspeed-version"].as<std::string>());
  f.hidden_size = m.hidden;
  f.world_size = world_size;
  f.total_steps = steps;
  if (const std::optional<TrainingArgs> t = training_args_from(r)) apply_training_args(*t, f);
  const std::string launcher = r["launcher"].as<std::string>();
  if (launcher != "trainer" && launcher != "accelerate")
    throw ConfigError("--launcher: got \"" + launcher + "\", expected trainer (the Hugging Face Trainer fills \"auto\") "
                      "or accelerate (Accelerate's DeepSpeed plugin does)");
  if (r.count("accelerate-config")) {
    if (r.count("launcher") && launcher != "accelerate")
      throw ConfigError("--accelerate-config with --launcher " + launcher + ": an accelerate config is read under "
                        "--launcher accelerate; drop --launcher " + launcher);
    f.accelerate = load_accelerate_config(r["accelerate-config"].as<std::string>());
  } else if (launcher == "accelerate") {
    f.accelerate = AccelerateConfig{};
  }
  return f;
}

std::string require_config(const std::optional<std::string>& path) {
  if (!path)
    throw ConfigError("--config: missing. Pass a DeepSpeed JSON config, e.g. --config configs/examples/stage0_fp32.json");
  return *path;
}

std::string require_config(const cxxopts::ParseResult& r) { return require_config(opt<std::string>(r, "config")); }

int64_t steps_from(const cxxopts::ParseResult& r) {
  const int64_t steps = r["steps"].as<int64_t>();
  if (steps <= 0) throw ConfigError("--steps: must be > 0, got " + std::to_string(steps));
  return steps;
}

std::optional<int64_t> save_every_from(const cxxopts::ParseResult& r) {
  if (!r.count("save-every")) return std::nullopt;
  const int64_t every = r["save-every"].as<int64_t>();
  if (every <= 0) throw ConfigError("--save-every: got " + std::to_string(every) + ", expected a step count >= 1");
  return every;
}

// Parses argv, turning cxxopts errors into ConfigError (exit 2).
int command_main(cxxopts::Options& o, int argc, char** argv,
                 const std::function<int(const cxxopts::ParseResult&)>& body,
                 const std::function<std::string(std::string)>& help_text, Words words) {
  try {
    const cxxopts::ParseResult r = parse(o, argc, argv, words);
    if (r.count("help")) {
      std::cout << (help_text ? help_text(o.help()) : o.help()) << std::endl;
      return kExitOk;
    }
    return body(r);
  } catch (const ConfigError& e) {
    std::cerr << "[" << o.program() << "] error: " << e.what() << std::endl;
    return kExitBadInput;
  }
}

namespace cli_words {

cxxopts::ParseResult refuse_stray(const cxxopts::Options& o, cxxopts::ParseResult r, Words words) {
  if (words == Words::refused && !r.unmatched().empty() && !r.count("help"))
    throw ConfigError(o.program() + ": \"" + r.unmatched().front() + "\" is not an option (options start with --; a "
                      "flag's value is given once); " + o.program() + " --help lists them");
  return r;
}

}  // namespace cli_words

cxxopts::ParseResult parse(cxxopts::Options& o, int argc, char** argv, Words words) {
  try {
    return cli_words::refuse_stray(o, o.parse(argc, argv), words);
  } catch (const cxxopts::exceptions::incorrect_argument_type& e) {
    // cxxopts names the bad value only (for a list, the bad element): find the flag
    // it was given to.
    const std::string what = e.what();
    auto holds = [&](const std::string& value) {
      size_t start = 0;
      for (;;) {  // the value, or one of its comma-separated elements
        const size_t comma = value.find(',', start);
        if (what == "Argument ‘" + value.substr(start, comma - start) + "’ failed to parse") return true;
        if (comma == std::string::npos) return false;
        start = comma + 1;
      }
    };
    std::string flag;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      const auto eq = a.find('=');
      if (a.rfind("--", 0) == 0 && eq != std::string::npos && holds(a.substr(eq + 1)))
        flag = a.substr(0, eq);
      else if (i > 1 && holds(a))
        flag = argv[i - 1];
    }
    throw ConfigError((flag.empty() ? "" : flag + ": ") + std::string(e.what()) + " (wrong type, e.g. text where a " +
                      "number is expected). See " + o.program() + " --help");
  } catch (const cxxopts::exceptions::exception& e) {
    throw ConfigError(std::string(e.what()) + ". See " + o.program() + " --help");
  }
}

void make_out_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw ConfigError("--out: cannot create \"" + dir + "\": " + ec.message());
}

int with_out_dir(const std::string& dir, const std::string& who, const std::function<int()>& body) {
  std::error_code ec;
  const bool existed = std::filesystem::exists(dir, ec);
  make_out_dir(dir);
  try {
    return body();
  } catch (const IoError&) {
    if (!existed) {
      std::filesystem::remove_all(dir, ec);
      std::cerr << "[" << who << "] removed the partial " << dir << " (this invocation made it and could not finish "
                << "writing it)" << std::endl;
    }
    throw;
  }
}

int64_t parse_size(const std::string& flag, const std::string& v) {
  size_t used = 0;
  double x = -1;
  try {
    x = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string unit = v.substr(used);
  static const std::vector<std::pair<std::string, double>> units = {
      {"", 1},           {"B", 1},          {"K", 1024.0},      {"KiB", 1024.0},   {"KB", 1e3},
      {"M", 1048576.0},  {"MiB", 1048576.0}, {"MB", 1e6},       {"G", 1073741824.0}, {"GiB", 1073741824.0},
      {"GB", 1e9},       {"T", 1099511627776.0}, {"TiB", 1099511627776.0}, {"TB", 1e12}};
  // A size is whole bytes, at least one, at most kMaxSize: 0.5 (0 bytes), inf, nan or 2^64
  // must not turn into "unlimited" or wrap around.
  constexpr double kMaxSize = 1125899906842624.0;  // 2^50 bytes: 1 PiB
  for (const auto& [name, mult] : units)
    if (used > 0 && unit == name) {
      const double bytes = x * mult;
      if (!std::isfinite(bytes) || bytes < 1 || bytes > kMaxSize)
        throw ConfigError(flag + ": got \"" + v + "\", expected a size from 1 byte to 1 PiB such as 512MiB, 2GiB, 80GB "
                          "or 1048576 (bytes)");
      return static_cast<int64_t>(bytes);
    }
  throw ConfigError(flag + ": got \"" + v + "\", expected a size such as 512MiB, 2GiB, 80GB or 1048576 (bytes)");
}

// [Note: device presets] The capacity a GPU reports to PyTorch is less than its
// marketing size (the driver and ECC keep some): "GPU 0 has a total capacity of 79.15 GiB"
// on an A100 80GB. These are the figures PyTorch's OOM message prints on each GPU (to the
// 0.01 GiB it prints); none was measured by zrepro except where docs/lab/PERFORMANCE.md says.
const std::vector<DevicePreset>& device_presets() {
  static const std::vector<DevicePreset> p = {
      {"v100-16gb", "Tesla V100 16GB", 15.78},        {"v100-32gb", "Tesla V100 32GB", 31.75},
      {"t4-16gb", "Tesla T4", 14.75},                 {"a100-40gb", "A100-SXM4-40GB", 39.59},
      {"a100-80gb", "A100-SXM4-80GB", 79.15},         {"h100-80gb", "H100 80GB HBM3", 79.11},
      {"h200-141gb", "H200 141GB HBM3e", 139.81},     {"l40s-48gb", "L40S", 44.53},
      {"rtx4090-24gb", "GeForce RTX 4090", 23.65}};
  return p;
}

int64_t parse_device_memory(const std::string& flag, const std::string& v) {
  std::string lower = v;
  for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const auto& d : device_presets())
    if (lower == d.name) return static_cast<int64_t>(std::llround(d.total_gib * 1024.0)) * 1048576;  // whole MiB
  // A number is a size: its own error (the range of sizes) stands. Anything else was
  // meant as a preset.
  bool number = false;
  try {
    (void)std::stod(v);
    number = true;
  } catch (const std::exception&) {
  }
  try {
    return parse_size(flag, v);
  } catch (const ConfigError&) {
    if (number) throw;
    std::string names;
    for (const auto& d : device_presets()) names += (names.empty() ? "" : ", ") + std::string(d.name);
    throw ConfigError(flag + ": got \"" + v + "\", expected a device preset (" + names +
                      ") or a size such as 40GB (1e9 bytes) or 39.59GiB (2^30)");
  }
}

std::string fmt(double v, int prec) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", prec, v);
  return buf;
}

int config_command(int argc, char** argv) {
  cxxopts::Options o("zrepro config", "Print the effective DeepSpeed config with the source of every value.");
  add_config_flags(o);
  o.add_options("output")
      ("world-size", "world size for the batch triple", cxxopts::value<int>()->default_value("1"))
      ("steps", "total steps (resolves scheduler total_num_steps \"auto\")", cxxopts::value<int64_t>()->default_value("50"))
      ("diff-versions", "two DeepSpeed releases, e.g. 0.19.4,0.19.5: which effective values differ and what "
                        "each difference does", cxxopts::value<std::vector<std::string>>())
      ("json", "print JSON instead of the name ..... value table");
  return command_main(o, argc, argv, [&](const cxxopts::ParseResult& r) -> int {
    ModelSpec model = model_from(r);
    if (r.count("diff-versions")) {
      const auto v = r["diff-versions"].as<std::vector<std::string>>();
      if (v.size() != 2) throw ConfigError("--diff-versions: expected two releases, e.g. --diff-versions 0.19.4,0.19.5");
      const nlohmann::json d = diff_config_versions(
          require_config(r), flags_from(r, model, r["world-size"].as<int>(), steps_from(r)), v[0], v[1]);
      std::cout << (r.count("json") ? json_text(d) + "\n" : format_version_diff(d));
      return kExitOk;
    }
    DsConfig cfg = load_job_config(opt<std::string>(r, "config"), flags_from(r, model, r["world-size"].as<int>(),
                                                               steps_from(r)));
    if (r.count("json"))
      std::cout << json_text(cfg.effective_json()) << std::endl;
    else
      std::cout << format_config_dump(cfg);
    return kExitOk;
  });
}

}  // namespace zrepro
