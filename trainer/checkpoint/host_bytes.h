// What a checkpoint costs the host, decided once: the run charges it against the emulated
// host (--host-memory) as it saves or consolidates, and the plan reports it beside the
// device timeline. Pure arithmetic on sizes: no tensors, no files.
//   - a save under ZeRO-3 with stage3_gather_16bit_weights_on_model_save: rank 0 holds the
//     whole 16-bit model ([Note: the 16-bit consolidation at save], ds_checkpoint.h);
//   - DeepSpeed's zero_to_fp32 consolidating a checkpoint offline: its anonymous bytes
//     ([Note: zero_to_fp32's host memory], zero_to_fp32.h), the shards as Hugging Face's
//     split_torch_state_dict_into_shards cuts them.
#pragma once
#include <cstdint>
#include <vector>

#include "trainer/config/model_spec.h"
#include "zero/schedule/stage_policy.h"
#include "zero/zero_config.h"

namespace zrepro {

// zero_to_fp32.py's default --max_shard_size, as the flag writes it and in bytes: the one
// place it is written.
constexpr const char* kZeroToFp32DefaultShardSize = "5GB";
constexpr int64_t kZeroToFp32DefaultShardBytes = 5000000000;

// DeepSpeed gathers the 16-bit model to rank 0's host at every save: ZeRO-3 with
// stage3_gather_16bit_weights_on_model_save.
inline bool gathers_16bit_model_at_save(const ZeroConfig& z) {
  return stage_policy(z.stage).shard_params() && z.stage3_gather_16bit_weights_on_model_save;
}
// Rank 0's host bytes holding the 16-bit model at a save (elem: the model's bytes per
// parameter), or 0 where nothing is gathered.
int64_t save_16bit_host_bytes(const ZeroConfig& z, int64_t params, int64_t elem);

// One output file of zero_to_fp32.py: its tensors (indices into the sizes given) and bytes.
struct Fp32Shard {
  std::vector<size_t> tensors;
  int64_t bytes = 0;
};
// Hugging Face's split_torch_state_dict_into_shards as zero_to_fp32.py calls it: tensors in
// order, a new shard when the next one would pass max_shard_bytes, one larger than that
// alone (max_shard_bytes 0: one shard, the API's whole state dict).
std::vector<Fp32Shard> split_fp32_shards(const std::vector<int64_t>& fp32_bytes, int64_t max_shard_bytes);

// DeepSpeed's anonymous bytes while one shard is merged: stages 1-2 concatenate every
// rank's fp32 partition into one flat first, whatever the mode (whole_flat_bytes, what the
// optimizer files hold); at stage 3 the API holds the whole model, the script the shard.
int64_t zero_to_fp32_anon_bytes(int stage, bool api, int64_t whole_flat_bytes, int64_t model_bytes,
                                int64_t shard_bytes);

// The peaks of a consolidation of tensors of these fp32 sizes (state-dict order): by the
// API, by the script at max_shard_bytes, and the mapped fp32 partitions beside them.
struct Fp32ConsolidationBytes {
  int64_t api = 0, script = 0, mapped = 0;
};
Fp32ConsolidationBytes zero_to_fp32_host_bytes(const std::vector<int64_t>& fp32_bytes, int stage,
                                               int64_t whole_flat_bytes, int64_t max_shard_bytes);
// The same for a model's checkpoint: its tensors in checkpoint order (ds_layout.h), the fp32
// partitions taken without padding (at stage 3 each parameter's partitions hold fewer than
// world-size elements more). The plan's and the scale-down's one computation.
Fp32ConsolidationBytes zero_to_fp32_model_bytes(const ModelSpec& m, int stage, int64_t max_shard_bytes);

}  // namespace zrepro
