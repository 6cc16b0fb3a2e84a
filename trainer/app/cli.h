// The zrepro subcommands and the flags they share. Each subcommand returns the
// process exit code of the contract (docs/design/ARCHITECTURE.md, "Contracts").
#pragma once
#include <functional>
#include <optional>
#include <string>

#include <cxxopts.hpp>

#include "device/base/errors.h"
#include "trainer/config/training_args.h"
#include "trainer/config/ds_config.h"
#include "trainer/config/model_spec.h"
#include "trainer/planner/planner.h"

namespace zrepro {

int run_command(int argc, char** argv);
int config_command(int argc, char** argv);
int plan_command(int argc, char** argv);
int ab_command(int argc, char** argv);
int verify_command(int argc, char** argv);
int scenario_command(int argc, char** argv);
int diagnose_command(int argc, char** argv);
int doctor_command(int argc, char** argv);
int env_command(int argc, char** argv);
int check_command(int argc, char** argv);
int bisect_command(int argc, char** argv);
int checkpoint_command(int argc, char** argv);
int record_model_command(int argc, char** argv);
int bench_comm(int argc, char** argv);
int bench_adam(int argc, char** argv);
int bench_copy(int argc, char** argv);

// The flags of a planned run (config flags + --world-size, --device-memory,
// --activation-checkpointing, --device, --steps) and the JobSpec they give (plan, doctor).
void add_plan_flags(cxxopts::Options& o);
JobSpec plan_request_from(const cxxopts::ParseResult& r);

// Config-resolving flags (--config, --model, --micro-batch, --lr, ...).
void add_config_flags(cxxopts::Options& o);
ModelOverrides overrides_from(const cxxopts::ParseResult& r);
// --activation-checkpointing, or the --training-args file's gradient_checkpointing.
bool checkpointing_from(const cxxopts::ParseResult& r);
// The --training-args file, read (none without the flag).
std::optional<TrainingArgs> training_args_from(const cxxopts::ParseResult& r);
ModelSpec model_from(const cxxopts::ParseResult& r);
ConfigFlags flags_from(const cxxopts::ParseResult& r, const ModelSpec& m, int world_size, int64_t steps);
std::string require_config(const cxxopts::ParseResult& r);
// --steps (> 0) and --save-every (a step count >= 1, nullopt when not given), read alike by
// run and plan ([Note: plan and run refuse alike], trainer/config/job_spec.h).
int64_t steps_from(const cxxopts::ParseResult& r);
std::optional<int64_t> save_every_from(const cxxopts::ParseResult& r);
std::string require_config(const std::optional<std::string>& path);  // --config, or the error naming it
// [Note: a stray word is refused] A word that is no option and no value (a flag's value
// given twice, an option typed without --, a second LOG) is refused naming it, exit 2, never
// ignored. A command that reads such words itself (ab's, bisect's and verify's flags for
// the runs, diagnose's LOG, scenario's NAME, run's own check) says so with
// Words::the_command_reads_them.
enum class Words { refused, the_command_reads_them };
// Parses argv; cxxopts errors become ConfigError naming the flag (exit 2).
cxxopts::ParseResult parse(cxxopts::Options& o, int argc, char** argv, Words words = Words::refused);
// [Note: one command prologue] Every command's start: its options parsed from argv,
// --help printing them (exit 0), and a ConfigError from parsing or from `body` said as
// "[<program>] error: MESSAGE" (exit 2). body returns the command's exit code; other
// errors go to main's handlers (I/O: exit 12; interruption: 128 + signal).
// help_text, when given, rewrites --help's text (ab spells its --a-config as --a).
int command_main(cxxopts::Options& o, int argc, char** argv,
                 const std::function<int(const cxxopts::ParseResult&)>& body,
                 const std::function<std::string(std::string)>& help_text = nullptr, Words words = Words::refused);
std::string fmt(double v, int prec = 4);
// SIZE: plain bytes or a number with a unit: K/KiB/M/MiB/G/GiB/T/TiB (powers of 1024)
// or KB/MB/GB/TB (powers of 1000), e.g. 512MiB, 2GiB, 80GB. Throws ConfigError naming flag.
int64_t parse_size(const std::string& flag, const std::string& value);
// A device capacity: a preset (a100-40gb, h100-80gb, ...: the total capacity PyTorch
// reports on that GPU) or a SIZE. Throws ConfigError naming flag and the presets.
int64_t parse_device_memory(const std::string& flag, const std::string& value);
struct DevicePreset {
  const char* name;
  const char* gpu;
  double total_gib;  // torch.cuda.get_device_properties().total_memory, as its OOM message prints it
};
const std::vector<DevicePreset>& device_presets();

// Creates the --out folder (and its parents); ConfigError naming --out when it cannot.
void make_out_dir(const std::string& dir);
// [Note: a partial folder goes] A command that writes a folder of results (ab, verify,
// check's run) runs body with its folder made; when body cannot finish writing (IoError:
// a full disk, a quota, a file size limit) and the folder did not exist before this
// invocation, the folder goes with everything in it, and `who` says so: nothing
// half-written is left to be mistaken for a result. A folder that existed is left alone
// (its files are atomic, and others may be the user's). The IoError goes on (exit 12).
int with_out_dir(const std::string& dir, const std::string& who, const std::function<int()>& body);

// Runs f(); a ConfigError from a layer below (whose messages name values, never
// flags) is rethrown with the flag that gave the value in front.
template <class F>
auto for_flag(const std::string& flag, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const ConfigError& e) {
    throw ConfigError(flag + ": " + e.what());
  }
}

template <class T>
std::optional<T> opt(const cxxopts::ParseResult& r, const char* name) {
  return r.count(name) ? std::optional<T>(r[name].as<T>()) : std::nullopt;
}

}  // namespace zrepro
