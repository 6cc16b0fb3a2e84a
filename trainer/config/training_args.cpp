// See training_args.h.
#include "trainer/config/training_args.h"

#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "device/base/errors.h"
#include "trainer/config/user_file.h"

namespace zrepro {

using json = nlohmann::json;

namespace {

template <class T>
std::optional<T> read_key(const json& j, const std::string& file, const char* key, bool positive) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  const json& v = j[key];
  const bool ok = std::is_integral_v<T> ? v.is_number_integer() : v.is_number();
  if (!ok || (positive && v.get<double>() <= 0) || (!positive && v.get<double>() < 0))
    throw ConfigError("--training-args " + file + ": " + key + " is " + v.dump() + ", expected " +
                      (std::is_integral_v<T> ? "an integer" : "a number") + (positive ? " > 0" : " >= 0") +
                      " (as TrainingArguments takes it)");
  return v.get<T>();
}

bool read_bool(const json& j, const std::string& file, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return false;
  if (!j[key].is_boolean())
    throw ConfigError("--training-args " + file + ": " + key + " is " + j[key].dump() + ", expected true or false");
  return j[key].get<bool>();
}

template <class T>
void fill(std::optional<T>& flag, const std::optional<T>& from_file, const char* flag_name, const char* key,
          ConfigFlags& f) {
  if (!from_file) return;
  if (!flag) {
    flag = from_file;
    f.from_training_args.insert(flag_name);
  } else if (*flag != *from_file) {
    f.training_args_notes.push_back(std::string(flag_name) + " " + json(*flag).dump() + " wins over the Trainer's " +
                                    key + " " + json(*from_file).dump() + " in " + f.training_args_file);
  }
}

// transformers' get_scheduler names zrepro runs, and the lr_scheduler_kwargs each takes.
const std::map<std::string, std::set<std::string>> kTrainerSchedules = {
    {"linear", {}},
    {"cosine", {"num_cycles"}},
    {"constant", {}},
    {"constant_with_warmup", {}},
    {"cosine_with_min_lr", {"num_cycles", "min_lr", "min_lr_rate"}}};

// [Note: the Trainer's schedule] (zero_config.h): lr_scheduler_type and its kwargs.
SchedulerConfig read_schedule(const json& j, const std::string& file) {
  SchedulerConfig sc;
  sc.trainer = true;
  sc.type = "linear";
  if (j.contains("lr_scheduler_type") && !j["lr_scheduler_type"].is_null()) {
    const json& v = j["lr_scheduler_type"];
    std::string names;
    for (const auto& [n, _] : kTrainerSchedules) names += (names.empty() ? "" : ", ") + n;
    if (!v.is_string() || !kTrainerSchedules.count(v.get<std::string>()))
      throw ConfigError("--training-args " + file + ": lr_scheduler_type is " + v.dump() + "; zrepro runs " + names +
                        " (transformers' get_scheduler): give the nearest of them, or the schedule as the "
                        "DeepSpeed config's \"scheduler\"");
    sc.type = v.get<std::string>();
  }
  json kw = j.value("lr_scheduler_kwargs", json());
  if (kw.is_string()) kw = json::parse(kw.get<std::string>().empty() ? "{}" : kw.get<std::string>(), nullptr, false);
  if (kw.is_null()) kw = json::object();
  if (!kw.is_object())
    throw ConfigError("--training-args " + file + ": lr_scheduler_kwargs is " + j["lr_scheduler_kwargs"].dump() +
                      ", expected a JSON object (as TrainingArguments takes it)");
  const std::set<std::string>& takes = kTrainerSchedules.at(sc.type);
  for (const auto& [k, v] : kw.items()) {
    if (!takes.count(k) || !v.is_number())
      throw ConfigError("--training-args " + file + ": lr_scheduler_kwargs has " + k + " = " + v.dump() + "; " +
                        sc.type + " takes " + (takes.empty() ? std::string("none") : "numbers for " + json(takes).dump()) +
                        " in zrepro: remove it");
  }
  sc.num_cycles = kw.value("num_cycles", 0.5);
  if (sc.type == "cosine_with_min_lr") {
    if (kw.contains("min_lr") == kw.contains("min_lr_rate"))  // transformers raises on both and on neither
      throw ConfigError("--training-args " + file + ": cosine_with_min_lr needs exactly one of min_lr and min_lr_rate "
                        "in lr_scheduler_kwargs (got " + kw.dump() + "), as transformers' get_scheduler requires");
    if (kw.contains("min_lr")) sc.min_lr = kw["min_lr"].get<double>();  // over the optimizer's lr, once resolved
    else sc.min_lr_rate = kw["min_lr_rate"].get<double>();
  }
  return sc;
}

// warmup_steps: an integer count, or (transformers 5) a share of the steps below 1.
void read_warmup(const json& j, const std::string& file, TrainingArgs& t) {
  if (j.contains("warmup_steps") && j["warmup_steps"].is_number() && !j["warmup_steps"].is_number_integer()) {
    const double v = j["warmup_steps"].get<double>();
    if (v < 0 || (v >= 1 && v != std::floor(v)))
      throw ConfigError("--training-args " + file + ": warmup_steps is " + j["warmup_steps"].dump() +
                        ", expected an integer >= 0 or a share of the steps in [0, 1) (as TrainingArguments takes it)");
    if (v < 1) t.warmup_ratio = v; else t.warmup_steps = static_cast<int64_t>(v);
  } else {
    t.warmup_steps = read_key<int64_t>(j, file, "warmup_steps", false);
  }
  const std::optional<double> ratio = read_key<double>(j, file, "warmup_ratio", false);
  if (ratio && *ratio >= 1)
    throw ConfigError("--training-args " + file + ": warmup_ratio is " + json(*ratio).dump() + ", expected [0, 1)");
  if (ratio && *ratio > 0 && !t.warmup_ratio && t.warmup_steps.value_or(0) == 0) t.warmup_ratio = ratio;
  if (t.warmup_ratio && *t.warmup_ratio == 0) t.warmup_ratio.reset();
}

}  // namespace

TrainingArgs load_training_args(const std::string& path) {
  const json j = parse_user_json("--training-args " + path,
                                 read_user_file("--training-args", path, "the JSON of the job's TrainingArguments"));
  if (j.is_discarded() || !j.is_object())
    throw ConfigError("--training-args " + path + ": not a JSON object (trainer.args.to_json_string() writes one)");
  TrainingArgs t;
  t.file = path;
  t.per_device_train_batch_size = read_key<int64_t>(j, path, "per_device_train_batch_size", true);
  t.gradient_accumulation_steps = read_key<int64_t>(j, path, "gradient_accumulation_steps", true);
  read_warmup(j, path, t);
  t.max_seq_length = read_key<int64_t>(j, path, "max_seq_length", true);
  t.learning_rate = read_key<double>(j, path, "learning_rate", true);
  t.weight_decay = read_key<double>(j, path, "weight_decay", false);
  t.max_grad_norm = read_key<double>(j, path, "max_grad_norm", false);
  t.adam_beta1 = read_key<double>(j, path, "adam_beta1", false);
  t.adam_beta2 = read_key<double>(j, path, "adam_beta2", false);
  t.adam_epsilon = read_key<double>(j, path, "adam_epsilon", true);
  const bool bf16 = read_bool(j, path, "bf16"), fp16 = read_bool(j, path, "fp16");
  if (bf16 && fp16) throw ConfigError("--training-args " + path + ": bf16 and fp16 are both true; the Trainer refuses that");
  if (bf16 || fp16 || j.contains("bf16") || j.contains("fp16")) t.precision = bf16 ? "bf16" : fp16 ? "fp16" : "fp32";
  t.gradient_checkpointing = read_bool(j, path, "gradient_checkpointing");
  t.scheduler = read_schedule(j, path);
  // max_steps -1 (or 0): the Trainer counts the steps from num_train_epochs and the data,
  // which the file does not hold.
  const bool counted = j.contains("max_steps") && j["max_steps"].is_number_integer() && j["max_steps"].get<int64_t>() <= 0;
  if (!counted) t.max_steps = read_key<int64_t>(j, path, "max_steps", true);
  if (j.contains("average_tokens_across_devices") && !j["average_tokens_across_devices"].is_null())
    t.average_tokens_across_devices = read_bool(j, path, "average_tokens_across_devices");
  return t;
}

void apply_training_args(const TrainingArgs& t, ConfigFlags& f) {
  f.training_args_file = t.file;
  fill(f.micro_batch, t.per_device_train_batch_size, "--micro-batch", "per_device_train_batch_size", f);
  fill(f.grad_accum, t.gradient_accumulation_steps, "--grad-accum", "gradient_accumulation_steps", f);
  fill(f.lr, t.learning_rate, "--lr", "learning_rate", f);
  fill(f.weight_decay, t.weight_decay, "--weight-decay", "weight_decay", f);
  fill(f.max_grad_norm, t.max_grad_norm, "--max-grad-norm", "max_grad_norm", f);
  fill(f.adam_beta1, t.adam_beta1, "--adam-beta1", "adam_beta1", f);
  fill(f.adam_beta2, t.adam_beta2, "--adam-beta2", "adam_beta2", f);
  fill(f.adam_eps, t.adam_epsilon, "--adam-eps", "adam_epsilon", f);
  fill(f.warmup_steps, t.warmup_steps, "--warmup-steps", "warmup_steps", f);
  fill(f.precision, t.precision, "--precision", "bf16/fp16", f);
  f.trainer_scheduler = t.scheduler;
  f.trainer_total_steps = t.max_steps;
  f.warmup_ratio = t.warmup_ratio;
  if (t.warmup_ratio && !f.warmup_steps) f.from_training_args.insert("--warmup-steps");
}

}  // namespace zrepro
