// See deepspeed_config.h.
#include "trainer/bisect/deepspeed_config.h"

#include <functional>

namespace zrepro {

using json = nlohmann::json;

json TrainerOptimizer::to_json() const {
  return {{"type", cpu_adam ? "DeepSpeedCPUAdam" : "AdamW"}, {"lr", lr},    {"betas", {beta1, beta2}},
          {"eps", eps},                                      {"weight_decay", weight_decay}, {"lr_by_step", lr_by_step}};
}

TrainerOptimizer TrainerOptimizer::from_resolved(const json& user, const json& resolved) {
  // [Note: the optimizer the Trainer brings]
  TrainerOptimizer o;
  const json p = resolved.value("optimizer", json::object()).value("params", json::object());
  o.lr = p.value("lr", o.lr);
  if (p.contains("betas") && p["betas"].is_array() && p["betas"].size() == 2)
    o.beta1 = p["betas"][0].get<double>(), o.beta2 = p["betas"][1].get<double>();
  o.eps = p.value("eps", o.eps);
  o.weight_decay = p.value("weight_decay", o.weight_decay);
  const json offload = resolved.value("zero_optimization", json::object()).value("offload_optimizer", json::object());
  const bool offloaded = offload.value("device", std::string("none")) != "none";
  const json force = user.value("zero_force_ds_cpu_optimizer", json(true));
  o.cpu_adam = offloaded && !(force.is_boolean() && !force.get<bool>());
  return o;
}

json config_for_deepspeed(const json& user, const json& resolved, const std::vector<double>& lr_by_step) {
  json out = user;
  // [Note: the config each release gets]
  std::function<void(json&, const json&)> fill = [&](json& node, const json& res) {
    for (auto& [k, v] : node.items()) {
      const json r = res.is_object() && res.contains(k) ? res[k] : json();
      if (v.is_string() && v.get<std::string>() == "auto" && !r.is_null()) v = r;
      else if (v.is_object()) fill(v, r);
    }
  };
  fill(out, resolved);
  for (const char* k : {"train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size"})
    if (resolved.contains(k)) out[k] = resolved[k];
  if (!user.contains("optimizer")) {
    TrainerOptimizer o = TrainerOptimizer::from_resolved(user, resolved);
    if (!user.contains("scheduler")) o.lr_by_step = lr_by_step;
    out["zero_allow_untested_optimizer"] = true;  // as the Trainer sets it
    out[kTrainerOptimizerKey] = o.to_json();
  }
  return out;
}

}  // namespace zrepro
