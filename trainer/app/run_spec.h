// RunSpec: the `zrepro run` command line as plain data. parse_run_spec reads every
// flag and checks each value on its own (exit 2, the flag named), before MPI,
// devices or files are touched, so it is unit-tested without a process
// (tests/trainer/app/run_spec_test.cpp). What needs the world size or the model
// (injection ranks, --dynamic-seq against the sequence length, --target-world-size,
// the DeepSpeed config itself) is checked by the run's set-up (run.cpp).
#pragma once
#include <nlohmann/json.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trainer/checkpoint/host_bytes.h"
#include "trainer/config/ds_config.h"
#include "trainer/config/job_spec.h"
#include "trainer/config/model_spec.h"
#include "trainer/loop/train.h"
#include "trainer/loop/virtual_ranks.h"

namespace zrepro {

struct RunSpec {
  bool help = false;
  std::string help_text;
  std::optional<int> ranks;  // --ranks: relaunch under mpirun
  bool oversubscribe = false;  // --oversubscribe: more --ranks than cores, asked for
  // --world-size N: one process stands in for the N ranks (trainer/loop/virtual_ranks.h);
  // --as-rank: the rank it reports as its own (--data-rule same: train.same_data).
  std::optional<int> world_size;
  int as_rank = 0;
  bool as_rank_most = false;  // --as-rank most: resolved at set-up (rank_holding_most)
  Peers peers = Peers::run;  // --peers: every virtual rank runs, or the subject alone
  PeerValuesMode peer_values = PeerValuesMode::model;  // --peer-values, with --peers stand-in

  // What to train: a config and a model, or a target to scale down from.
  std::optional<std::string> config_path;
  std::string model = "tiny";
  bool model_given = false;
  ModelOverrides model_overrides;
  ConfigFlags flags;  // world size, hidden size and total steps are filled at set-up
  std::optional<std::string> target_model;
  std::optional<int> target_world_size;
  std::optional<int64_t> target_device_memory;
  std::optional<double> scale;  // nullopt: auto

  // Training. [Note: flags parse into what the run is made of] The training loop's own
  // flags are read straight into its TrainOptions (--steps, --seed, --verify-replicas,
  // --loader-*, --eval-* and --generate, --loss-normalization, --data-rule, --inject,
  // --save-every / --save-dir / --resume, --host-memory, --dynamic-seq); set-up takes it whole and adds
  // what it resolves (the device, the communicator, the sequence lengths, the stop signal).
  TrainOptions train;
  // The job's own flags, read into the JobSpec the run is made of (set-up adds the model,
  // the config, the world and the device): --activation-checkpointing, --host-link-gbps,
  // --pageable-ratio, and whether it saves (--save-every) or resumes (--resume).
  JobSpec job;
  std::string device = "cpu";
  int threads = 1;
  bool print_config = false;
  bool export_inputs = false;  // --export-inputs: OUT/inputs for an outside trainer
  std::string seq_len_dist = "fixed";  // --seq-len-dist, checked against the model at set-up
  std::string loss_normalization_from;  // why, when not given: the Trainer's arguments
  std::vector<std::string> inject_specs;  // as given; train.inject parsed (ranks checked at set-up)

  // The device and the host link.
  std::string allocator = "tracking";  // tracking | caching | plain
  std::optional<int64_t> device_memory;
  std::optional<std::string> memory_log;
  std::optional<std::string> host_link_profile;
  double interconnect_gbps = 0;  // --interconnect-gbps: modelled collective bus bandwidth (0: none)
  std::optional<int64_t> memlock_limit;  // --memlock-limit: RLIMIT_MEMLOCK to run under, without CAP_IPC_LOCK

  // Failures and outputs.
  double comm_timeout = 1800;
  int64_t log_every = 10;
  std::string out_dir;  // empty: no files
  // --zero-to-fp32 DIR after the run (trainer/checkpoint/zero_to_fp32.h): the script's shards
  // of --zero-to-fp32-shard, or the API's one state dict; --host-memory (train.host_memory)
  // caps the host.
  std::string zero_to_fp32_dir;
  bool zero_to_fp32_api = false;
  int64_t zero_to_fp32_shard = kZeroToFp32DefaultShardBytes;  // the script's --max_shard_size
};

// Fills spec from argv; throws ConfigError naming the flag. The fields read before
// the error stay filled (out_dir first, so a failure summary can still be written).
void parse_run_spec(int argc, char** argv, RunSpec& spec);
// summary.json's inputs: the run's arguments (argv[1..], --out DIR left out: where the
// outputs go is not what was asked), the config file's path and its JSON as written (null
// when it cannot be read: the run's own set-up reports that). `zrepro check` stores them in
// a baseline and reruns with them (trainer/app/check.cpp).
nlohmann::json run_inputs(const RunSpec& spec, int argc, char** argv);
// Several processes started by mpirun: the same job on one node is --ranks N.
void add_ranks_input(nlohmann::json& inputs, int world);

}  // namespace zrepro
