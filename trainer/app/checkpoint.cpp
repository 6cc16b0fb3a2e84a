// `zrepro checkpoint to-universal`: DeepSpeed's ds_to_universal.py conversion of a ZeRO
// checkpoint (trainer/checkpoint/universal.h), so a job resumes at another world size
// under "checkpoint": {"load_universal": true}.
// `zrepro checkpoint from-deepspeed`: a checkpoint real DeepSpeed wrote, rewritten into
// files LibTorch reads, so `--resume` continues it.
//
// [Note: a checkpoint DeepSpeed wrote] DeepSpeed's .pt files hold Python OrderedDicts (the
// module's state_dict with its `_metadata`, param_shapes, param_slice_mappings), which
// LibTorch's unpickler cannot rebuild (it reads OrderedDict as None, so its items have
// nowhere to go). Only Python's pickle can: from-deepspeed runs
// trainer/checkpoint/from_deepspeed.py with the user's Python torch ([Note: which Python
// is the user's]), which loads each file with torch.load and writes it again with plain
// dicts (DeepSpeed itself need not be installed), into OUT/.TAG.partial/, renamed to
// OUT/TAG once every file is written; then OUT/latest names TAG. The tensors and every
// value zrepro reads are DeepSpeed's, unchanged; the files still load in DeepSpeed (its
// zero_to_fp32 gives the same state dict: conformance/checkpoints.py). The script is the
// source tree's, or $ZREPRO_FROM_DEEPSPEED_SCRIPT.
#include <filesystem>
#include <iostream>

#include "trainer/app/cli.h"
#include "trainer/app/commands.h"
#include "trainer/checkpoint/ds_checkpoint.h"
#include "trainer/checkpoint/universal.h"
#include "trainer/config/user_file.h"
#include "trainer/runtime/subprocess.h"
#include "trainer/runtime/torch_python.h"

#ifndef ZREPRO_FROM_DEEPSPEED_SCRIPT
#define ZREPRO_FROM_DEEPSPEED_SCRIPT "trainer/checkpoint/from_deepspeed.py"
#endif

namespace zrepro {

namespace {

// Both subcommands need --input-folder and --output-folder: bad input naming the missing one.
void require_folders(const cxxopts::ParseResult& r, const std::string& sub, const std::string& usage) {
  for (const char* flag : {"input-folder", "output-folder"})
    if (!r.count(flag))
      throw ConfigError("zrepro checkpoint " + sub + ": --" + flag + " is missing (" + usage + ")");
}

int to_universal(int argc, char** argv) {
  cxxopts::Options o("zrepro checkpoint to-universal",
                     "Convert a ZeRO checkpoint (DIR/global_stepN) to DeepSpeed's universal layout, as "
                     "ds_to_universal.py does, and write DIR/latest_universal.");
  o.add_options("to-universal")
      ("input-folder", "the checkpoint's tag folder, DIR/global_stepN", cxxopts::value<std::string>())
      ("output-folder", "where the universal checkpoint goes, DIR/global_stepN_universal",
       cxxopts::value<std::string>())
      ("inject-missing-state", "as the script's --inject_missing_state: convert a stage 1-2 checkpoint whose model "
                               "states carry no universal_checkpoint_info (every model but Megatron-DeepSpeed's)")
      ("h,help", "show this help");
  return command_main(o, argc, argv, [&](const cxxopts::ParseResult& r) -> int {
    require_folders(r, "to-universal", "--input-folder DIR/global_stepN --output-folder DIR/global_stepN_universal");
    const std::string in = r["input-folder"].as<std::string>(), out = r["output-folder"].as<std::string>();
    std::cout << "[zrepro checkpoint] Converting DeepSpeed checkpoint in " << in << " to Universal checkpoint in "
              << out << std::endl;
    const UniversalConversion c = convert_to_universal(in, out, r.count("inject-missing-state") > 0);
    std::cout << "[zrepro checkpoint] ZeRO stage " << c.stage << ", saved on " << c.world << " ranks: "
              << c.parameters << " parameters (" << c.numel << " values) written to " << out
              << "/zero/; latest_universal names it\n[zrepro checkpoint] resume at any world size with "
              << "\"checkpoint\": {\"load_universal\": true} and --resume on the folder above it" << std::endl;
    return kExitOk;
  });
}

namespace fs = std::filesystem;

// The tag folder of --input-folder: the folder DeepSpeed saved into (its `latest` names
// the tag) or a tag folder itself (global_stepN, holding the .pt files).
std::pair<std::string, std::string> ds_tag_folder(const std::string& in) {
  std::string dir = fs::path(in).lexically_normal().string();
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (const auto tag = latest_tag(dir)) {
    if (!fs::is_directory(dir + "/" + *tag))
      throw ConfigError("--input-folder " + in + ": its latest names " + *tag + ", which is not a folder there "
                        "(an incomplete copy of the checkpoint?)");
    return {dir + "/" + *tag, *tag};
  }
  bool has_pt = false;
  std::error_code ec;
  if (fs::is_directory(dir, ec))
    for (const auto& e : fs::directory_iterator(dir, ec)) has_pt = has_pt || e.path().extension() == ".pt";
  if (!has_pt)
    throw ConfigError("--input-folder " + in + ": neither a checkpoint folder (no " + dir + "/latest) nor a tag "
                      "folder (no .pt files); pass the folder DeepSpeed's save_checkpoint wrote into, or its "
                      "global_stepN");
  return {dir, fs::path(dir).filename().string()};
}

int from_deepspeed(int argc, char** argv) {
  cxxopts::Options o("zrepro checkpoint from-deepspeed",
                     "Rewrite a checkpoint real DeepSpeed wrote into files LibTorch reads (its Python OrderedDicts "
                     "as dicts), so `zrepro run --resume OUT` continues it. Runs Python's torch; DeepSpeed itself "
                     "is not needed.");
  o.add_options("from-deepspeed")
      ("input-folder", "the folder DeepSpeed saved into (its latest names the tag), or a tag folder DIR/global_stepN",
       cxxopts::value<std::string>())
      ("output-folder", "where the rewritten checkpoint goes: OUT/TAG and OUT/latest; resume with --resume OUT",
       cxxopts::value<std::string>())
      ("python", kTorchPythonFlagHelp, cxxopts::value<std::string>())
      ("h,help", "show this help");
  return command_main(o, argc, argv, [&](const cxxopts::ParseResult& r) -> int {
    require_folders(r, "from-deepspeed", "--input-folder DS_SAVE_DIR --output-folder OUT");
    const auto [tag_folder, tag] = ds_tag_folder(r["input-folder"].as<std::string>());
    const std::string out = r["output-folder"].as<std::string>();
    if (fs::exists(out + "/" + tag))
      throw ConfigError("--output-folder " + out + ": it already holds " + tag + "; remove it or choose another folder");
    fs::create_directories(out);
    const std::string log = out + "/from_deepspeed.log";
    const TorchPython py = find_torch_python("--python", r.count("python") ? r["python"].as<std::string>() : "", log);
    std::cout << "[zrepro checkpoint] Rewriting DeepSpeed checkpoint " << tag_folder << " into " << out << "/" << tag
              << " with torch " << py.version << " (" << py.python << ", " << py.chosen << ")" << std::endl;
    const std::string partial = out + "/." + tag + ".partial";
    fs::remove_all(partial);
    const char* script = std::getenv("ZREPRO_FROM_DEEPSPEED_SCRIPT");
    const int rc = run_program({py.python, script && *script ? script : ZREPRO_FROM_DEEPSPEED_SCRIPT, tag_folder,
                                partial}, {{"PYTHONWARNINGS", "ignore"}}, log);
    if (rc != 0) {
      fs::remove_all(partial);
      const std::string why = "from_deepspeed.py exited " + std::to_string(rc) + " (" + log + "):\n" + tail_of(log, 6);
      if (rc == kExitBadInput) throw ConfigError("--input-folder " + tag_folder + ": " + why);
      throw IoError("--output-folder " + out + ": " + why);
    }
    fs::rename(partial, out + "/" + tag);
    write_file_atomic(out + "/latest", tag);
    int files = 0;
    for (const auto& e : fs::directory_iterator(out + "/" + tag)) files += e.path().extension() == ".pt";
    std::cout << "[zrepro checkpoint] " << files << " files written to " << out << "/" << tag << "; latest names "
              << tag << "\n[zrepro checkpoint] resume with --resume " << out << " (the model, stage, precision and "
              << "world size it was saved with)" << std::endl;
    return kExitOk;
  });
}

}  // namespace

int checkpoint_command(int argc, char** argv) {
  const std::string name = argc >= 2 ? argv[1] : "";
  if (name == "--help" || name == "-h") {
    std::cout << "zrepro checkpoint to-universal [options]: DeepSpeed's ds_to_universal.py conversion, to resume "
                 "at another world size.\nzrepro checkpoint from-deepspeed [options]: a checkpoint real DeepSpeed "
                 "wrote, rewritten so --resume reads it.\n`zrepro checkpoint ACTION --help` lists its options.\n";
    return kExitOk;
  }
  if (name == "to-universal") return to_universal(argc - 1, argv + 1);
  if (name == "from-deepspeed") return from_deepspeed(argc - 1, argv + 1);
  std::cerr << "[zrepro checkpoint] error: "
            << (name.empty() ? "no action named" : "unknown action \"" + name + "\"")
            << "; expected to-universal or from-deepspeed (zrepro checkpoint --help)\n";
  return kExitBadInput;
}

}  // namespace zrepro
