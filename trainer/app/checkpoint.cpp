// `zrepro checkpoint to-universal`: DeepSpeed's ds_to_universal.py conversion of a ZeRO
// checkpoint (trainer/checkpoint/universal.h), so a job resumes at another world size
// under "checkpoint": {"load_universal": true}.
#include <iostream>

#include "trainer/app/cli.h"
#include "trainer/app/commands.h"
#include "trainer/checkpoint/universal.h"

namespace zrepro {

namespace {

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
    for (const char* flag : {"input-folder", "output-folder"})
      if (!r.count(flag))
        throw ConfigError(std::string("zrepro checkpoint to-universal: --") + flag + " is missing (" +
                          "--input-folder DIR/global_stepN --output-folder DIR/global_stepN_universal)");
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

}  // namespace

int checkpoint_command(int argc, char** argv) {
  const std::string name = argc >= 2 ? argv[1] : "";
  if (name == "--help" || name == "-h") {
    std::cout << "zrepro checkpoint to-universal [options]: " << find_command("checkpoint")->summary
              << ".\n`zrepro checkpoint to-universal --help` lists its options.\n";
    return kExitOk;
  }
  if (name == "to-universal") return to_universal(argc - 1, argv + 1);
  std::cerr << "[zrepro checkpoint] error: "
            << (name.empty() ? "no action named" : "unknown action \"" + name + "\"")
            << "; expected to-universal (zrepro checkpoint to-universal --help)\n";
  return kExitBadInput;
}

}  // namespace zrepro
