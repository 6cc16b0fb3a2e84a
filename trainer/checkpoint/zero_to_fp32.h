// DeepSpeed's zero_to_fp32 (deepspeed/utils/zero_to_fp32.py, 0.19.8) on a ZeRO checkpoint:
// the whole model's fp32 weights consolidated from every rank's optimizer file, written as
// a PyTorch state dict, with the host memory DeepSpeed holds while doing it.
//
// [Note: zero_to_fp32's host memory] DeepSpeed >= 0.16.0 maps the optimizer files
// (torch.load mmap=True): the fp32 partitions it reads are file-backed pages, which the
// kernel reclaims under pressure instead of killing the process. What can run the host
// out of memory is the anonymous memory it allocates:
//   - the API, get_fp32_state_dict_from_zero_checkpoint (load_state_dict_from_zero_checkpoint,
//     what scripts call to export a model): every parameter merged into one fp32 state
//     dict, 4 bytes per parameter at once;
//   - the script, zero_to_fp32.py CHECKPOINT OUT --max_shard_size S
//     (convert_zero_checkpoint_to_fp32_state_dict, lazy_mode): at ZeRO-3 one shard merged,
//     written and freed at a time (Hugging Face's split_torch_state_dict_into_shards:
//     tensors in order, a new shard when the next one would pass S, a tensor larger than S
//     alone). At stages 1-2 it concatenates every rank's partition into one fp32 flat first
//     ("XXX: memory usage doubles here (zero2)"), whatever the mode and S: the whole fp32
//     model, and every shard file then holds that whole flat's storage (torch.save of a view;
//     measured: five 475 MB files for GPT-2 at S = 100MB). zrepro writes each shard's own
//     tensors.
// Releases before 0.16.0 read the files whole (no mmap, no lazy mode: twice the fp32
// model and more); zrepro models 0.16.0 and later. Measured against DeepSpeed 0.19.8's
// RssAnon in conformance/zero_to_fp32_memory.py (docs/design/CONFORMANCE.md).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace zrepro {

struct Fp32Export {
  bool api = false;                 // the API (one state dict) rather than the script (shards)
  int64_t max_shard_bytes = 0;      // the script's --max_shard_size
  std::string tag;                  // the checkpoint consolidated (DIR/latest's)
  std::vector<std::string> files;   // written under the output folder, in order
  int64_t parameters = 0, numel = 0;
  int64_t peak_anon_bytes = 0;      // DeepSpeed's anonymous host bytes at the peak (modelled)
  int64_t mapped_bytes = 0;         // the fp32 partitions it maps from the files (file-backed)
};

// Consolidates the tag save_dir/latest names into out_dir: pytorch_model.bin, or the
// script's shards pytorch_model-0000i-of-0000n.bin and pytorch_model.bin.index.json.
// host_capacity > 0: the emulated host memory (--host-memory); when DeepSpeed's anonymous
// bytes would pass it, throws HostMemoryExhausted (phase "consolidate") before writing on.
// Throws ConfigError for a folder that is no ZeRO checkpoint, IoError when a file cannot
// be written (each file atomic).
Fp32Export zero_to_fp32(const std::string& save_dir, const std::string& out_dir, bool api, int64_t max_shard_bytes,
                        int64_t host_capacity);

// [Note: the consolidation's folder] The weights go into a folder that holds nothing but
// what an earlier consolidation wrote: a new folder, or one whose files are all listed in
// its kFp32Manifest (written by zero_to_fp32 beside the weights). Those files are removed
// before the new ones are written, so no stale pytorch_model.bin is left beside new
// shards, and a file the manifest does not list (a user's pytorch_model.bin, their
// config.json) is never replaced: ConfigError naming it, checked at set-up before the run
// trains and again before writing.
constexpr const char* kFp32Manifest = "zero_to_fp32_files.json";
// Returns the files an earlier consolidation listed there (to be replaced whole).
std::vector<std::string> check_fp32_folder(const std::string& out_dir);

}  // namespace zrepro
