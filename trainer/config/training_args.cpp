// See training_args.h.
#include "trainer/config/training_args.h"

#include <fstream>
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

}  // namespace

TrainingArgs load_training_args(const std::string& path) {
  const json j = json::parse(read_user_file("--training-args", path, "the JSON of the job's TrainingArguments"), nullptr,
                             false);
  if (j.is_discarded() || !j.is_object())
    throw ConfigError("--training-args " + path + ": not a JSON object (trainer.args.to_json_string() writes one)");
  TrainingArgs t;
  t.file = path;
  t.per_device_train_batch_size = read_key<int64_t>(j, path, "per_device_train_batch_size", true);
  t.gradient_accumulation_steps = read_key<int64_t>(j, path, "gradient_accumulation_steps", true);
  t.warmup_steps = read_key<int64_t>(j, path, "warmup_steps", false);
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
}

}  // namespace zrepro
