// See host_bytes.h.
#include "trainer/checkpoint/host_bytes.h"
#include "trainer/checkpoint/ds_layout.h"

#include <algorithm>
#include <numeric>

namespace zrepro {

int64_t save_16bit_host_bytes(const ZeroConfig& z, int64_t params, int64_t elem) {
  return gathers_16bit_model_at_save(z) ? params * elem : 0;
}

std::vector<Fp32Shard> split_fp32_shards(const std::vector<int64_t>& bytes, int64_t max_shard_bytes) {
  std::vector<Fp32Shard> out;
  Fp32Shard cur;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (max_shard_bytes > 0 && bytes[i] > max_shard_bytes) {
      out.push_back({{i}, bytes[i]});
      continue;
    }
    if (max_shard_bytes > 0 && !cur.tensors.empty() && cur.bytes + bytes[i] > max_shard_bytes) {
      out.push_back(cur);
      cur = Fp32Shard();
    }
    cur.tensors.push_back(i);
    cur.bytes += bytes[i];
  }
  if (!cur.tensors.empty()) out.push_back(cur);
  return out;
}

int64_t zero_to_fp32_anon_bytes(int stage, bool api, int64_t whole_flat_bytes, int64_t model_bytes,
                                int64_t shard_bytes) {
  return !stage_policy(stage).shard_params() ? whole_flat_bytes : api ? model_bytes : shard_bytes;
}

Fp32ConsolidationBytes zero_to_fp32_host_bytes(const std::vector<int64_t>& fp32_bytes, int stage,
                                               int64_t whole_flat_bytes, int64_t max_shard_bytes) {
  const int64_t model = std::accumulate(fp32_bytes.begin(), fp32_bytes.end(), int64_t{0});
  Fp32ConsolidationBytes b;
  b.api = zero_to_fp32_anon_bytes(stage, true, whole_flat_bytes, model, model);
  for (const Fp32Shard& s : split_fp32_shards(fp32_bytes, max_shard_bytes))
    b.script = std::max(b.script, zero_to_fp32_anon_bytes(stage, false, whole_flat_bytes, model, s.bytes));
  b.mapped = whole_flat_bytes;
  return b;
}

Fp32ConsolidationBytes zero_to_fp32_model_bytes(const ModelSpec& m, int stage, int64_t max_shard_bytes) {
  std::vector<int64_t> fp32;
  for (const CheckpointParam& p : checkpoint_params(m)) fp32.push_back(4 * p.numel);
  return zero_to_fp32_host_bytes(fp32, stage, 4 * m.param_count(), max_shard_bytes);
}

}  // namespace zrepro
