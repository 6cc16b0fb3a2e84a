// DeepSpeed's ZeRO checkpoint (engine.save_checkpoint / load_checkpoint, 0.19.8's layout)
// of zrepro's training state: DIR/latest naming the tag, DIR/global_step<N>/ with the
// model states (mp_rank_00_model_states.pt at stages 1-2, written by rank 0;
// zero_pp_rank_<r>_mp_rank_00_model_states.pt by every rank at stage 3) and each rank's
// optimizer states ([bf16_]zero_pp_rank_<r>_mp_rank_00_optim_states.pt): its DeepSpeed
// partition ([Note: two flat layouts], ds_layout.h) of the fp32 master and the Adam
// moments, the Adam step, the loss scaler. DeepSpeed's zero_to_fp32.py consolidates it and
// load_checkpoint resumes from it (docs/design/CONFORMANCE.md "Checkpoints"); the key sets
// and types are docs/lab/DEEPSPEED_CHECKPOINTS.md's, measured against real files.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "trainer/config/ds_config.h"
#include "trainer/config/model_spec.h"
#include "zero/engine.h"

namespace zrepro {

// What the loop keeps beside the engine (the model states' counters).
struct CheckpointMeta {
  int64_t global_steps = 0, skipped_steps = 0, global_samples = 0;
};

// Refuses (ConfigError naming the flag) what zrepro cannot checkpoint as DeepSpeed does:
// ZeRO stage 0 (DeepSpeed then saves a plain torch optimizer), stand-in peers.
void check_checkpointable(const DsConfig& cfg, const std::string& flag, bool stand_in_peers);

// Every rank, at a step boundary (the engine idle): writes DIR/global_step<N>/, then rank 0
// writes DIR/latest once every rank's files are complete. Returns the folder written.
// Throws IoError when a file cannot be written (nothing half-written under a final name).
std::string save_checkpoint(ZeroEngine& engine, const ModelSpec& spec, const DsConfig& cfg, const std::string& dir,
                            const CheckpointMeta& meta);

// [Note: the 16-bit consolidation at save] With ZeRO-3 and
// stage3_gather_16bit_weights_on_model_save the Hugging Face Trainer's save_model asks
// DeepSpeed for the whole 16-bit model (_zero3_consolidated_16bit_state_dict): every
// rank gathers one module at a time (GatheredParameters) and rank 0 copies it to host
// memory, so the device holds one more gathered module and rank 0's host the whole
// 16-bit model, written as pytorch_model.bin (save_16bit_model's default name). zrepro
// gathers one parameter group at a time (a block: DeepSpeed's modules are its linears,
// so zrepro's transient is larger). Every rank calls it; returns the bytes rank 0 held
// on the host (0 on the others, and when the config does not ask for it). host_capacity > 0
// (--host-memory): rank 0's host, emulated; the 16-bit model past it throws
// HostMemoryExhausted (phase "save") as the kernel's OOM killer ends rank 0 mid-gather.
int64_t save_16bit_model(ZeroEngine& engine, const ModelSpec& spec, const DsConfig& cfg, const std::string& dir,
                         int64_t host_capacity = 0);

// The tag DIR/latest names (DIR/latest_universal: ds_to_universal.py's), its whole first
// line without trailing space; nullopt when the file is absent.
std::optional<std::string> latest_tag(const std::string& dir, bool universal = false);

// Every rank, before the first step: loads the tag DIR/latest names into the engine.
// Throws ConfigError (naming --resume, the file and the fix) for a folder that is no
// DeepSpeed checkpoint, or one of another world size (DeepSpeed's message; a universal
// checkpoint loads at any), stage, precision or model.
// Under checkpoint.load_universal: the tag DIR/latest_universal names, in the universal
// layout (universal.h), at any world size.
struct Resumed {
  std::string tag, folder;
  CheckpointMeta meta;
  bool universal = false;
};
Resumed load_checkpoint(ZeroEngine& engine, const ModelSpec& spec, const DsConfig& cfg, const std::string& dir);

}  // namespace zrepro
