// trainer/config/ds_versions.h and version_diff.h: the version table is well formed, and
// every entry of configs/deepspeed_versions.json is exercised: resolved at its release and
// at the release before it, the config differs the way the entry says (a default's value,
// an added key ignored before, a removed key refused since, a strict block, an alias, a
// changed rule). An entry this test cannot exercise fails it, so the table cannot claim
// what the loader does not do.
#include "trainer/config/ds_versions.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "device/base/errors.h"
#include "trainer/config/ds_config.h"
#include "trainer/config/version_diff.h"

namespace {

using json = nlohmann::json;
using namespace zrepro;

DsConfig parse_at(const json& cfg, const std::string& v) {
  ConfigFlags f;
  f.deepspeed_version = v;
  return parse_ds_config(cfg.dump(), "test.json", f);
}

json value_of(const DsConfig& c, const std::string& key) {
  for (const auto& e : c.entries)
    if (e.path == key) return e.value;
  return json("<absent>");
}

std::string error_at(const json& cfg, const std::string& v) {
  try {
    parse_at(cfg, v);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

bool warned(const DsConfig& c, const std::string& text) {
  for (const auto& w : c.warnings)
    if (w.find(text) != std::string::npos) return true;
  return false;
}

std::string previous(const std::string& v) {
  std::string prev;
  for (const auto& r : deepspeed_releases())
    if (compare_versions(r, v) < 0) prev = r;
  return prev;  // "" when v is the oldest known
}

// A config where every key the table names is read: stage 3 with both offloads, bf16.
const json kBase = json::parse(R"({"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": true},
  "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}}})");

json with(const std::string& dotted, const json& value, json cfg = kBase) {
  std::string p = "/" + dotted;
  for (auto& ch : p) ch = ch == '.' ? '/' : ch;
  cfg[json::json_pointer(p)] = value;
  return cfg;
}

void exercise_default(const VersionChange& c) {
  EXPECT_EQ(value_of(parse_at(kBase, c.since), c.key), c.after) << c.key;
  const std::string prev = previous(c.since);
  ASSERT_FALSE(prev.empty()) << c.key;
  if (!c.before.is_null()) {
    EXPECT_EQ(value_of(parse_at(kBase, prev), c.key), c.before) << c.key << " at " << prev;
  } else {
    EXPECT_TRUE(value_of(parse_at(kBase, prev), c.key).is_null()) << c.key;
  }
}

void exercise_added(const VersionChange& c) {
  if (c.after.is_null()) {  // a block (zero_optimization.leaf_module): one list of it set
    const json cfg = with(c.key + ".classes", json::array({"MixtralSparseMoeBlock"}));
    const DsConfig now = parse_at(cfg, c.since), before = parse_at(cfg, previous(c.since));
    EXPECT_EQ(value_of(now, c.key + ".classes"), json::array({"MixtralSparseMoeBlock"})) << c.key;
    EXPECT_FALSE(warned(now, "is not a key of DeepSpeed")) << c.key;
    EXPECT_TRUE(warned(before, c.key + " is not a key of DeepSpeed " + previous(c.since))) << c.key;
    EXPECT_EQ(value_of(before, c.key + ".classes"), json::array()) << c.key << ": ignored before " << c.since;
    return;
  }
  // The other added keys are booleans; no offload (managed_gradient_accumulation false with
  // offload is a rule of its own, the behaviour entry).
  const json cfg = with(c.key, !c.after.get<bool>(), {{"train_micro_batch_size_per_gpu", 2}, {"bf16", {{"enabled", true}}}});
  const DsConfig now = parse_at(cfg, c.since), before = parse_at(cfg, previous(c.since));
  EXPECT_EQ(value_of(now, c.key), !c.after.get<bool>()) << c.key;
  EXPECT_FALSE(warned(now, "is not a key of DeepSpeed")) << c.key;
  EXPECT_TRUE(warned(before, c.key + " is not a key of DeepSpeed " + previous(c.since))) << c.key;
}

void exercise_removed(const VersionChange& c) {
  const json cfg = with(c.key, json::object());
  EXPECT_NE(error_at(cfg, c.since).find(c.message), std::string::npos) << c.key << ": " << error_at(cfg, c.since);
  EXPECT_EQ(error_at(cfg, previous(c.since)), "") << c.key << " is accepted before " << c.since;
}

void exercise_strict(const VersionChange& c) {
  const std::string prev = previous(c.since);
  if (c.key == "fp16" || c.key == "bf16") {
    json cfg = with(c.key + ".not_a_key", 1);
    if (c.key == "fp16") cfg = with("bf16.enabled", false, with("fp16.enabled", true, cfg));
    EXPECT_NE(error_at(cfg, c.since).find("Extra inputs are not permitted"), std::string::npos) << error_at(cfg, c.since);
    EXPECT_EQ(error_at(cfg, prev), "");
    EXPECT_TRUE(warned(parse_at(cfg, prev), c.key + ".not_a_key"));
  } else if (c.key == "fp16.min_loss_scale") {
    const json cfg = with("fp16.min_loss_scale", 0.5, with("bf16.enabled", false, with("fp16.enabled", true)));
    EXPECT_NE(error_at(cfg, c.since).find(c.message), std::string::npos) << error_at(cfg, c.since);
    EXPECT_EQ(value_of(parse_at(cfg, prev), "fp16.min_loss_scale"), 0.5);
  } else if (c.key == "zero_optimization.reduce_bucket_size") {
    // zrepro cannot run an empty bucket at any release; the message says whose rule it is.
    const json cfg = with(c.key, 0);
    EXPECT_NE(error_at(cfg, c.since).find(c.message), std::string::npos) << error_at(cfg, c.since);
    EXPECT_NE(error_at(cfg, prev).find("accepts 0"), std::string::npos) << error_at(cfg, prev);
  } else {
    FAIL() << "strict entry " << c.key << " is not exercised";
  }
}

void exercise_alias(const VersionChange& c) {
  const std::string name = c.key.substr(c.key.find('.') + 1);
  const std::string v = newest_deepspeed_version();
  json zero = {{"stage", 3}};
  std::string canonical;
  json expect;
  if (name == "cpu_offload") {
    zero[name] = true, canonical = "zero_optimization.offload_optimizer.device", expect = "cpu";
  } else if (name == "cpu_offload_param") {
    zero[name] = true, canonical = "zero_optimization.offload_param.device", expect = "cpu";
  } else if (name == "stage3_gather_fp16_weights_on_model_save" || name == "gather_16bit_weights_on_model_save") {
    zero[name] = true, canonical = "zero_optimization.stage3_gather_16bit_weights_on_model_save", expect = true;
  } else {
    zero[name] = 12345, canonical = "zero_optimization.stage3_" + name, expect = 12345;
  }
  const DsConfig cfg = parse_at({{"train_micro_batch_size_per_gpu", 2}, {"zero_optimization", zero}}, v);
  EXPECT_EQ(value_of(cfg, canonical), expect) << c.key << " -> " << canonical;
}

void exercise_behaviour(const VersionChange& c) {
  const std::string prev = previous(c.since);
  if (c.key == "managed_gradient_accumulation") {
    const json cfg = with("managed_gradient_accumulation", false);
    EXPECT_EQ(error_at(cfg, c.since), "");
    EXPECT_NE(error_at(cfg, prev).find("managed_gradient_accumulation"), std::string::npos);
  } else if (c.key == "fp16.initial_scale_power" || c.key == "fp16.hysteresis") {
    const json cfg = {{"train_micro_batch_size_per_gpu", 2}, {"fp16", {{"enabled", true}}}, {"zero_optimization", {{"stage", 2}}}};
    const int then = c.key == "fp16.initial_scale_power" ? 32 : 1, now = c.key == "fp16.initial_scale_power" ? 16 : 2;
    EXPECT_EQ(value_of(parse_at(cfg, prev), c.key), then) << c.key << " at " << prev;
    EXPECT_EQ(value_of(parse_at(cfg, c.since), c.key), now) << c.key << " at " << c.since;
    json stage0 = cfg;
    stage0["zero_optimization"]["stage"] = 0;
    EXPECT_EQ(value_of(parse_at(stage0, prev), c.key), now) << "only under ZeRO";
  } else if (c.key == "zero_optimization.stage") {
    // The ZeRO-2 regression of 0.17.6-0.18.2 ([Note: a release's own behaviour]): at stage 2
    // without optimizer offload those releases keep only the boundary micro-step's gradients,
    // and the run trains so and says so (with accumulation, where it matters).
    auto quirk = [](const DsConfig& d) { return d.release.boundary_micro_step_grads_only; };
    auto warned = [](const DsConfig& d) {
      for (const auto& w : d.warnings)
        if (w.find("last micro-step's gradients") != std::string::npos && w.find("#7718") != std::string::npos) return true;
      return false;
    };
    const json z2 = {{"train_micro_batch_size_per_gpu", 2}, {"gradient_accumulation_steps", 2},
                     {"zero_optimization", {{"stage", 2}}}};
    json z3 = z2, z1 = z2, offload = z2, gas1 = z2;
    z3["zero_optimization"]["stage"] = 3;
    z1["zero_optimization"]["stage"] = 1;
    offload["zero_optimization"]["offload_optimizer"] = {{"device", "cpu"}};
    gas1["gradient_accumulation_steps"] = 1;
    const bool regression = c.since == "0.17.6";
    EXPECT_EQ(quirk(parse_at(z2, c.since)), regression) << c.since;
    EXPECT_EQ(warned(parse_at(z2, c.since)), regression) << c.since;
    EXPECT_EQ(quirk(parse_at(z2, prev)), !regression) << prev;  // 0.17.5: before it; 0.18.2: still in it
    EXPECT_FALSE(quirk(parse_at(z3, "0.18.0"))) << "stage 3 is unaffected";
    EXPECT_FALSE(quirk(parse_at(z1, "0.18.0"))) << "stage 1 reduces once, at the boundary";
    EXPECT_FALSE(quirk(parse_at(offload, "0.18.0"))) << "the optimizer offload's path accumulates on the host";
    EXPECT_TRUE(quirk(parse_at(gas1, "0.18.0")));
    EXPECT_FALSE(warned(parse_at(gas1, "0.18.0"))) << "one micro-step: nothing lost, nothing to say";
  } else {
    FAIL() << "behaviour entry " << c.key << " is not exercised";
  }
}

TEST(DeepSpeedVersions, TableIsWellFormed) {
  const auto& r = deepspeed_releases();
  ASSERT_GE(r.size(), 10u);
  for (size_t i = 1; i < r.size(); ++i) EXPECT_LT(compare_versions(r[i - 1], r[i]), 0) << r[i];
  EXPECT_EQ(compare_versions("0.19.10", "0.19.9"), 1);
  EXPECT_EQ(newest_deepspeed_version(), r.back());
  for (const auto& c : version_changes()) {
    EXPECT_FALSE(c.pr.empty()) << c.key << ": each entry cites its PR or commit (or says why not)";
    EXPECT_FALSE(c.effect.empty()) << c.key;
    EXPECT_FALSE(c.evidence.empty()) << c.key;
  }
  EXPECT_THROW(check_deepspeed_version("--deepspeed-version", "0.13.0"), ConfigError);
  EXPECT_EQ(check_deepspeed_version("--deepspeed-version", "0.19.5"), "0.19.5");
}

TEST(DeepSpeedVersions, EveryEntryIsExercised) {
  int n = 0;
  for (const auto& c : version_changes()) {
    SCOPED_TRACE(c.kind + " " + c.key + " since " + c.since);
    if (c.kind == "default") exercise_default(c);
    else if (c.kind == "added") exercise_added(c);
    else if (c.kind == "removed") exercise_removed(c);
    else if (c.kind == "strict") exercise_strict(c);
    else if (c.kind == "alias") exercise_alias(c);
    else if (c.kind == "behaviour") exercise_behaviour(c);
    else ADD_FAILURE() << "unknown kind " << c.kind;
    ++n;
  }
  EXPECT_GE(n, 30);
}

TEST(DeepSpeedVersions, DefaultsAreLabelledWithTheirRelease) {
  const DsConfig c = parse_at(kBase, "0.19.5");
  for (const auto& e : c.entries)
    if (e.path == "zero_optimization.offload_optimizer.pin_memory") {
      EXPECT_EQ(e.note, "since DeepSpeed 0.19.5 (deepspeedai/DeepSpeed#8207)");
    }
  EXPECT_EQ(parse_at(kBase, "0.19.4").deepspeed_version, "0.19.4");
  EXPECT_EQ(parse_ds_config(kBase.dump(), "t.json", {}).deepspeed_version, newest_deepspeed_version());
}

TEST(DeepSpeedVersions, DiffNamesWhatChangedAndWhy) {
  const std::string path = ::testing::TempDir() + "/zrepro_version_diff.json";
  std::ofstream(path) << kBase.dump();
  const json d = diff_config_versions(path, {}, "0.19.4", "0.19.5");
  ASSERT_EQ(d["differences"].size(), 2u) << d.dump(2);  // the two pin_memory defaults
  for (const auto& x : d["differences"]) {
    EXPECT_NE(x["key"].get<std::string>().find("pin_memory"), std::string::npos);
    EXPECT_EQ(x["a"]["value"], false);
    EXPECT_EQ(x["b"]["value"], true);
    EXPECT_EQ(x["changes"][0]["since"], "0.19.5");
  }
  EXPECT_TRUE(diff_config_versions(path, {}, "0.19.5", "0.19.5")["differences"].empty());
  std::ofstream(path) << with("amp", {{"enabled", true}}).dump();
  const json r = diff_config_versions(path, {}, "0.19.7", "0.19.8");
  EXPECT_TRUE(r["refused"]["a"].is_null());
  EXPECT_NE(r["refused"]["b"].get<std::string>().find("Apex AMP"), std::string::npos);
  EXPECT_EQ(r["refusal_changes"][0]["key"], "amp");
  EXPECT_NE(format_version_diff(r).find("REFUSES"), std::string::npos);
}

// Issue 62: an engine change no value shows (0.17.6's ZeRO-2 gradients, #7718) is printed for
// a config it applies to (LLaMA-Factory's ds_z2_config.json), not "no effective value differs"
// alone; a ZeRO-3 config, which #7718 does not touch, gets none.
TEST(DeepSpeedVersions, DiffPrintsTheEngineChangesThatApplyToTheConfig) {
  const std::string lf = std::string(ZREPRO_SOURCE_DIR) + "/conformance/configs/llamafactory_ds_z2_config.json";
  const json d = diff_config_versions(lf, {}, "0.17.5", "0.17.6");
  ASSERT_FALSE(d["behaviour"].empty()) << d.dump(2);
  EXPECT_EQ(d["behaviour"][0]["since"], "0.17.6");
  EXPECT_NE(d["behaviour"][0]["pr"].get<std::string>().find("#7718"), std::string::npos);
  EXPECT_NE(format_version_diff(d).find("what the engine does differently for this config"), std::string::npos);
  const std::string z3 = ::testing::TempDir() + "/zrepro_version_diff_z3.json";
  std::ofstream(z3) << with("zero_optimization", {{"stage", 3}}).dump();
  EXPECT_TRUE(diff_config_versions(z3, {}, "0.17.5", "0.17.6")["behaviour"].empty());
}

}  // namespace

namespace {

// The real-world configs of conformance/configs/ (Hugging Face, LLaMA-Factory, axolotl,
// FastChat, DeepSpeedExamples) with their "auto"s filled as the conformance record filled
// them for real DeepSpeed: across the 0.19.5 upgrade exactly those whose offload blocks
// leave pin_memory unset change it, and across 0.19.3 exactly those that leave
// gradient_clipping unset change it. The one DeepSpeed 0.19.8 refuses (reduce_bucket_size
// 0, refused since 0.19.6) is refused here too.
TEST(DeepSpeedVersions, RealWorldConfigsDifferExactlyWhereTheyRelyOnAChangedDefault) {
  std::ifstream rec_in(std::string(ZREPRO_SOURCE_DIR).append("/conformance/results/configs.json"));
  ASSERT_TRUE(rec_in);
  const json rec = json::parse(rec_in);
  ConfigFlags f;
  f.world_size = 1;
  int n = 0;
  for (const auto& row : rec["rows"]) {
    const std::string name = row["config"];
    SCOPED_TRACE(name);
    const json& raw = row["filled"];
    const std::string path = ::testing::TempDir() + "/zrepro_rw_" + name;
    std::ofstream(path) << raw.dump();
    const json zero = raw.value("zero_optimization", json::object());
    bool pin_unset = false;
    for (const char* k : {"offload_optimizer"})
      if (zero.contains(k) && zero[k].value("device", "none") != "none" && !zero[k].contains("pin_memory")) pin_unset = true;
    auto keys = [](const json& d) {
      std::set<std::string> out;
      for (const auto& x : d["differences"]) out.insert(x["key"].get<std::string>());
      return out;
    };
    if (!row["deepspeed"]["accepted"].get<bool>()) {
      EXPECT_FALSE(diff_config_versions(path, f, "0.19.5", "0.19.8")["refused"]["b"].is_null());
      continue;
    }
    const json upgrade = diff_config_versions(path, f, "0.19.4", "0.19.5");
    ASSERT_TRUE(upgrade["refused"]["a"].is_null() && upgrade["refused"]["b"].is_null()) << upgrade["refused"].dump();
    EXPECT_EQ(keys(upgrade).count("zero_optimization.offload_optimizer.pin_memory") > 0, pin_unset) << upgrade.dump(1);
    const auto clip = keys(diff_config_versions(path, f, "0.19.2", "0.19.3"));
    EXPECT_EQ(clip.count("gradient_clipping") > 0, !raw.contains("gradient_clipping"));
    ++n;
  }
  EXPECT_GE(n, 10);
}

}  // namespace
