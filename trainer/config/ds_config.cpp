// Loads a DeepSpeed config into DsConfig. A Section walks one JSON object: each
// get() consumes a key, resolves file / flag / "auto" / default in that order and
// records the entry; finish() reports what was left unconsumed as unknown keys.
#include "trainer/config/ds_config.h"
#include "device/base/json_optional.h"

#include "trainer/config/ds_versions.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <filesystem>
#include <set>
#include <sstream>

#include "device/base/errors.h"
#include "trainer/config/leaf_modules.h"
#include "trainer/config/user_file.h"
#include "zero/schedule/stage_policy.h"

namespace zrepro {

using json = nlohmann::json;

const char* source_name(Source s) {
  switch (s) {
    case Source::file: return "file";
    case Source::default_: return "default";
    case Source::auto_: return "auto";
    case Source::flag: return "flag";
    case Source::derived: return "derived";
  }
  return "?";
}

namespace {

// HF-integration defaults for "auto" values when no flag is given (documented in README).
constexpr int64_t kAutoMicroBatch = 8;
constexpr int64_t kAutoGradAccum = 1;
constexpr double kAutoLr = 1e-3;

// A value from a zrepro flag: the JSON value, and the flag that set it (for an
// override) or a note on how the "auto" value was obtained (for an auto).
struct FlagValue {
  json value;
  std::string flag;
  std::string refuse = {};  // set: the launcher cannot fill this "auto"; the message says why
};

const char* json_type(const json& v) {
  if (v.is_boolean()) return "boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "integer";
  if (v.is_number()) return "number";
  if (v.is_string()) return "string";
  if (v.is_array()) return "array";
  if (v.is_object()) return "object";
  return "null";
}

class Loader;

// "auto" filled by Accelerate's plugin and prepare(): --launcher accelerate without the
// Trainer (whose own rules fill what the plugin left when it runs under `accelerate launch`).
bool accelerate_fills(const ConfigFlags& f) { return f.accelerate && f.training_args_file.empty(); }

class Section {
 public:
  Section(Loader& loader, const json* obj, std::string prefix)
      : L_(loader), obj_(obj), prefix_(std::move(prefix)) {}

  bool has(const std::string& key) const { return obj_ && obj_->contains(key); }
  const json* raw(const std::string& key) const { return has(key) ? &(*obj_)[key] : nullptr; }
  bool get_raw_bool(const std::string& key) const { return raw(key) && raw(key)->is_boolean() && raw(key)->get<bool>(); }
  std::string path(const std::string& key) const { return prefix_ + key; }
  void consume(const std::string& key) { consumed_.insert(key); }

  // Typed read with resolution order: flag override, file value ("auto" -> HF
  // auto value or default), default.
  template <class T>
  T get(const std::string& key, T def);

  // Nested object (absent -> empty section). Throws if present but not an object.
  Section sub(const std::string& key);

  // Unknown keys: warning, or error under --strict or when the release validates the block
  // (strict: its "strict" version entry in effect, ds_versions.h).
  void finish(const std::set<std::string>& not_emulated = {}, const VersionChange* strict = nullptr);

 private:
  Loader& L_;
  const json* obj_;
  std::string prefix_;
  std::set<std::string> consumed_;
};

class Loader {
 public:
  Loader(std::string file, const ConfigFlags& flags, DsConfig& out)
      : file_(std::move(file)), flags_(flags), out_(out) {}

  [[noreturn]] void fail(const std::string& path, const std::string& what) {
    throw ConfigError(file_ + ": " + path + ": " + what);
  }
  void warn(const std::string& msg) { out_.warnings.push_back(file_ + ": " + msg); }
  // [Note: "auto" as the Trainer fills it] (training_args.h): transformers refuses a
  // DeepSpeed value the file sets explicitly that differs from the TrainingArguments'
  // (HfTrainerDeepSpeedConfig's "mismatch" error); so does a run given --training-args.
  void check_trainer_match(const std::string& path, const json* file_value, const json& trainer_value,
                           const std::string& source) {
    if (source != "--training-args" || !file_value || (file_value->is_string() && *file_value == "auto") ||
        *file_value == trainer_value)
      return;
    fail(path, "is " + file_value->dump() + " in the file and " + trainer_value.dump() + " in the Trainer's arguments (" +
                   flags_.training_args_file + "); transformers refuses that mismatch (\"Please correct the following "
                   "DeepSpeed config values that mismatch TrainingArguments values\"): set it to \"auto\" or to the "
                   "Trainer's value");
  }
  void record(const std::string& path, json value, Source src, std::string note = "") {
    for (auto& e : out_.entries)
      if (e.path == path) { e = {path, std::move(value), src, std::move(note)}; return; }
    out_.entries.push_back({path, std::move(value), src, std::move(note)});
  }
  bool strict() const { return flags_.strict; }
  const ConfigFlags& flags() const { return flags_; }
  const std::string& version() const { return out_.deepspeed_version; }

  std::map<std::string, FlagValue> overrides;  // path -> flag that overrides the file
  std::map<std::string, FlagValue> autos;      // path -> HF-style value for "auto"

  // The value an "auto" at path resolves to, or what the launcher says when it cannot: a
  // refusal, or under Accelerate its generic one for a key it has no value for (the Trainer
  // leaves such a key to DeepSpeed's default: nullptr).
  const FlagValue* auto_for(const std::string& path) {
    auto it = autos.find(path);
    if (it != autos.end() && !it->second.refuse.empty()) fail(path, it->second.refuse);
    if (it != autos.end()) return &it->second;
    if (accelerate_fills(flags_)) fail(path, accelerate_refusal(path));
    return nullptr;
  }
  // Accelerate's fill_match error for an "auto" nothing fills, quoted.
  static std::string accelerate_refusal(const std::string& path) {
    return "is \"auto\" and Accelerate has nothing to fill it with; Accelerate refuses it: \"`" + path +
           "` not found in kwargs. Please specify `" + path + "` without `auto` (set to correct value) in the "
           "DeepSpeed config file or pass it in kwargs.\"";
  }

  template <class T>
  T convert(const std::string& path, const json& v);

 private:
  std::string file_;
  const ConfigFlags& flags_;
  DsConfig& out_;
};

template <>
bool Loader::convert<bool>(const std::string& path, const json& v) {
  if (!v.is_boolean())
    fail(path, std::string("expected true or false, got ") + v.dump() + " (" + json_type(v) + ")");
  return v.get<bool>();
}

template <>
int64_t Loader::convert<int64_t>(const std::string& path, const json& v) {
  // DeepSpeed configs commonly write sizes as 5e8: accept integral floats.
  if (v.is_number_integer() || v.is_number_unsigned()) return v.get<int64_t>();
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.2e18) return static_cast<int64_t>(d);
  }
  fail(path, std::string("expected an integer, got ") + v.dump() + " (" + json_type(v) + ")");
}

template <>
int Loader::convert<int>(const std::string& path, const json& v) {
  return static_cast<int>(convert<int64_t>(path, v));
}

template <>
double Loader::convert<double>(const std::string& path, const json& v) {
  if (!v.is_number()) fail(path, std::string("expected a number, got ") + v.dump() + " (" + json_type(v) + ")");
  return v.get<double>();
}

template <>
std::string Loader::convert<std::string>(const std::string& path, const json& v) {
  if (!v.is_string()) fail(path, std::string("expected a string, got ") + v.dump() + " (" + json_type(v) + ")");
  return v.get<std::string>();
}

template <class T>
T Section::get(const std::string& key, T def) {
  consume(key);
  const std::string p = path(key);
  const json* v = raw(key);
  const bool is_auto = v && v->is_string() && *v == "auto";
  if (auto it = L_.overrides.find(p); it != L_.overrides.end() && !is_auto) {
    L_.check_trainer_match(p, v, it->second.value, it->second.flag);
    T val = L_.convert<T>(p, it->second.value);
    if (v && *v != it->second.value)
      L_.warn(p + " = " + v->dump() + " in the file is overridden by " + it->second.flag + " " +
              it->second.value.dump());
    L_.record(p, json(val), Source::flag, it->second.flag);
    return val;
  }
  if (is_auto) {
    if (const FlagValue* a = L_.auto_for(p)) {
      T val = L_.convert<T>(p, a->value);
      L_.record(p, json(val), Source::auto_, a->flag);
      return val;
    }
    L_.record(p, json(def), Source::auto_, "DeepSpeed drops \"auto\": default applies");
    return def;
  }
  const VersionChange* unknown = v ? not_yet_added(p, L_.version()) : nullptr;
  if (unknown)
    L_.warn(p + " is not a key of DeepSpeed " + L_.version() + " (added in " + unknown->since + ", " + unknown->pr +
            "); that release ignores it, and so does this run");
  if (v && !unknown) {
    T val = L_.convert<T>(p, *v);
    L_.record(p, json(val), Source::file);
    return val;
  }
  if (auto vd = versioned_default(p, L_.version()); vd && !vd->value.is_null()) {
    T val = L_.convert<T>(p, vd->value);
    L_.record(p, json(val), Source::default_, vd->note);
    return val;
  }
  L_.record(p, json(def), Source::default_);
  return def;
}

Section Section::sub(const std::string& key) {
  consume(key);
  const json* v = raw(key);
  if (v && !v->is_object())
    L_.fail(path(key), std::string("expected an object, got ") + v->dump() + " (" + json_type(*v) + ")");
  return Section(L_, v, path(key) + ".");
}

void Section::finish(const std::set<std::string>& not_emulated, const VersionChange* strict) {
  if (!obj_) return;
  for (auto it = obj_->begin(); it != obj_->end(); ++it) {
    if (consumed_.count(it.key())) continue;
    const std::string p = path(it.key());
    if (not_emulated.count(it.key())) {
      L_.warn(p + " is a DeepSpeed key that zrepro does not emulate; ignored");
      continue;
    }
    if (strict)
      L_.fail(p, strict->message + ": DeepSpeed " + L_.version() + " refuses unknown keys in this block (since " +
                     strict->since + ", " + strict->pr + "). Remove it or fix its spelling");
    std::string msg = p + " is not a key zrepro knows (DeepSpeed " + L_.version() + "); check its spelling";
    if (L_.strict()) L_.fail(p, "unknown key (--strict). Remove it or fix its spelling");
    L_.warn(msg + "; ignored");
  }
}

void require(Loader& L, bool ok, const std::string& path, const std::string& what) {
  if (!ok) L.fail(path, what);
}

void one_of(Loader& L, const std::string& path, const std::string& v, std::initializer_list<const char*> allowed) {
  std::string list;
  for (auto a : allowed) {
    if (v == a) return;
    list += std::string(list.empty() ? "" : ", ") + a;
  }
  L.fail(path, "got \"" + v + "\", expected one of " + list);
}

// Features a release removed and refuses at config load (DeepSpeedConfigError), with its
// message: "amp" since 0.19.8, "zero_optimization.mics_shard_size" since 0.19.7, ...
void refuse_removed_keys(Loader& L, const json& root) {
  for (const auto& c : version_changes()) {
    if (c.kind != "removed" || compare_versions(c.since, L.version()) > 0) continue;
    const auto dot = c.key.find('.');
    const bool present = dot == std::string::npos
                             ? root.contains(c.key)
                             : root.contains(c.key.substr(0, dot)) && root[c.key.substr(0, dot)].is_object() &&
                                   root[c.key.substr(0, dot)].contains(c.key.substr(dot + 1));
    if (!present) continue;
    std::string previous = "an earlier release";
    for (const auto& r : deepspeed_releases())
      if (compare_versions(r, c.since) < 0) previous = r;
    L.fail(c.key, "DeepSpeedConfigError: " + c.message + " [refused since DeepSpeed " + c.since +
                      (c.pr.empty() || c.pr.rfind("unknown", 0) == 0 ? "" : ", " + c.pr) +
                      "]. Remove the key, or resolve as --deepspeed-version " + previous);
  }
}

// Deprecated zero_optimization keys, mapped onto their successors with a warning
// (DeepSpeed's zero config does the same through pydantic aliases).
void map_deprecated_zero_keys(Loader& L, json& zero) {
  auto take = [&](const char* old_key, const std::string& new_path, auto apply) {
    if (!zero.contains(old_key)) return;
    L.warn(std::string("zero_optimization.") + old_key + " is deprecated; mapped to zero_optimization." + new_path);
    apply(zero[old_key]);
    zero.erase(old_key);
  };
  take("cpu_offload", "offload_optimizer.device", [&](const json& v) {
    if (v == true && !zero.contains("offload_optimizer")) zero["offload_optimizer"] = {{"device", "cpu"}};
  });
  take("cpu_offload_param", "offload_param.device", [&](const json& v) {
    if (v == true && !zero.contains("offload_param")) zero["offload_param"] = {{"device", "cpu"}};
  });
  // DeepSpeed only warns about this one: it sets nothing (set_new_param False), so the
  // offload blocks keep their own pin_memory (or its default).
  if (zero.contains("cpu_offload_use_pin_memory")) {
    L.warn("zero_optimization.cpu_offload_use_pin_memory is deprecated and has no effect in DeepSpeed; set "
           "offload_optimizer.pin_memory / offload_param.pin_memory instead");
    zero.erase("cpu_offload_use_pin_memory");
  }
  take("stage3_gather_fp16_weights_on_model_save", "stage3_gather_16bit_weights_on_model_save", [&](const json& v) {
    if (!zero.contains("stage3_gather_16bit_weights_on_model_save"))
      zero["stage3_gather_16bit_weights_on_model_save"] = v;
  });
  // DeepSpeed's pydantic field names, which it accepts beside the stage3_ aliases
  // (axolotl's zero3_bf16_cpuoffload_all.json writes max_live_parameters: 0).
  for (const char* name : {"prefetch_bucket_size", "param_persistence_threshold", "max_live_parameters",
                           "max_reuse_distance", "gather_16bit_weights_on_model_save"}) {
    const std::string alias = std::string("stage3_") + name;
    if (!zero.contains(name)) continue;
    if (zero.contains(alias))  // DeepSpeed's pydantic model rejects the second spelling
      L.fail(std::string("zero_optimization.") + name,
             "Extra inputs are not permitted: DeepSpeed reads it as another name for zero_optimization." + alias +
                 ", which the config also sets. Keep one of the two");
    zero[alias] = zero[name];
    zero.erase(name);
  }
}

OffloadConfig load_offload(Loader& L, Section s, bool is_param) {
  OffloadConfig d;
  if (is_param) d.buffer_count = 5;
  OffloadConfig o;
  o.device = s.get<std::string>("device", d.device);
  one_of(L, s.path("device"), o.device, {"none", "cpu", "nvme"});
  o.nvme_path = s.get<std::string>("nvme_path", d.nvme_path);
  o.buffer_count = s.get<int64_t>("buffer_count", d.buffer_count);
  require(L, o.buffer_count > 0, s.path("buffer_count"), "must be > 0, got " + std::to_string(o.buffer_count));
  o.pin_memory = s.get<bool>("pin_memory", d.pin_memory);
  if (is_param) {
    o.buffer_size = s.get<int64_t>("buffer_size", d.buffer_size);
    o.max_in_cpu = s.get<int64_t>("max_in_cpu", d.max_in_cpu);
    require(L, o.buffer_size > 0, s.path("buffer_size"), "must be > 0, got " + std::to_string(o.buffer_size));
  } else {
    o.pipeline_read = s.get<bool>("pipeline_read", d.pipeline_read);
    o.pipeline_write = s.get<bool>("pipeline_write", d.pipeline_write);
    o.fast_init = s.get<bool>("fast_init", d.fast_init);
    o.ratio = s.get<double>("ratio", d.ratio);
    require(L, o.ratio > 0 && o.ratio <= 1, s.path("ratio"),
            "must be in (0, 1], got " + json(o.ratio).dump());
  }
  if (o.device == "nvme")
    L.fail(s.path("device"),
           "\"nvme\" offload is not emulated by zrepro. Use \"cpu\" to reproduce host-link effects");
  s.finish();
  return o;
}

// zero_optimization.leaf_module: each list a string or a list of strings (DeepSpeed's
// LeafModuleConfig coerces a string to a one-item list). A release before the key's
// (0.18.0) ignores the block, and its classes default to none.
ZeroConfig::LeafModules load_leaf_module(Loader& L, Section s) {
  ZeroConfig::LeafModules m;
  const std::string block = "zero_optimization.leaf_module";
  const VersionChange* unknown = s.has("classes") || s.has("names") || s.has("name_suffixes")
                                     ? not_yet_added(block, L.version()) : nullptr;
  if (unknown)
    L.warn(block + " is not a key of DeepSpeed " + L.version() + " (added in " + unknown->since + ", " + unknown->pr +
           "); that release ignores it, and so does this run (set_z3_leaf_modules in the script, or "
           "--z3-leaf-modules, is that release's spelling)");
  auto list = [&](const char* key, std::vector<std::string>& out) {
    s.consume(key);
    const json* v = unknown ? nullptr : s.raw(key);
    const std::string p = s.path(key);
    if (!v) {
      if (auto vd = versioned_default(p, L.version()); vd && vd->value.is_array()) {
        out = vd->value.get<std::vector<std::string>>();
        L.record(p, vd->value, Source::default_, vd->note);
      }
      return;
    }
    const bool ok = v->is_string() || (v->is_array() && std::all_of(v->begin(), v->end(), [](const json& e) {
                                         return e.is_string();
                                       }));
    if (!ok) L.fail(p, "expected a string or a list of strings, got " + v->dump() + " (" + json_type(*v) + ")");
    out = v->is_string() ? std::vector<std::string>{v->get<std::string>()} : v->get<std::vector<std::string>>();
    L.record(p, json(out), Source::file);
  };
  list("classes", m.classes);
  list("names", m.names);
  list("name_suffixes", m.name_suffixes);
  s.finish();
  if (L.flags().z3_leaf_modules) {  // set_z3_leaf_modules' classes, added to the config's
    ZeroConfig z;
    z.leaf_module = m;
    add_leaf_classes(z, *L.flags().z3_leaf_modules);
    m = z.leaf_module;
    L.record(block + ".classes", json(m.classes), Source::flag, "--z3-leaf-modules (set_z3_leaf_modules)");
  }
  return m;
}

ZeroConfig load_zero(Loader& L, Section s) {
  ZeroConfig d, z;
  z.stage = s.get<int>("stage", d.stage);
  require(L, StagePolicy::valid(z.stage), s.path("stage"),
          "got " + std::to_string(z.stage) + ", expected 0, 1, 2 or 3");
  const StagePolicy policy{z.stage};  // DeepSpeed's stage-dependent defaults and rules below
  z.contiguous_gradients = s.get<bool>("contiguous_gradients", d.contiguous_gradients);
  z.reduce_scatter = s.get<bool>("reduce_scatter", d.reduce_scatter);
  z.reduce_bucket_size = s.get<int64_t>("reduce_bucket_size", d.reduce_bucket_size);
  z.allgather_partitions = s.get<bool>("allgather_partitions", d.allgather_partitions);
  z.allgather_bucket_size = s.get<int64_t>("allgather_bucket_size", d.allgather_bucket_size);
  z.overlap_comm = s.get<bool>("overlap_comm", policy.shard_params());
  z.sub_group_size = s.get<int64_t>("sub_group_size", d.sub_group_size);
  z.stage3_prefetch_bucket_size = s.get<int64_t>("stage3_prefetch_bucket_size", d.stage3_prefetch_bucket_size);
  z.stage3_param_persistence_threshold =
      s.get<int64_t>("stage3_param_persistence_threshold", d.stage3_param_persistence_threshold);
  z.stage3_max_live_parameters = s.get<int64_t>("stage3_max_live_parameters", d.stage3_max_live_parameters);
  z.stage3_max_reuse_distance = s.get<int64_t>("stage3_max_reuse_distance", d.stage3_max_reuse_distance);
  z.stage3_gather_16bit_weights_on_model_save =
      s.get<bool>("stage3_gather_16bit_weights_on_model_save", d.stage3_gather_16bit_weights_on_model_save);
  z.round_robin_gradients = s.get<bool>("round_robin_gradients", d.round_robin_gradients);
  z.ignore_unused_parameters = s.get<bool>("ignore_unused_parameters", d.ignore_unused_parameters);
  z.use_multi_rank_bucket_allreduce =
      s.get<bool>("use_multi_rank_bucket_allreduce", d.use_multi_rank_bucket_allreduce);
  for (auto [key, v] : {std::pair<const char*, int64_t>{"reduce_bucket_size", z.reduce_bucket_size},
                        {"allgather_bucket_size", z.allgather_bucket_size}})
    require(L, v > 0, s.path(key),
            "must be > 0 elements, got " + std::to_string(v) +
                (std::string(key) != "reduce_bucket_size" ? ""
                 : change_in_effect("zero_optimization.reduce_bucket_size", "strict", L.version())
                     ? " (DeepSpeed " + L.version() + ": \"Input should be greater than 0\")"
                     : " (DeepSpeed " + L.version() + " accepts 0, but zrepro cannot emulate an empty bucket)"));
  // DeepSpeed accepts 0 (each parameter its own optimizer sub-group; axolotl's
  // zero3_bf16_cpuoffload_all.json sets it); zrepro steps per layer either way.
  require(L, z.sub_group_size >= 0, s.path("sub_group_size"),
          "must be >= 0 elements, got " + std::to_string(z.sub_group_size));
  // 0 is meaningful for these: no prefetch, nothing kept, no reuse.
  for (auto [key, v] : {std::pair<const char*, int64_t>{"stage3_param_persistence_threshold",
                                                        z.stage3_param_persistence_threshold},
                        {"stage3_prefetch_bucket_size", z.stage3_prefetch_bucket_size},
                        {"stage3_max_live_parameters", z.stage3_max_live_parameters},
                        {"stage3_max_reuse_distance", z.stage3_max_reuse_distance}})
    require(L, v >= 0, s.path(key), "must be >= 0, got " + std::to_string(v));

  z.offload_param = load_offload(L, s.sub("offload_param"), true);
  z.offload_optimizer = load_offload(L, s.sub("offload_optimizer"), false);
  z.leaf_module = load_leaf_module(L, s.sub("leaf_module"));
  if (z.offload_param.enabled() && !policy.shard_params())
    L.fail(s.path("offload_param.device"),
           "\"" + z.offload_param.device + "\" needs ZeRO stage 3 (stage is " + std::to_string(z.stage) +
               "). Set zero_optimization.stage to 3 or offload_param.device to \"none\"");
  if (z.offload_optimizer.ratio < 1.0 && !policy.shard_params())
    L.fail(s.path("offload_optimizer.ratio"),
           "Partial offloading only supported for ZeRO Stage 3 (ratio " + json(z.offload_optimizer.ratio).dump() +
               ", stage " + std::to_string(z.stage) + "). Set ratio to 1.0 or stage to 3");
  if (z.offload_optimizer.enabled() && !policy.shard_optimizer())
    L.fail(s.path("offload_optimizer.device"),
           "optimizer offload needs ZeRO stage 1, 2 or 3 (stage is 0). Raise zero_optimization.stage");
  s.finish();
  return z;
}

// Before DeepSpeed 0.17.1, ZeRO with an fp16 block that sets none of the dynamic-scaling
// keys started at a loss scale of 2^32 with hysteresis 1 (DynamicLossScaler's own
// defaults); since then the block's defaults (2^16, 2) always apply (deepspeed_versions.json).
void old_zero_fp16_scaling(Loader& L, Section& fp16, Section& top, DsConfig& c) {
  const VersionChange* now = change_in_effect("fp16.initial_scale_power", "behaviour", L.version());
  if (now || !fp16.get_raw_bool("enabled")) return;
  for (const char* k : {"initial_scale_power", "loss_scale_window", "min_loss_scale", "hysteresis", "consecutive_hysteresis"})
    if (fp16.has(k)) return;
  const json* zero = top.raw("zero_optimization");
  if (!zero || !zero->is_object() || zero->value("stage", 0) == 0) return;
  c.fp16.initial_scale_power = 32;
  c.fp16.hysteresis = 1;
  const std::string why = "DeepSpeed " + L.version() + " with ZeRO and no dynamic-scaling key in fp16 (until 0.17.1)";
  L.record("fp16.initial_scale_power", 32, Source::default_, why);
  L.record("fp16.hysteresis", 1, Source::default_, why);
}

// DeepSpeed 0.17.6 to 0.18.2 computed ZeRO-2 gradients differently from the releases
// before and after (deepspeed_versions.json, measured: docs/lab/DEEPSPEED_RELEASES.md):
// [Note: a release's own behaviour] (zero/zero_config.h) says how; a run resolved as one of
// them trains so, and says so.
void zero2_gradient_regression(Loader& L, DsConfig& c) {
  const VersionChange* now = change_in_effect("zero_optimization.stage", "behaviour", L.version());
  // The entry's "when" says which stage it is about (the table is the one place that says so).
  if (!now || now->since != "0.17.6" || !now->when.is_object() ||
      now->when.value("zero_optimization.stage", -1) != c.zero.stage || c.zero.offload_optimizer.enabled())
    return;
  c.release.boundary_micro_step_grads_only = true;
  if (c.grad_accum > 1)
    L.warn("DeepSpeed " + L.version() + " at ZeRO-2 keeps only the last micro-step's gradients of each step "
           "(DeepSpeed issue #7718, fixed in 0.18.3): zrepro trains as " + L.version() + " did, so with "
           "gradient_accumulation_steps " + std::to_string(c.grad_accum) + " each step's gradient is 1/" +
           std::to_string(c.grad_accum) + " of the batch's. Upgrade DeepSpeed to 0.18.3 or later");
}

void load_precision(Loader& L, Section& top, DsConfig& c) {
  Section fp16 = top.sub("fp16");
  bool fp16_on = fp16.get<bool>("enabled", false);
  LossScaleConfig d;
  c.fp16.loss_scale = fp16.get<double>("loss_scale", d.loss_scale);
  c.fp16.initial_scale_power = fp16.get<int>("initial_scale_power", d.initial_scale_power);
  c.fp16.loss_scale_window = fp16.get<int64_t>("loss_scale_window", d.loss_scale_window);
  c.fp16.hysteresis = fp16.get<int>("hysteresis", d.hysteresis);
  c.fp16.consecutive_hysteresis = fp16.get<bool>("consecutive_hysteresis", d.consecutive_hysteresis);
  c.fp16.min_loss_scale = fp16.get<double>("min_loss_scale", d.min_loss_scale);
  fp16.get<bool>("auto_cast", false);
  if (const VersionChange* k = change_in_effect("fp16.min_loss_scale", "strict", L.version());
      k && c.fp16.min_loss_scale != std::floor(c.fp16.min_loss_scale))
    L.fail(fp16.path("min_loss_scale"), k->message + " (got " + json(c.fp16.min_loss_scale).dump() + "; DeepSpeed " +
                                            L.version() + " reads it as an integer since " + k->since + ", " + k->pr +
                                            "). Write a whole number such as 1");
  old_zero_fp16_scaling(L, fp16, top, c);
  require(L, c.fp16.loss_scale >= 0, fp16.path("loss_scale"), "must be >= 0 (0 = dynamic)");
  require(L, c.fp16.initial_scale_power >= 0 && c.fp16.initial_scale_power < 64, fp16.path("initial_scale_power"),
          "must be in [0, 63], got " + std::to_string(c.fp16.initial_scale_power));
  require(L, c.fp16.loss_scale_window > 0, fp16.path("loss_scale_window"), "must be > 0");
  require(L, c.fp16.hysteresis >= 1, fp16.path("hysteresis"), "must be >= 1");
  require(L, c.fp16.min_loss_scale > 0, fp16.path("min_loss_scale"), "must be > 0");
  fp16.finish({"fp16_master_weights_and_grads"}, change_in_effect("fp16", "strict", L.version()));

  // Older configs spell the bf16 section "bfloat16".
  Section bf16 = top.sub(top.has("bfloat16") && !top.has("bf16") ? "bfloat16" : "bf16");
  bool bf16_on = bf16.get<bool>("enabled", false);
  c.bf16_check_grad_overflow = bf16.get<bool>("check_grad_overflow", true);
  bf16.finish({"immediate_grad_update"}, change_in_effect("bf16", "strict", L.version()));
  if (fp16_on && bf16_on)
    L.fail("fp16.enabled", "fp16 and bf16 are both enabled; enable at most one (or pass --precision)");
  c.precision = fp16_on ? Precision::fp16 : bf16_on ? Precision::bf16 : Precision::fp32;
}

// optimizer.params.betas: a pair resolved as two values, so that "auto" maps onto two flags
// (--adam-beta1/--adam-beta2) and a flag can override either.
void load_betas(Loader& L, Section& p, OptimizerConfig& o) {
  const OptimizerConfig d;
  const json* b = p.raw("betas");
  p.consume("betas");
  const std::string path = p.path("betas");
  const bool is_auto = b && *b == "auto";
  if (b && !is_auto && (!b->is_array() || b->size() != 2 || !(*b)[0].is_number() || !(*b)[1].is_number()))
    L.fail(path, "expected [beta1, beta2] or \"auto\", got " + b->dump());
  Source src = Source::default_;
  auto pick = [&](int i, double def) {
    const std::string key = path + "." + std::to_string(i);
    if (auto ov = L.overrides.find(key); ov != L.overrides.end()) {
      src = Source::flag;
      return ov->second.value.get<double>();
    }
    if (is_auto) {
      if (src != Source::flag) src = Source::auto_;
      if (L.autos.count(key)) return L.autos.at(key).value.get<double>();
      L.fail(path, Loader::accelerate_refusal(path));
    }
    if (!b) return def;
    if (src == Source::default_) src = Source::file;
    return (*b)[i].get<double>();
  };
  o.beta1 = pick(0, d.beta1);
  o.beta2 = pick(1, d.beta2);
  L.record(path, json::array({o.beta1, o.beta2}), src, src == Source::auto_ ? "from --adam-beta1/--adam-beta2" : "");
}

// "Adam" or "AdamW" in any case, spelt as DeepSpeed's names.
std::string optimizer_type(Loader& L, Section& opt, const std::string& type) {
  std::string lower;
  for (char ch : type) lower += static_cast<char>(std::tolower(ch));
  if (lower == "adam") return "Adam";
  if (lower == "adamw") return "AdamW";
  L.fail(opt.path("type"), "\"" + type + "\" is not an optimizer zrepro emulates; expected \"Adam\" or \"AdamW\"");
  return type;
}

void load_optimizer(Loader& L, Section& top, DsConfig& c) {
  Section opt = top.sub("optimizer");
  const OptimizerConfig d;
  OptimizerConfig& o = c.optimizer;
  o.type = optimizer_type(L, opt, opt.get<std::string>("type", d.type));
  Section p = opt.sub("params");
  o.lr = p.get<double>("lr", d.lr);
  load_betas(L, p, o);
  o.eps = p.get<double>("eps", d.eps);
  o.weight_decay = p.get<double>("weight_decay", d.weight_decay);
  o.adam_w_mode = p.get<bool>("adam_w_mode", true) || o.type == "AdamW";
  o.bias_correction = p.get<bool>("bias_correction", true);
  p.get<bool>("torch_adam", false);
  require(L, o.lr >= 0, p.path("lr"), "must be >= 0");
  require(L, o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1, p.path("betas"), "each beta must be in [0, 1)");
  require(L, o.eps > 0, p.path("eps"), "must be > 0");
  require(L, o.weight_decay >= 0, p.path("weight_decay"), "must be >= 0");
  p.finish({"amsgrad", "fused", "foreach", "capturable", "maximize", "differentiable"});
  opt.finish();
}

// WarmupCosineLR: ratios of the optimizer's lr; warmup_num_steps must be a positive
// integer (DeepSpeed raises otherwise), total_num_steps is required.
void load_cosine_scheduler(Loader& L, Section& p, SchedulerConfig& sc) {
  const SchedulerConfig d;
  sc.warmup_min_ratio = p.get<double>("warmup_min_ratio", d.warmup_min_ratio);
  sc.cos_min_ratio = p.get<double>("cos_min_ratio", d.cos_min_ratio);
  sc.warmup_num_steps = p.get<int64_t>("warmup_num_steps", d.warmup_num_steps);
  sc.warmup_type = p.get<std::string>("warmup_type", d.warmup_type);
  one_of(L, p.path("warmup_type"), sc.warmup_type, {"log", "linear"});
  require(L, sc.warmup_num_steps > 0, p.path("warmup_num_steps"),
          "must be a positive integer for WarmupCosineLR, got " + std::to_string(sc.warmup_num_steps));
  if (!p.has("total_num_steps"))
    L.fail(p.path("total_num_steps"), "is required by WarmupCosineLR; set it (or \"auto\" to use --steps)");
  sc.total_num_steps = p.get<int64_t>("total_num_steps", 0);
  require(L, sc.total_num_steps > 0, p.path("total_num_steps"), "must be > 0");
  p.finish({"last_batch_iteration"});
}

void load_scheduler(Loader& L, Section& top, DsConfig& c) {
  if (!top.has("scheduler")) { top.consume("scheduler"); return; }
  Section s = top.sub("scheduler");
  SchedulerConfig d;
  c.scheduler.type = s.get<std::string>("type", "");
  one_of(L, s.path("type"), c.scheduler.type, {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR"});
  Section p = s.sub("params");
  if (c.scheduler.type == "WarmupCosineLR") {
    load_cosine_scheduler(L, p, c.scheduler);
    s.finish();
    return;
  }
  c.scheduler.warmup_min_lr = p.get<double>("warmup_min_lr", d.warmup_min_lr);
  c.scheduler.warmup_max_lr = p.get<double>("warmup_max_lr", d.warmup_max_lr);
  c.scheduler.warmup_num_steps = p.get<int64_t>("warmup_num_steps", d.warmup_num_steps);
  c.scheduler.warmup_type = p.get<std::string>("warmup_type", d.warmup_type);
  one_of(L, p.path("warmup_type"), c.scheduler.warmup_type, {"log", "linear"});
  require(L, c.scheduler.warmup_num_steps >= 0, p.path("warmup_num_steps"), "must be >= 0");
  if (c.scheduler.type == "WarmupDecayLR") {
    if (!p.has("total_num_steps"))
      L.fail(p.path("total_num_steps"), "is required by WarmupDecayLR; set it (or \"auto\" to use --steps)");
    c.scheduler.total_num_steps = p.get<int64_t>("total_num_steps", 0);
    require(L, c.scheduler.total_num_steps > 0, p.path("total_num_steps"), "must be > 0");
  }
  p.finish({"last_batch_iteration"});
  s.finish();
}

}  // namespace

BatchTriple derive_batch_triple(std::optional<int64_t> tb, std::optional<int64_t> mb, std::optional<int64_t> gas,
                                int ws) {
  BatchTriple r{0, 0, 0, ""};
  if (tb && mb && gas) {
    r = {*tb, *mb, *gas, "all three given"};
  } else if (tb && mb) {
    r = {*tb, *mb, *tb / *mb / ws, "gradient_accumulation_steps = train_batch_size / micro / world_size"};
  } else if (tb && gas) {
    r = {*tb, *tb / ws / *gas, *gas, "train_micro_batch_size_per_gpu = train_batch_size / world_size / gas"};
  } else if (mb && gas) {
    r = {*mb * *gas * ws, *mb, *gas, "train_batch_size = micro * gas * world_size"};
  } else if (tb) {
    r = {*tb, *tb / ws, 1, "gas = 1, micro = train_batch_size / world_size"};
  } else if (mb) {
    r = {*mb * ws, *mb, 1, "gas = 1, train_batch_size = micro * world_size"};
  } else {
    throw ConfigError(
        "Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided. "
        "Fix: add \"train_micro_batch_size_per_gpu\" (or \"auto\" with --micro-batch) to the config");
  }
  const std::string fix = " Fix: change train_batch_size, train_micro_batch_size_per_gpu or "
                          "gradient_accumulation_steps (or drop one and let it be derived) for world size " +
                          std::to_string(ws) + ".";
  if (r.train_batch_size <= 0)
    throw ConfigError("Train batch size: " + std::to_string(r.train_batch_size) + " has to be greater than 0." + fix);
  if (r.micro_batch <= 0)
    throw ConfigError("Micro batch size per gpu: " + std::to_string(r.micro_batch) + " has to be greater than 0." +
                      fix);
  if (r.grad_accum <= 0)
    throw ConfigError("Gradient accumulation steps: " + std::to_string(r.grad_accum) +
                      " has to be greater than 0." + fix);
  if (r.train_batch_size != r.micro_batch * r.grad_accum * ws)
    throw ConfigError(
        "Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu * "
        "gradient_acc_step * world_size " +
        std::to_string(r.train_batch_size) + " != " + std::to_string(r.micro_batch) + " * " +
        std::to_string(r.grad_accum) + " * " + std::to_string(ws) + "." + fix);
  return r;
}

namespace {

// The steps a schedule spans: the Trainer's max_steps, else --steps.
int64_t schedule_steps(const ConfigFlags& flags) { return flags.trainer_total_steps.value_or(flags.total_steps); }

// The Trainer's warmup: get_warmup_steps (warmup_steps, else ceil(steps x ratio)).
std::optional<int64_t> trainer_warmup_steps(const ConfigFlags& flags) {
  if (flags.warmup_steps || !flags.warmup_ratio) return flags.warmup_steps;
  return static_cast<int64_t>(std::ceil(static_cast<double>(schedule_steps(flags)) * *flags.warmup_ratio));
}

json parse_json(const std::string& text, const std::string& name) {
  json root;
  // DeepSpeed loads its config with an object_pairs_hook that refuses a key given twice in
  // one object ("Duplicate keys in DeepSpeed config"); nlohmann would keep the last.
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  const json::parser_callback_t keys = [&](int depth, json::parse_event_t ev, json& parsed) {
    if (depth > kMaxUserNesting) refuse_nesting(name);  // [Note: a user's file is bounded]
    if (ev == json::parse_event_t::object_start) open_objects.emplace_back();
    if (ev == json::parse_event_t::object_end && !open_objects.empty()) open_objects.pop_back();
    if (ev == json::parse_event_t::key && duplicate.empty() && !open_objects.empty() &&
        !open_objects.back().insert(parsed.get<std::string>()).second)
      duplicate = parsed.get<std::string>();
    return true;
  };
  try {
    root = json::parse(text, keys);
  } catch (const json::parse_error& e) {
    // nlohmann reports a byte offset: turn it into line and column.
    size_t line = 1, col = 1;
    for (size_t i = 0; i + 1 < e.byte && i < text.size(); ++i) {
      if (text[i] == '\n') { ++line; col = 1; } else { ++col; }
    }
    std::string what = e.what();
    auto pos = what.find("syntax error");
    throw ConfigError(name + ": malformed JSON at line " + std::to_string(line) + ", column " +
                      std::to_string(col) + ": " + (pos == std::string::npos ? what : what.substr(pos)) +
                      ". Fix the JSON syntax (a trailing comma or a missing quote is the usual cause)");
  } catch (const json::exception& e) {  // e.g. out_of_range 406: a number past a double (found by fuzzing)
    std::string what = e.what();
    const auto pos = what.find("] ");
    throw ConfigError(name + ": " + (pos == std::string::npos ? what : what.substr(pos + 2)) +
                      ". Fix the value: numbers must fit a double (about 1.8e308)");
  }
  if (!duplicate.empty())
    throw ConfigError(name + ": Duplicate keys in DeepSpeed config: \"" + duplicate + "\" is given twice in one object "
                      "(DeepSpeed refuses the file); keep one of them");
  return root;
}

// Flag overrides (explicit flags) and HF-style auto values (flag or its default).
void register_flags(Loader& L, const ConfigFlags& flags) {
  auto flag_or_auto = [&](const std::string& path, const char* flag, auto opt, json def) {
    if (opt) {
      const bool trainer = flags.from_training_args.count(flag) > 0;
      L.overrides[path] = {json(*opt), trainer ? "--training-args" : flag};
      L.autos[path] = {json(*opt), trainer ? "from the Trainer's arguments (--training-args " + flags.training_args_file + ")"
                                           : std::string("from ") + flag};
    } else {
      L.autos[path] = {def, std::string("default of ") + flag};
    }
  };
  flag_or_auto("train_micro_batch_size_per_gpu", "--micro-batch", flags.micro_batch, kAutoMicroBatch);
  flag_or_auto("gradient_accumulation_steps", "--grad-accum", flags.grad_accum, kAutoGradAccum);
  flag_or_auto("gradient_clipping", "--max-grad-norm", flags.max_grad_norm, 1.0);
  flag_or_auto("optimizer.params.lr", "--lr", flags.lr, kAutoLr);
  flag_or_auto("optimizer.params.weight_decay", "--weight-decay", flags.weight_decay, 0.0);
  flag_or_auto("optimizer.params.eps", "--adam-eps", flags.adam_eps, 1e-8);
  flag_or_auto("optimizer.params.betas.0", "--adam-beta1", flags.adam_beta1, 0.9);
  flag_or_auto("optimizer.params.betas.1", "--adam-beta2", flags.adam_beta2, 0.999);
  flag_or_auto("scheduler.params.warmup_num_steps", "--warmup-steps", trainer_warmup_steps(flags), int64_t{0});
  if (flags.zero_stage) L.overrides["zero_optimization.stage"] = {*flags.zero_stage, "--zero-stage"};
  L.autos["scheduler.params.warmup_min_lr"] = {0.0, "0, as the HF integration sets it"};
  L.autos["scheduler.params.warmup_max_lr"] = {flags.lr.value_or(kAutoLr), flags.lr ? "from --lr" : "default of --lr"};
  L.autos["scheduler.params.total_num_steps"] = {schedule_steps(flags), flags.trainer_total_steps
                                                                           ? "from the Trainer's max_steps"
                                                                           : "from --steps"};
  if (flags.precision) {
    const std::string& p = *flags.precision;
    if (p != "fp32" && p != "fp16" && p != "bf16")
      throw ConfigError("--precision: got \"" + p + "\", expected fp32, fp16 or bf16");
    const std::string by = flags.from_training_args.count("--precision") ? "--training-args" : "--precision";
    L.overrides["fp16.enabled"] = {p == "fp16", by};
    L.overrides["bf16.enabled"] = {p == "bf16", by};
    L.overrides["bfloat16.enabled"] = {p == "bf16", by};
  }
  const std::string prec = flags.precision.value_or("fp32");
  const std::string prec_note = !flags.precision ? "default of --precision (fp32)"
                                : flags.from_training_args.count("--precision")
                                    ? "from the Trainer's bf16/fp16 (--training-args " + flags.training_args_file + ")"
                                    : "from --precision";
  L.autos["fp16.enabled"] = {prec == "fp16", prec_note};
  L.autos["bf16.enabled"] = {prec == "bf16", prec_note};
  L.autos["bfloat16.enabled"] = L.autos["bf16.enabled"];
  if (flags.hidden_size > 0) {
    const int64_t h = flags.hidden_size;
    const std::string h_is = " with model hidden size h = " + std::to_string(h);
    L.autos["zero_optimization.reduce_bucket_size"] = {h * h, "h*h" + h_is};
    L.autos["zero_optimization.stage3_prefetch_bucket_size"] = {static_cast<int64_t>(0.9 * h * h), "0.9*h*h" + h_is};
    L.autos["zero_optimization.stage3_param_persistence_threshold"] = {10 * h, "10*h" + h_is};
  }

}

// Accelerate's mixed precision and where it came from: --precision (the launch flag), the
// YAML's mixed_precision, else "no".
std::pair<std::string, std::string> accelerate_mixed_precision(const ConfigFlags& flags) {
  const AccelerateConfig& a = *flags.accelerate;
  if (flags.precision) return {*flags.precision, "--precision (accelerate launch --mixed_precision)"};
  if (a.mixed_precision) return {*a.mixed_precision, a.source("mixed_precision")};
  return {"no", "mixed_precision \"no\", Accelerate's default"};
}

// [Note: "auto" as Accelerate fills it] (accelerate_config.h): the values Accelerate gives
// an "auto", each with where it came from; a zrepro flag stands for the launch flag or the
// script's argument that gives it (and, as under the Trainer, wins over the file).
void register_accelerate(Loader& L, const ConfigFlags& flags) {
  const AccelerateConfig& a = *flags.accelerate;
  auto set = [&](const std::string& path, json v, std::string from) { L.autos[path] = {std::move(v), std::move(from), ""}; };
  if (flags.micro_batch)
    set("train_micro_batch_size_per_gpu", *flags.micro_batch,
        "the batch_size of the DataLoader given to accelerator.prepare() (--micro-batch)");
  else
    L.autos["train_micro_batch_size_per_gpu"] = {
        nullptr, "", "is \"auto\": Accelerate fills it from the batch_size of the DataLoader passed to "
                     "accelerator.prepare(); give that batch size as --micro-batch (or set the key in the file)"};
  // The plugin's value (the YAML's key), else the launch flag's, else Accelerate's default.
  auto plugin_flag_default = [&](const std::string& path, json yaml, json flag, const char* flag_is, json def,
                                 const char* def_is) {
    if (!yaml.is_null()) return set(path, yaml, a.source("deepspeed_config." + path));
    if (!flag.is_null()) return set(path, flag, flag_is);
    set(path, def, def_is);
  };
  plugin_flag_default("gradient_accumulation_steps", json_of(a.gradient_accumulation_steps), json_of(flags.grad_accum),
                      "--grad-accum (accelerate launch --gradient_accumulation_steps)", 1,
                      "Accelerator(gradient_accumulation_steps=1), Accelerate's default");
  plugin_flag_default("gradient_clipping", json_of(a.gradient_clipping), json_of(flags.max_grad_norm),
                      "--max-grad-norm (accelerate launch --gradient_clipping)", 1.0, "1.0, Accelerate's prepare() default");
  const double lr = flags.lr.value_or(1e-3);
  set("optimizer.params.lr", lr, flags.lr ? "DummyOptim(lr=--lr)" : "DummyOptim's default lr 0.001 (an optimizer "
                                                                     "section with \"auto\" needs DummyOptim in the script)");
  set("optimizer.params.weight_decay", flags.weight_decay.value_or(0.0),
      flags.weight_decay ? "DummyOptim(weight_decay=--weight-decay)" : "DummyOptim's default weight_decay 0");
  for (const char* k : {"optimizer.params.betas.0", "optimizer.params.betas.1", "optimizer.params.eps"}) L.autos.erase(k);
  set("scheduler.params.warmup_min_lr", 0.0, "0, as Accelerate's DummyScheduler fills it");
  set("scheduler.params.warmup_max_lr", lr, "the DummyOptim's lr");
  set("scheduler.params.warmup_num_steps", flags.warmup_steps.value_or(0),
      flags.warmup_steps ? "DummyScheduler(warmup_num_steps=--warmup-steps)" : "DummyScheduler's default warmup 0");
  const int64_t w = std::max(flags.world_size, 1);
  set("scheduler.params.total_num_steps", (flags.total_steps + w - 1) / w,
      "DummyScheduler(total_num_steps=--steps) divided by the " + std::to_string(w) +
          " process(es), as Accelerate does (it expects the count before the DataLoader is sharded)");
  const auto [mp, mp_from] = accelerate_mixed_precision(flags);
  set("fp16.enabled", mp == "fp16", mp_from);
  set("bf16.enabled", mp == "bf16" || mp == "fp8", mp_from);
  L.autos["bfloat16.enabled"] = L.autos["bf16.enabled"];
  set("zero_optimization.stage", a.zero_stage.value_or(2),
      a.zero_stage ? a.source("deepspeed_config.zero_stage") : "2, Accelerate's default zero_stage");
  for (const auto& [key, dev] : {std::pair<const char*, std::optional<std::string>>{"offload_optimizer", a.offload_optimizer_device},
                                 {"offload_param", a.offload_param_device}})
    set(std::string("zero_optimization.") + key + ".device", dev.value_or("none"),
        dev ? a.source(std::string("deepspeed_config.") + key + "_device") : "\"none\", Accelerate's default");
  if (flags.hidden_size > 0) {
    const int64_t h = flags.hidden_size;
    const std::string h_is = " with model hidden size h = " + std::to_string(h) + ", as Accelerate's prepare() at any stage";
    set("zero_optimization.reduce_bucket_size", h * h, "h*h" + h_is);
    set("zero_optimization.stage3_prefetch_bucket_size", static_cast<int64_t>(0.9 * h * h), "int(0.9*h*h)" + h_is);
    set("zero_optimization.stage3_param_persistence_threshold", 10 * h, "10*h" + h_is);
  }
}

// Accelerate's checks of the file against its launcher: the half precision mixed_precision
// does not name must not be enabled (set_mixed_precision's ValueError, quoted), and the
// processes it launches are said when this run has another world size.
void check_accelerate(Loader& L, const json& root, const ConfigFlags& flags) {
  const AccelerateConfig& a = *flags.accelerate;
  const auto [mp, mp_from] = accelerate_mixed_precision(flags);
  const char* other = mp == "fp16" ? "bf16" : (mp == "bf16" || mp == "fp8") ? "fp16" : nullptr;
  if (other && root.contains(other) && root[other].is_object() && root[other].value("enabled", json(false)) == json(true))
    L.fail(std::string(other) + ".enabled",
           "is true while mixed_precision is " + mp + " (" + mp_from + "); Accelerate refuses that: \"`--mixed_precision` arg cannot be set to `" + mp + "` when `" + other +
               "` is set in the DeepSpeed config file.\" Fix: set it to \"auto\" or false");
  if (a.num_processes) {
    const int64_t launched = *a.num_processes;
    if (launched != flags.world_size)
      L.warn("the accelerate config launches num_processes " + std::to_string(launched) + " (all machines); this run "
             "has " + std::to_string(flags.world_size) + " rank(s): train_batch_size \"auto\" and the scheduler's "
             "total_num_steps follow this run's");
  }
}

// The batch triple: resolve each of the three (flag / file / auto), then derive.
void load_batch(Loader& L, Section& top, const ConfigFlags& flags, const std::string& name, DsConfig& c) {
  auto batch_value = [&](const char* key) -> std::optional<int64_t> {
    top.consume(key);
    const json* v = top.raw(key);
    if (auto it = L.overrides.find(key); it != L.overrides.end()) {
      L.check_trainer_match(key, v, it->second.value, it->second.flag);
      return it->second.value.get<int64_t>();
    }
    if (!v) return std::nullopt;
    if (v->is_string() && *v == "auto") {
      if (std::string(key) == "train_batch_size") {
        // Accelerate's prepare(): micro x the config's gas x processes, derived below.
        if (accelerate_fills(flags)) return std::nullopt;
        return static_cast<int64_t>(flags.world_size) * flags.micro_batch.value_or(kAutoMicroBatch) *
               flags.grad_accum.value_or(kAutoGradAccum);
      }
      return L.auto_for(key)->value.get<int64_t>();
    }
    return L.convert<int64_t>(key, *v);
  };
  auto tb = batch_value("train_batch_size");
  auto mb = batch_value("train_micro_batch_size_per_gpu");
  auto gas = batch_value("gradient_accumulation_steps");
  for (auto [key, v] : {std::pair<const char*, std::optional<int64_t>>{"train_batch_size", tb},
                        {"train_micro_batch_size_per_gpu", mb},
                        {"gradient_accumulation_steps", gas}})
    if (v && *v <= 0) L.fail(key, "must be a positive integer, got " + std::to_string(*v));
  BatchTriple bt;
  try {
    bt = derive_batch_triple(tb, mb, gas, flags.world_size);
  } catch (const ConfigError& e) {
    throw ConfigError(name + ": " + e.what());
  }
  c.train_batch_size = bt.train_batch_size;
  c.micro_batch = bt.micro_batch;
  c.grad_accum = bt.grad_accum;
  auto batch_source = [&](const char* key, std::optional<int64_t> given) {
    const json* v = top.raw(key);
    const bool is_auto = v && v->is_string();
    if (L.overrides.count(key) && !is_auto) return std::pair<Source, std::string>{Source::flag, L.overrides[key].flag};
    if (is_auto && std::string(key) == "train_batch_size")
      return std::pair<Source, std::string>{Source::auto_, accelerate_fills(flags) ? "micro x gas x processes, as Accelerate's "
                                                                              "prepare() fills it"
                                                                            : "world_size * micro * gas"};
    if (!given) return std::pair<Source, std::string>{Source::derived, bt.how};
    if (is_auto) {
      return std::pair<Source, std::string>{Source::auto_, L.autos.at(key).flag};
    }
    return std::pair<Source, std::string>{Source::file, ""};
  };
  for (auto [key, val, given] : {std::tuple<const char*, int64_t, std::optional<int64_t>>{
                                     "train_batch_size", c.train_batch_size, tb},
                                 {"train_micro_batch_size_per_gpu", c.micro_batch, mb},
                                 {"gradient_accumulation_steps", c.grad_accum, gas}}) {
    auto [src, note] = batch_source(key, given);
    L.record(key, val, src, note);
  }

}

// Everything after the batch triple: precision, clipping, logging, communication dtype,
// optimizer, scheduler, activation checkpointing, ZeRO, the keys zrepro accepts unread.
void load_sections(Loader& L, Section& top, DsConfig& c) {
  load_precision(L, top, c);
  c.gradient_clipping = top.get<double>("gradient_clipping", 1.0);
  require(L, c.gradient_clipping >= 0, "gradient_clipping", "must be >= 0 (0 disables clipping)");
  if (top.has("steps_per_print")) {
    c.steps_per_print = top.get<int64_t>("steps_per_print", 10);
    require(L, *c.steps_per_print > 0, "steps_per_print", "must be > 0");
  } else if (auto vd = versioned_default("steps_per_print", L.version()); vd && !vd->value.is_null()) {
    top.consume("steps_per_print");
    c.steps_per_print = vd->value.get<int64_t>();
    L.record("steps_per_print", vd->value, Source::default_, vd->note);
  } else {
    top.consume("steps_per_print");
    L.record("steps_per_print", nullptr, Source::default_, "unset: zrepro prints every --log-every steps");
  }
  {
    const std::string implied = c.precision == Precision::fp16 ? "fp16" : c.precision == Precision::bf16 ? "bf16" : "fp32";
    if (top.has("communication_data_type") && !top.raw("communication_data_type")->is_null()) {
      c.communication_data_type = top.get<std::string>("communication_data_type", implied);
      one_of(L, "communication_data_type", c.communication_data_type, {"fp32", "fp16", "bf16"});
    } else {
      top.consume("communication_data_type");
      c.communication_data_type = implied;
      L.record("communication_data_type", implied, Source::derived, "unset: follows the training precision");
    }
  }
  c.managed_gradient_accumulation = top.get<bool>("managed_gradient_accumulation", true);
  load_optimizer(L, top, c);
  load_scheduler(L, top, c);
  {
    Section ac = top.sub("activation_checkpointing");
    c.activation_checkpointing.partition_activations = ac.get<bool>("partition_activations", false);
    c.activation_checkpointing.contiguous_memory_optimization = ac.get<bool>("contiguous_memory_optimization", false);
    c.activation_checkpointing.cpu_checkpointing = ac.get<bool>("cpu_checkpointing", false);
    if (ac.has("number_checkpoints") && !ac.raw("number_checkpoints")->is_null())
      c.activation_checkpointing.number_checkpoints = ac.get<int64_t>("number_checkpoints", 0);
    else
      ac.consume("number_checkpoints");
    ac.finish({"synchronize_checkpoint_boundary", "profile"});
  }
  {
    // checkpoint.load_universal: resume from ds_to_universal's layout (latest_universal),
    // at any world size (trainer/checkpoint/universal.h). The other keys pick how files are
    // written (node-local storage, the writer engine), which zrepro does not model.
    Section ck = top.sub("checkpoint");
    c.load_universal = ck.get<bool>("load_universal", false);
    ck.finish({"tag_validation", "use_node_local_storage", "parallel_write", "writer"});
  }
  c.wall_clock_breakdown = top.get<bool>("wall_clock_breakdown", false);
  c.memory_breakdown = top.get<bool>("memory_breakdown", false);
  c.zero = load_zero(L, top.sub("zero_optimization"));
  zero2_gradient_regression(L, c);
  if (!c.managed_gradient_accumulation && (c.zero.offload_optimizer.enabled() || c.zero.offload_param.enabled()) &&
      !change_in_effect("managed_gradient_accumulation", "behaviour", L.version()))
    L.fail("managed_gradient_accumulation",
           "false with ZeRO offload: DeepSpeed " + L.version() + " asserts at engine init (allowed since 0.19.5, "
           "deepspeedai/DeepSpeed#8225). Set it true, or resolve as --deepspeed-version 0.19.5 or later");
  top.finish({"zero_allow_untested_optimizer", "prescale_gradients", "gradient_predivide_factor",
              "sparse_gradients", "flops_profiler", "tensorboard", "wandb", "csv_monitor", "comet",
              "comms_logger", "aio", "data_types", "compile", "dump_state", "amp",
              "elasticity", "zero_force_ds_cpu_optimizer", "seq_parallel_communication_data_type",
              "dataloader_drop_last", "timers", "monitor_config", "autotuning", "nebula",
              "data_efficiency", "curriculum_learning", "compression_training", "pipeline",
              "gradient_accumulation_dtype", "torch_autocast", "graph_harvesting", "use_data_before_expert_parallelism"});
}

}  // namespace

namespace {

// [Note: "auto" filled by zrepro is said] The Hugging Face Trainer fills "auto" from its
// TrainingArguments; without the matching flag zrepro fills it with its own default. For
// the keys that change memory (the micro-batch, the accumulation, the precision) that is
// an assumption the user must see: a warning names the key, the value assumed and the
// flag (and the Trainer argument it stands for).
void warn_assumed_autos(Loader& L, const DsConfig& c) {
  struct Key {
    const char* path;
    const char* flag;
    const char* trainer;
  };
  static const Key keys[] = {{"train_micro_batch_size_per_gpu", "--micro-batch", "per_device_train_batch_size"},
                             {"gradient_accumulation_steps", "--grad-accum", "gradient_accumulation_steps"},
                             {"bf16.enabled", "--precision", "bf16=True / fp16=True"},
                             {"fp16.enabled", "--precision", "bf16=True / fp16=True"}};
  std::set<std::string> said;  // one warning per flag (bf16 and fp16 both "auto": one precision)
  for (const Key& k : keys)
    for (const auto& e : c.entries)
      if (e.path == k.path && e.source == Source::auto_ && e.note.rfind("default of", 0) == 0 &&
          said.insert(k.flag).second)
        L.warn(std::string(k.path) + " is \"auto\" and no " + k.flag + " was given: zrepro assumed " +
               (std::string(k.flag) == "--precision" ? "fp32 (fp16 and bf16 off)" : e.value.dump()) +
               "; the Hugging Face Trainer fills it from " + k.trainer + ": give " + k.flag + " as the job does");
}

// [Note: the Trainer's schedule] (zero_config.h): where the file has no "scheduler".
void use_trainer_schedule(const json& root, const ConfigFlags& flags, DsConfig& c) {
  if (root.contains("scheduler") || !flags.trainer_scheduler) return;
  c.scheduler = *flags.trainer_scheduler;
  c.scheduler.warmup_num_steps = trainer_warmup_steps(flags).value_or(0);
  c.scheduler.total_num_steps = schedule_steps(flags);
  c.scheduler.in_deepspeed_state = root.contains("optimizer");
  if (c.scheduler.min_lr >= 0) c.scheduler.min_lr_rate = c.scheduler.min_lr / c.optimizer.lr;
}

// [Note: what the file leaves to the script] (ds_config.h).
void say_what_the_script_owns(const json& root, const ConfigFlags& flags, DsConfig& c) {
  const bool trainer = !flags.accelerate || !flags.training_args_file.empty();
  const OptimizerConfig& o = c.optimizer;
  // Under optimizer offload Accelerate's prepare() swaps the Trainer's torch AdamW for
  // DeepSpeedCPUAdam over the same groups (map_pytorch_optim_to_deepspeed), unless the file
  // sets zero_force_ds_cpu_optimizer false.
  const json& force = root.contains("zero_force_ds_cpu_optimizer") ? root["zero_force_ds_cpu_optimizer"] : json(true);
  const bool swapped = c.zero.offload_optimizer.device != "none" && !(force.is_boolean() && !force.get<bool>());
  if (!root.contains("optimizer"))
    c.assumed.push_back(
        "no \"optimizer\" in the file, so the job's script brings its own" +
        std::string(trainer ? std::string(" (the Hugging Face Trainer: torch AdamW") +
                                  (swapped ? ", which Accelerate swaps for DeepSpeedCPUAdam under the offload" : "") +
                                  ", in two groups with weight decay off for biases and norm weights)"
                            : "") +
        "; zrepro runs AdamW (lr " + json(o.lr).dump() + ", betas " + json(o.beta1).dump() + ", " +
        json(o.beta2).dump() + ", eps " + json(o.eps).dump() + ", weight decay " + json(o.weight_decay).dump() +
        ") on every parameter in one group" +
        (o.weight_decay > 0 && trainer ? ": biases and norm weights decay too, as they would not in the Trainer's"
                                       : ""));
  const SchedulerConfig& sc = c.scheduler;
  if (sc.trainer)
    c.assumed.push_back("no \"scheduler\" in the file: the Trainer's own " + sc.type + " schedule (lr_scheduler_type in " +
                        flags.training_args_file + "), warmup " + std::to_string(sc.warmup_num_steps) + " of " +
                        std::to_string(sc.total_num_steps) + " steps (" +
                        (flags.trainer_total_steps ? "max_steps; the run takes the first " +
                                                         std::to_string(flags.total_steps)
                                                   : std::string("--steps: give max_steps for the job's own count")) +
                        "), stepped " +
                        (sc.in_deepspeed_state ? "by DeepSpeed and saved in its checkpoint"
                                               : "by the Trainer after each applied step"));
  else if (!root.contains("scheduler"))
    c.assumed.push_back(
        "no \"scheduler\" in the file, so the job's script brings its own" +
        std::string(trainer ? " (the Hugging Face Trainer: lr_scheduler_type, default linear decay to 0 over the run "
                              "after warmup_steps)"
                            : "") +
        "; zrepro keeps the lr at " + json(o.lr).dump() +
        (trainer ? " (--training-args with the job's arguments runs the Trainer's schedule)" : ""));
}

}  // namespace

DsConfig parse_ds_config(const std::string& text, const std::string& name, const ConfigFlags& flags) {
  json root = parse_json(text, name);
  if (!root.is_object()) throw ConfigError(name + ": expected a JSON object at the top level, got " + json_type(root));
  DsConfig c;
  c.file = name;
  c.world_size = flags.world_size;
  if (flags.world_size < 1) throw ConfigError("--world-size: must be >= 1, got " + std::to_string(flags.world_size));
  c.deepspeed_version = flags.deepspeed_version.empty()
                            ? newest_deepspeed_version()
                            : check_deepspeed_version("--deepspeed-version", flags.deepspeed_version);
  Loader L(name, flags, c);
  refuse_removed_keys(L, root);
  if (root.contains("zero_optimization") && root["zero_optimization"].is_object())
    map_deprecated_zero_keys(L, root["zero_optimization"]);
  register_flags(L, flags);
  if (flags.accelerate) {
    if (!root.contains("zero_optimization"))
      L.fail("zero_optimization", "missing; Accelerate refuses a DeepSpeed config without it: \"Please specify the "
                                  "ZeRO optimization config in the DeepSpeed config.\"");
    if (!root.contains("gradient_accumulation_steps")) {
      root["gradient_accumulation_steps"] = 1;
      L.warn("gradient_accumulation_steps: absent from the file; Accelerate's plugin sets it to 1");
    }
    // A Trainer script under `accelerate launch` (--training-args): the Trainer fills what
    // the plugin left, by its own rules (propagate_args_to_deepspeed).
    if (accelerate_fills(flags)) {
      // set_mixed_precision: a missing fp16 / bf16 section follows mixed_precision.
      for (const char* half : {"fp16", "bf16"})
        if (!root.contains(half) && !(std::string(half) == "bf16" && root.contains("bfloat16"))) root[half] = {{"enabled", "auto"}};
      register_accelerate(L, flags);
      check_accelerate(L, root, flags);
    }
  }
  Section top(L, &root, "");
  load_batch(L, top, flags, name, c);
  load_sections(L, top, c);
  warn_assumed_autos(L, c);
  use_trainer_schedule(root, flags, c);
  say_what_the_script_owns(root, flags, c);
  for (const auto& n : flags.training_args_notes) L.warn(n);
  return c;
}

c10::ScalarType comm_dtype_of(const DsConfig& cfg) {
  const std::string& t = cfg.communication_data_type;
  return t == "fp16" ? c10::ScalarType::Half : t == "bf16" ? c10::ScalarType::BFloat16 : c10::ScalarType::Float;
}

DsConfig load_job_config(const std::optional<std::string>& config_path, const ConfigFlags& flags) {
  const std::optional<AccelerateConfig>& a = flags.accelerate;
  if (!a || (config_path && a->file.empty())) {  // --launcher accelerate alone: --config is its file
    if (!config_path)
      throw ConfigError("--config: missing. Pass a DeepSpeed JSON config, e.g. --config configs/examples/stage0_fp32.json");
    return load_ds_config(*config_path, flags);
  }
  if (!a->deepspeed_config_file) {  // the plugin builds the config from the YAML's keys (or its defaults)
    if (config_path)
      throw ConfigError("--config " + *config_path + ": the accelerate config " + a->file + " has no "
                        "deepspeed_config_file, so Accelerate builds the DeepSpeed config from its deepspeed_config keys "
                        "and reads no JSON; drop --config, or add deepspeed_config_file: " + *config_path + " to it");
    return parse_ds_config(a->inline_ds_config(!flags.training_args_file.empty()).dump(),
                           a->file.empty() ? std::string("the DeepSpeed config Accelerate builds with its defaults")
                                           : "the DeepSpeed config Accelerate builds from " + a->file + "'s deepspeed_config",
                           flags);
  }
  if (config_path) {
    DsConfig c = load_ds_config(*config_path, flags);
    if (*config_path != *a->deepspeed_config_file)
      c.warnings.push_back("--config " + *config_path + " is used; the accelerate config " + a->file +
                           " names deepspeed_config_file " + *a->deepspeed_config_file);
    return c;
  }
  // The YAML's deepspeed_config_file, as Accelerate opens it (from the working directory),
  // else beside the YAML.
  std::string path = *a->deepspeed_config_file;
  const std::filesystem::path beside = std::filesystem::path(a->file).parent_path() / path;
  if (!std::filesystem::exists(path) && std::filesystem::path(path).is_relative() && std::filesystem::exists(beside))
    path = beside.string();
  return load_ds_config(path, flags);
}

DsConfig load_ds_config(const std::string& path, const ConfigFlags& flags) {
  return parse_ds_config(read_user_file("--config", path,
                                        "the path of a DeepSpeed JSON config file, e.g. " +
                                            (std::filesystem::is_directory(path) ? path + "/ds_config.json"
                                                                                 : std::string("configs/examples/stage0_fp32.json"))),
                         path, flags);
}

nlohmann::json DsConfig::resolved_json() const {
  json out = json::object();
  for (const auto& e : entries) {
    if (e.value.is_null()) continue;
    out[json::json_pointer("/" + [&] {
      std::string p = e.path;
      for (auto& ch : p) if (ch == '.') ch = '/';
      return p;
    }())] = e.value;
  }
  return out;
}

nlohmann::json DsConfig::effective_json() const {
  json list = json::array();
  for (const auto& e : entries) {
    json j = {{"key", e.path}, {"value", e.value}, {"source", source_name(e.source)}};
    if (!e.note.empty()) j["note"] = e.note;
    list.push_back(j);
  }
  return {{"file", file}, {"world_size", world_size}, {"resolved", resolved_json()}, {"entries", list},
          {"warnings", warnings}, {"assumed", assumed}};
}

}  // namespace zrepro
