// See inputs_export.h.
#include "trainer/report/inputs_export.h"

#include <filesystem>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "trainer/model/data.h"
#include "trainer/model/gpt.h"
#include "trainer/report/report.h"

namespace zrepro {

std::string npy_bytes(const torch::Tensor& t) {
  torch::Tensor c = t.contiguous().cpu();
  std::string descr;
  if (c.scalar_type() == torch::kFloat) descr = "<f4";
  else if (c.scalar_type() == torch::kLong) descr = "<i8";
  else throw std::invalid_argument("npy_bytes: only float32 and int64 tensors, got " + std::string(c.dtype().name()));
  std::string shape = "(";
  for (int64_t d : c.sizes()) shape += std::to_string(d) + ", ";
  if (c.dim() > 1) shape.erase(shape.size() - 2);
  else if (c.dim() == 1) shape.erase(shape.size() - 1);
  shape += ")";
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Magic (6) + version (2) + header length (2) + header, padded with spaces to a
  // multiple of 64 and ended by a newline.
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::string out = std::string("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>((header.size() >> 8) & 0xff);
  out += header;
  out.append(static_cast<const char*>(c.data_ptr()), static_cast<size_t>(c.numel() * c.element_size()));
  return out;
}

void export_inputs(const std::string& dir, const ModelSpec& spec, const InputsGeometry& g) {
  std::filesystem::create_directories(dir);
  nlohmann::json layers = nlohmann::json::array();
  int64_t offset = 0;
  for (const auto& layer : spec.layer_shapes()) {
    nlohmann::json params = nlohmann::json::array();
    for (const auto& p : layer.params) {
      int64_t n = 1;
      for (int64_t d : p.shape) n *= d;
      params.push_back({{"name", p.name}, {"shape", p.shape}, {"offset", offset}, {"numel", n}});
      offset += n;
    }
    layers.push_back({{"name", layer.name}, {"params", params}});
  }
  const int64_t global = g.micro * g.grad_accum * g.world;
  nlohmann::json model = spec.to_json();
  // The ops conformance/ds_model.py's toy computes (the exact GELU, the fp32 eager softmax)
  // go unsaid, so inputs exported before these fields existed keep their key in a bisect
  // cache (trainer/bisect/release_env.h inputs_key); other ops are named, and ds_model.py
  // refuses what it does not compute.
  if (model.value("activation", "gelu") == "gelu") model.erase("activation");
  if (model.value("softmax", "fp32") == "fp32") model.erase("softmax");
  // What Hugging Face's LlamaConfig needs beyond the dimensions.
  if (spec.family == Family::llama)
    model.update({{"norm_eps", spec.norm_eps}, {"rope_theta", spec.rope_theta}, {"qkv_bias", spec.qkv_bias},
                  {"o_bias", spec.o_bias}, {"mlp_bias", spec.mlp_bias}});
  nlohmann::json layout = {
      {"model", model},
      {"layers", layers},
      {"params", offset},
      {"seed", g.seed},
      {"batch", {{"steps", g.steps}, {"micro", g.micro}, {"grad_accum", g.grad_accum}, {"world", g.world},
                 {"global", global}}},
      {"seq_len_dist", g.lengths.spec()},
      {"loss_normalization", g.loss_normalization},
      {"sample_order", "step s, micro-step t, rank r takes tokens[s*global + (t*world + r)*micro : +micro]; "
                       "inputs = [:, :-1] (-100 read as token 0), targets = [:, 1:] (-100 not scored)"}};
  torch::Tensor init = torch::cat(gpt_init(spec, g.seed));
  torch::Tensor tokens = MarkovData(spec.vocab, spec.seq, g.seed, g.lengths).samples(0, g.steps * global);
  write_file_atomic(dir + "/init.npy", npy_bytes(init));
  write_file_atomic(dir + "/tokens.npy", npy_bytes(tokens));
  write_file_atomic(dir + "/layout.json", layout.dump(2) + "\n");
}

void export_final_params(const std::string& dir, const std::vector<torch::Tensor>& layers) {
  write_file_atomic(dir + "/final.npy", npy_bytes(torch::cat(layers).to(torch::kCPU, torch::kFloat).contiguous()));
}

}  // namespace zrepro
