// See deepspeed_config.h.
#include "trainer/bisect/deepspeed_config.h"

#include <functional>

namespace zrepro {

using json = nlohmann::json;

json config_for_deepspeed(const json& user, const json& resolved) {
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
  return out;
}

}  // namespace zrepro
