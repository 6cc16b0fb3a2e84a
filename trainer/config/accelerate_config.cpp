// See accelerate_config.h. A YAML file becomes JSON first (yaml-cpp: plain scalars read
// as YAML 1.1 does, so `no` is false and `'no'` the string), then one typed reader serves
// both forms.
#include "trainer/config/accelerate_config.h"

#include "device/base/utf8.h"

#include <algorithm>
#include <cctype>

#ifdef ZREPRO_HAVE_YAML_CPP
#include <yaml-cpp/yaml.h>
#endif

#include "device/base/errors.h"
#include "trainer/config/user_file.h"

namespace zrepro {

using json = nlohmann::json;

namespace {

const char* kFlag = "--accelerate-config";

// Accelerate's list of the accelerate config variables a deepspeed_config_file excludes
// (DeepSpeedPlugin._deepspeed_config_checks), in its order.
const std::vector<std::string> kPluginFields = {
    "gradient_accumulation_steps", "gradient_clipping",           "zero_stage",
    "offload_optimizer_device",    "offload_param_device",        "offload_param_nvme_path",
    "offload_optimizer_nvme_path", "zero3_save_16bit_model",      "mixed_precision"};

#ifdef ZREPRO_HAVE_YAML_CPP
// A plain (unquoted) scalar as YAML 1.1 reads it: null, bool, integer, float, else string.
json plain_scalar(const std::string& s) {
  std::string l = s;
  std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return std::tolower(c); });
  if (l.empty() || l == "~" || l == "null") return nullptr;
  if (l == "true" || l == "yes" || l == "on") return true;
  if (l == "false" || l == "no" || l == "off") return false;
  size_t used = 0;
  try {
    const long long i = std::stoll(s, &used);
    if (used == s.size()) return i;
    const double d = std::stod(s, &used);
    if (used == s.size()) return d;
  } catch (const std::exception&) {
  }
  return s;
}

// [Note: a user's file is bounded] (user_file.h): yaml-cpp keeps an alias as the node it
// names, so a walk expands every alias (a "billion laughs" grows exponentially) and an
// alias inside what it names never ends; the walk counts its depth and its values.
// yaml-cpp passes any bytes through where JSON's parser refuses invalid UTF-8: keys and
// scalars are made valid here (U+FFFD), so no later message or output can fail on them.
json yaml_to_json(const YAML::Node& n, const std::string& what, int depth, int64_t& values) {
  if (depth > kMaxUserNesting || ++values > kMaxUserValues) refuse_nesting(what);
  switch (n.Type()) {
    case YAML::NodeType::Map: {
      json o = json::object();
      for (const auto& kv : n)
        o[valid_utf8(kv.first.as<std::string>())] = yaml_to_json(kv.second, what, depth + 1, values);
      return o;
    }
    case YAML::NodeType::Sequence: {
      json a = json::array();
      for (const auto& v : n) a.push_back(yaml_to_json(v, what, depth + 1, values));
      return a;
    }
    case YAML::NodeType::Scalar: return n.Tag() == "!" ? json(valid_utf8(n.Scalar())) : plain_scalar(valid_utf8(n.Scalar()));
    default: return nullptr;
  }
}
#endif

json parse_text(const std::string& path, const std::string& text) {
  json j = parse_user_json(std::string(kFlag) + " " + path, text);
  if (!j.is_discarded()) return j;
#ifdef ZREPRO_HAVE_YAML_CPP
  try {
    int64_t values = 0;
    return yaml_to_json(YAML::Load(text), std::string(kFlag) + " " + path, 0, values);
  } catch (const YAML::Exception& e) {
    throw ConfigError(std::string(kFlag) + " " + path + ": not YAML or JSON (" + e.what() + ")");
  }
#else
  throw ConfigError(std::string(kFlag) + " " + path + ": not JSON, and this zrepro was built without yaml-cpp, so it "
                    "cannot read YAML; install libyaml-cpp-dev and rebuild (scripts/setup.sh does), or convert it: "
                    "python3 -c 'import sys, yaml, json; json.dump(yaml.safe_load(open(sys.argv[1])), sys.stdout)' " +
                    path);
#endif
}

class Reader {
 public:
  Reader(const std::string& file, const json& obj, std::string prefix) : file_(file), obj_(obj), prefix_(prefix) {}
  bool has(const char* key) const { return obj_.contains(key) && !obj_[key].is_null(); }
  [[noreturn]] void fail(const char* key, const std::string& expected) const {
    throw ConfigError(std::string(kFlag) + " " + file_ + ": " + prefix_ + key + " is " + obj_[key].dump() +
                      ", expected " + expected);
  }
  std::optional<int64_t> integer(const char* key, int64_t lo, int64_t hi) const {
    if (!has(key)) return std::nullopt;
    const json& v = obj_[key];
    if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
      fail(key, "an integer in " + std::to_string(lo) + ".." + std::to_string(hi));
    return v.get<int64_t>();
  }
  std::optional<double> number(const char* key) const {
    if (!has(key)) return std::nullopt;
    if (!obj_[key].is_number() || obj_[key].get<double>() < 0) fail(key, "a number >= 0");
    return obj_[key].get<double>();
  }
  std::optional<std::string> one_of(const char* key, const std::vector<std::string>& allowed) const {
    if (!has(key)) return std::nullopt;
    const json& v = obj_[key];
    // YAML 1.1 reads an unquoted `no` as false: Accelerate's mixed_precision "no".
    const std::string s = v.is_boolean() && !v.get<bool>() ? "no" : v.is_string() ? v.get<std::string>() : "";
    if (std::find(allowed.begin(), allowed.end(), s) == allowed.end()) {
      std::string names;
      for (const auto& a : allowed) names += (names.empty() ? "" : ", ") + a;
      fail(key, "one of " + names);
    }
    return s;
  }

 private:
  const std::string& file_;
  const json& obj_;
  std::string prefix_;
};

}  // namespace

std::string AccelerateConfig::source(const std::string& key) const {
  return file.empty() ? "Accelerate's default (no --accelerate-config)" : "the accelerate config " + file + "'s " + key;
}

void AccelerateConfig::check_config_file_fields() const {
  if (!deepspeed_config_file || plugin_fields.empty()) return;
  std::string given, listed;
  for (const auto& f : plugin_fields) given += (given.empty() ? "" : ", ") + f;
  for (const auto& f : kPluginFields) listed += (listed.empty() ? "'" : ", '") + f + "'";
  throw ConfigError(std::string(kFlag) + " " + file + ": deepspeed_config_file is set together with " + given +
                    "; Accelerate refuses that: \"When using `deepspeed_config_file`, the following accelerate config "
                    "variables will be ignored: [" + listed + "].\nPlease specify them appropriately in the DeepSpeed "
                    "config file.\nIf you are using an accelerate config file, remove others config variables mentioned "
                    "in the above specified list.\nThe easiest method is to create a new config following the "
                    "questionnaire via `accelerate config`.\nIt will only ask for the necessary config variables when "
                    "using `deepspeed_config_file`.\" Fix: move those values into the DeepSpeed config (or make its "
                    "keys \"auto\" and drop deepspeed_config_file)");
}

json AccelerateConfig::inline_ds_config(bool trainer) const {
  if (trainer) {
    const std::string mp = mixed_precision.value_or("no");
    return {{"train_batch_size", "auto"},
            {"train_micro_batch_size_per_gpu", "auto"},
            {"gradient_accumulation_steps", gradient_accumulation_steps ? json(*gradient_accumulation_steps) : json("auto")},
            {"gradient_clipping", gradient_clipping ? json(*gradient_clipping) : json("auto")},
            {"fp16", {{"enabled", mp == "fp16"}}},
            {"bf16", {{"enabled", mp == "bf16" || mp == "fp8"}}},
            {"zero_optimization",
             {{"stage", zero_stage.value_or(2)},
              {"offload_optimizer", {{"device", offload_optimizer_device.value_or("none")}}},
              {"offload_param", {{"device", offload_param_device.value_or("none")}}}}}};
  }
  // The plugin's keys, each "auto" here so that resolving it says where its value came from
  // (the YAML's key, a launch flag or Accelerate's default: register_accelerate in
  // ds_config.cpp). gradient_clipping is always there: the plugin's "auto" is a truthy
  // string, so it goes in, and prepare() fills it.
  return {{"train_batch_size", "auto"},
          {"train_micro_batch_size_per_gpu", "auto"},
          {"gradient_accumulation_steps", "auto"},
          {"gradient_clipping", "auto"},
          {"zero_optimization",
           {{"stage", "auto"}, {"offload_optimizer", {{"device", "auto"}}}, {"offload_param", {{"device", "auto"}}}}}};
}

bool accelerate_yaml_supported() {
#ifdef ZREPRO_HAVE_YAML_CPP
  return true;
#else
  return false;
#endif
}

AccelerateConfig load_accelerate_config(const std::string& path) {
  return parse_accelerate_config(path, read_user_file(kFlag, path, "the accelerate config file (YAML, as `accelerate "
                                                                   "config` writes it, e.g. "
                                                                   "~/.cache/huggingface/accelerate/default_config.yaml)"));
}

AccelerateConfig parse_accelerate_config(const std::string& path, const std::string& text) {
  const json j = parse_text(path, text);
  if (!j.is_object())
    throw ConfigError(std::string(kFlag) + " " + path + ": expected a mapping of accelerate config keys (as `accelerate "
                      "config` writes), got " + j.dump().substr(0, 80));
  AccelerateConfig a;
  a.file = path;
  const Reader top(path, j, "");
  if (top.has("distributed_type")) {
    a.distributed_type = j["distributed_type"].is_string() ? j["distributed_type"].get<std::string>() : j["distributed_type"].dump();
    if (a.distributed_type != "DEEPSPEED")
      throw ConfigError(std::string(kFlag) + " " + path + ": distributed_type is \"" + a.distributed_type +
                        "\", expected DEEPSPEED: this accelerate config launches without DeepSpeed, and zrepro "
                        "reproduces DeepSpeed jobs (choose DeepSpeed in `accelerate config`)");
  }
  a.mixed_precision = top.one_of("mixed_precision", {"no", "fp16", "bf16", "fp8"});
  a.num_processes = top.integer("num_processes", 1, 1 << 20);
  a.num_machines = top.integer("num_machines", 1, 1 << 20);
  if (j.contains("deepspeed_config") && !j["deepspeed_config"].is_null()) {
    const json& d = j["deepspeed_config"];
    if (!d.is_object())
      throw ConfigError(std::string(kFlag) + " " + path + ": deepspeed_config is " + d.dump() + ", expected a mapping");
    const Reader ds(path, d, "deepspeed_config.");
    if (ds.has("deepspeed_config_file")) {
      if (!d["deepspeed_config_file"].is_string()) ds.fail("deepspeed_config_file", "the path of a DeepSpeed JSON config");
      a.deepspeed_config_file = d["deepspeed_config_file"].get<std::string>();
    }
    a.gradient_accumulation_steps = ds.integer("gradient_accumulation_steps", 1, 1 << 20);
    a.gradient_clipping = ds.number("gradient_clipping");
    a.zero_stage = ds.integer("zero_stage", 0, 3);
    a.offload_optimizer_device = ds.one_of("offload_optimizer_device", {"none", "cpu", "nvme"});
    a.offload_param_device = ds.one_of("offload_param_device", {"none", "cpu", "nvme"});
    for (auto it = d.begin(); it != d.end(); ++it)
      if (std::find(kPluginFields.begin(), kPluginFields.end(), it.key()) != kPluginFields.end())
        a.plugin_fields.push_back(it.key());
  }
  if (top.has("mixed_precision")) a.plugin_fields.push_back("mixed_precision");
  a.check_config_file_fields();
  return a;
}

}  // namespace zrepro
