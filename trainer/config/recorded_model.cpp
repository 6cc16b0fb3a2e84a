// See recorded_model.h.
#include "trainer/config/recorded_model.h"

#include "device/base/errors.h"

namespace zrepro {

using json = nlohmann::json;

namespace {

// The key of the recording, of the expected type, or a ConfigError naming both.
const json& key(const json& doc, const std::string& path, const char* k, json::value_t type, const char* what) {
  if (!doc.contains(k) || doc[k].type() != type)
    throw ConfigError("--model " + path + ": the recording has no \"" + k + "\" (" + what +
                      "); record it again with zrepro record-model");
  return doc[k];
}

std::vector<ParamSpec> params_of(const json& group, const std::string& path, const std::string& name) {
  std::vector<ParamSpec> out;
  if (!group.is_array()) throw ConfigError("--model " + path + ": groups." + name + " is not a list of parameters");
  for (const auto& p : group) {
    if (!p.is_object() || !p.contains("name") || !p["name"].is_string() || !p.contains("shape") ||
        !p["shape"].is_array())
      throw ConfigError("--model " + path + ": groups." + name + ": a parameter without a name and a shape");
    ParamSpec s{p["name"].get<std::string>(), {}};
    for (const auto& d : p["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0)
        throw ConfigError("--model " + path + ": groups." + name + "." + s.name + ": a dimension " + d.dump());
      s.shape.push_back(d.get<int64_t>());
    }
    out.push_back(s);
  }
  return out;
}

}  // namespace

bool RecordedModel::is_recording(const json& doc) {
  return doc.is_object() && doc.value("kind", json()) == "zrepro activation tape";
}

std::shared_ptr<const RecordedModel> RecordedModel::load(const std::string& path, const json& doc) {
  auto r = std::make_shared<RecordedModel>();
  r->path = path;
  r->model_type = key(doc, path, "model_type", json::value_t::string, "the model's type").get<std::string>();
  const json& v = key(doc, path, "versions", json::value_t::object, "torch and transformers");
  r->transformers = v.value("transformers", "?");
  r->torch = v.value("torch", "?");
  r->recorded = doc.value("recorded", "?");
  r->layers = key(doc, path, "layers", json::value_t::number_unsigned, "the decoder layers").get<int64_t>();
  r->seq = key(doc, path, "seq", json::value_t::number_unsigned, "the sequence length").get<int64_t>();
  r->dtype = key(doc, path, "dtype", json::value_t::string, "bf16, fp16 or fp32").get<std::string>();
  if (r->dtype != "bf16" && r->dtype != "fp16" && r->dtype != "fp32")
    throw ConfigError("--model " + path + ": dtype \"" + r->dtype + "\", expected bf16, fp16 or fp32");
  r->compute_bytes = r->dtype == "fp32" ? 4 : 2;
  r->attention = key(doc, path, "attention", json::value_t::string, "eager or sdpa").get<std::string>();
  r->tied = key(doc, path, "tied", json::value_t::boolean, "whether the head is the embedding").get<bool>();
  const json& g = key(doc, path, "groups", json::value_t::object, "the parameter groups");
  r->embed = params_of(g.value("embed", json()), path, "embed");
  r->block = params_of(g.value("block", json()), path, "block");
  r->head = params_of(g.value("head", json()), path, "head");
  for (const auto& [name, ac] : key(doc, path, "symbols", json::value_t::object, "the sizes").items()) {
    if (!ac.is_array() || ac.size() != 2 || !ac[0].is_number_integer() || !ac[1].is_number_integer())
      throw ConfigError("--model " + path + ": symbols." + name + " is not [a, c] (a + c x micro-batch bytes)");
    r->symbols[name] = {ac[0].get<int64_t>(), ac[1].get<int64_t>()};
  }
  for (const auto& [part, tape] : key(doc, path, "tapes", json::value_t::object, "the tapes").items()) {
    if (!tape.is_string()) throw ConfigError("--model " + path + ": tapes." + part + " is not a tape");
    r->tapes[part] = tape.get<std::string>();
  }
  for (const auto& p : doc.value("problems", json::array()))
    if (p.is_string()) r->problems.push_back(p.get<std::string>());
  r->hf_config = key(doc, path, "hf_config", json::value_t::object, "the config.json recorded");
  return r;
}

std::string RecordedModel::record_command(int64_t s, const std::string& d, const std::string& a) const {
  return "zrepro record-model --config CONFIG.json --seq " + std::to_string(s) + " --dtype " + d + " --attn " + a +
         " --out " + path;
}

std::string RecordedModel::source() const {
  return "transformers " + transformers + "'s " + model_type + " modules, recorded under FakeTensorMode on the CPU (" +
         "torch " + torch + ", " + recorded + ", " + path + ")";
}

}  // namespace zrepro
