// See loss_normalization.h.
#include "trainer/loop/loss_normalization.h"

#include <algorithm>

#include "device/base/errors.h"

namespace zrepro {

namespace {
// transformers' history: num_items_in_batch arrived in 4.46 (October 2024); PR #35808
// (January 2025) stopped DeepSpeed's backward from dividing that loss by gas again; PR
// #39395 (July 2025) made average_tokens_across_devices default to True.
constexpr LossNormalizationRow kRows[] = {
    {LossNormalization::mean, "mean",
     "transformers <= 4.45, a model or compute_loss without num_items_in_batch, and a plain DeepSpeed loop "
     "(engine.backward of each micro-batch's mean loss)"},
    {LossNormalization::token, "token",
     "transformers with num_items_in_batch after PR #35808 and average_tokens_across_devices=True (its default "
     "since PR #39395; 5.x)"},
    {LossNormalization::token_per_rank, "token-per-rank",
     "transformers after PR #35808 with average_tokens_across_devices=False (the default before PR #39395)"},
    {LossNormalization::token_scaled_twice, "token-scaled-twice",
     "transformers 4.46 until PR #35808 under DeepSpeed: token-normalised per rank, then divided by gas again in "
     "DeepSpeed's backward"},
};
}  // namespace

const LossNormalizationRow& loss_normalization_row(LossNormalization n) {
  for (const auto& r : kRows)
    if (r.kind == n) return r;
  return kRows[0];
}

LossNormalization parse_loss_normalization(const std::string& value) {
  std::string names;
  for (const auto& r : kRows) {
    if (value == r.name) return r.kind;
    names += std::string(names.empty() ? "" : ", ") + r.name;
  }
  throw ConfigError("--loss-normalization: got \"" + value + "\", expected one of " + names +
                    " (mean: each micro-batch's mean, as transformers <= 4.45; token: over the tokens of the whole "
                    "accumulated batch, as the Trainer since 4.46)");
}

MicroWeights micro_weights(LossNormalization n, int64_t gas, int64_t run, int world, int64_t rank_tokens,
                           int64_t global_tokens) {
  const double g = static_cast<double>(std::max<int64_t>(gas, 1));
  const double nr = static_cast<double>(std::max<int64_t>(rank_tokens, 1));
  switch (n) {
    case LossNormalization::mean: return {false, g, static_cast<double>(std::max<int64_t>(run, 1)), 1};
    case LossNormalization::token: {
      // sum / N x world: the engine's average over ranks makes it the global token mean.
      const double N = static_cast<double>(std::max<int64_t>(global_tokens, 1));
      const double d = N / static_cast<double>(world);
      return {true, d, d, N};
    }
    case LossNormalization::token_per_rank: return {true, nr, nr, nr};
    case LossNormalization::token_scaled_twice: return {true, nr * g, nr, nr};
  }
  return {};
}

}  // namespace zrepro
