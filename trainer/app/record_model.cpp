// `zrepro record-model`: the activation tape of a Hugging Face causal LM zrepro has no model of
// ([Note: a recorded architecture], trainer/config/recorded_model.h), recorded from
// transformers' own modules under FakeTensorMode by trainer/planner/hf_record.py in the user's
// Python ([Note: which Python is the user's]); `zrepro plan --model OUT` then plans it. The
// script is the source tree's, or $ZREPRO_HF_RECORD_SCRIPT.
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "trainer/app/cli.h"
#include "trainer/app/commands.h"
#include "trainer/config/user_file.h"
#include "trainer/runtime/subprocess.h"
#include "trainer/runtime/torch_python.h"

#ifndef ZREPRO_HF_RECORD_SCRIPT
#define ZREPRO_HF_RECORD_SCRIPT "trainer/planner/hf_record.py"
#endif

namespace zrepro {

namespace fs = std::filesystem;

int record_model_command(int argc, char** argv) {
  cxxopts::Options o("zrepro record-model",
                     "Record a Hugging Face causal LM's activation tape under FakeTensorMode (seconds, no memory), for "
                     "`zrepro plan --model OUT` of an architecture zrepro has no model of. Runs transformers' own "
                     "modules in your Python (torch and transformers installed).");
  o.add_options("record-model")
      ("config", "the model's Hugging Face config.json", cxxopts::value<std::string>())
      ("seq", "tokens per sequence, as the job trains", cxxopts::value<int64_t>())
      ("dtype", "bf16 | fp16 | fp32: what the job computes in", cxxopts::value<std::string>()->default_value("bf16"))
      ("attn", "eager | sdpa: the attention transformers runs", cxxopts::value<std::string>()->default_value("sdpa"))
      ("out", "the recording (JSON)", cxxopts::value<std::string>())
      ("python", std::string(kTorchPythonFlagHelp) + ", with transformers", cxxopts::value<std::string>())
      ("h,help", "show this help");
  return command_main(o, argc, argv, [&](const cxxopts::ParseResult& r) -> int {
    for (const char* flag : {"config", "seq", "out"})
      if (!r.count(flag))
        throw ConfigError(std::string("zrepro record-model: --") + flag + " is missing (--config config.json --seq N "
                          "--out model.tape.json)");
    const std::string config = r["config"].as<std::string>(), out = r["out"].as<std::string>();
    read_user_file("--config", config, "a Hugging Face config.json");
    const std::string dtype = r["dtype"].as<std::string>(), attn = r["attn"].as<std::string>();
    if (dtype != "bf16" && dtype != "fp16" && dtype != "fp32")
      throw ConfigError("--dtype: got \"" + dtype + "\", expected bf16, fp16 or fp32");
    if (attn != "eager" && attn != "sdpa") throw ConfigError("--attn: got \"" + attn + "\", expected eager or sdpa");
    const int64_t seq = r["seq"].as<int64_t>();
    if (seq < 1) throw ConfigError("--seq: got " + std::to_string(seq) + ", expected a positive number of tokens");
    if (fs::exists(out) && !fs::is_regular_file(out))
      throw ConfigError("--out " + out + ": exists and is not a file");
    const std::string log = out + ".log";
    const TorchPython py = find_torch_python("--python", r.count("python") ? r["python"].as<std::string>() : "", log);
    std::cout << "[zrepro record-model] " << config << ": transformers' own modules under FakeTensorMode with torch "
              << py.version << " (" << py.python << ", " << py.chosen << "), seq " << seq << ", " << dtype << ", "
              << attn << std::endl;
    const char* script = std::getenv("ZREPRO_HF_RECORD_SCRIPT");
    const int rc = run_program({py.python, script && *script ? script : ZREPRO_HF_RECORD_SCRIPT, "--config", config,
                                "--seq", std::to_string(seq), "--dtype", dtype, "--attn", attn, "--out", out},
                               {{"PYTHONWARNINGS", "ignore"}}, log);
    const std::string why = "hf_record.py exited " + std::to_string(rc) + " (" + log + "):\n" + tail_of(log, 8);
    // hf_record.py: 2 bad input, 5 no torch or transformers, 6 a model its hooks cannot cut.
    if (rc == kExitBadInput || rc == 5 || rc == 6) throw ConfigError("--config " + config + ": " + why);
    if (rc != 0) throw IoError("--out " + out + ": " + why);
    std::cout << tail_of(log, 2);
    std::error_code ec;
    fs::remove(log, ec);  // kept only when the recorder failed
    std::cout << "[zrepro record-model] plan it: zrepro plan --model " << out << " --config ds_config.json ..."
              << std::endl;
    return kExitOk;
  });
}

}  // namespace zrepro
