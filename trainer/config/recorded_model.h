// A recorded architecture: a Hugging Face causal LM zrepro has no model of, planned from the
// activation tape trainer/planner/hf_record.py records from transformers' own modules under
// FakeTensorMode in the user's Python (`zrepro record-model`).
//
// [Note: a recorded architecture] zrepro trains and plans its own families (gpt2, llama and
// the llama-like types, the two MoE types). Another model_type (gemma2, phi3, qwen3, ...) is
// planned, never trained: its parameter groups (the embedding, one decoder layer, the head)
// and the allocations and frees of every part of a micro-step (each size a + c x micro-batch
// bytes) are read from the recording, made at one sequence length, dtype and attention; a plan
// with others is refused with the command that records them. What such a plan rests on is
// said in it: the recording's transformers and torch, and that it was recorded on the CPU
// under FakeTensorMode (sdpa's CPU kernel keeps what the CUDA ones keep in shape: the output
// and the log-sum-exp). Mixtures of experts are not recorded (which experts run depends on the
// router's values, which a FakeTensor does not have).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "zero/schedule/param_spec.h"

namespace zrepro {

struct RecordedModel {
  std::string path;         // the recording file
  std::string model_type;   // "qwen3"
  std::string transformers, torch;  // the versions it was recorded with
  std::string recorded;     // its date
  int64_t layers = 0;       // the model's decoder layers
  int64_t seq = 0;
  int64_t compute_bytes = 2;  // bytes per element of its dtype
  std::string dtype;        // bf16 | fp16 | fp32
  std::string attention;    // eager | sdpa
  bool tied = false;
  std::vector<ParamSpec> embed, block, head;  // the parameter groups' parameters
  std::map<std::string, std::pair<int64_t, int64_t>> symbols;  // name -> (a, c): a + c x micro-batch bytes
  std::map<std::string, std::string> tapes;  // part (gpt_tape_name) -> tape
  std::vector<std::string> problems;         // what the recorder could not make exact
  nlohmann::json hf_config;                  // the config.json it was recorded from

  // Throws ConfigError naming the file and the key when it is not a recording.
  static std::shared_ptr<const RecordedModel> load(const std::string& path, const nlohmann::json& doc);
  // True when doc is one (its "kind").
  static bool is_recording(const nlohmann::json& doc);
  // "python3 trainer/planner/hf_record.py --config C --seq S --dtype D --attn A --out F" for other settings.
  std::string record_command(int64_t seq, const std::string& dtype, const std::string& attention) const;
  // "transformers 5.25.0's qwen3 modules, recorded under FakeTensorMode on the CPU (torch 2.15.0, FILE)"
  std::string source() const;
};

}  // namespace zrepro
