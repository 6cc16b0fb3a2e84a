// How one accumulated step turns token losses into the gradient (--loss-normalization),
// per Hugging Face Trainer release, and the weights one micro-step's loss gets from it.
//
// [Note: the loss of an accumulated step] With micro-batches of different numbers of
// scored tokens (padding, packing, dynamic lengths) two objectives differ:
// - mean: each micro-batch's loss is the mean over its own tokens, and DeepSpeed's
//   engine.backward divides it by gradient_accumulation_steps; ranks are averaged. A
//   short sequence weighs as much as a long one, so micro 8 x gas 1 and micro 1 x gas 8
//   of the same samples give different gradients. A plain DeepSpeed script does this, and
//   the Trainer did up to transformers 4.45.
// - token: the sum of token losses over the whole accumulated batch of every rank, divided
//   by its token count (the Trainer's num_items_in_batch, gathered across ranks when
//   average_tokens_across_devices): every split of the same samples gives the same
//   gradient. The Trainer multiplies by the world size (DeepSpeed averages ranks) and
//   tells DeepSpeed's backward not to divide by gas (scale_wrt_gas=False).
// token-per-rank (average_tokens_across_devices=False) divides by the rank's own tokens;
// token-scaled-twice is the 4.46-era bug under DeepSpeed: the token-normalised loss was
// divided by gas again in DeepSpeed's backward, so gradients (and the grad norm) came out
// gas times too small. Read in transformers 5.25's trainer.py (training_step,
// compute_loss, _get_num_items_in_batch); the release history is in kRows (the .cpp).
#pragma once
#include <cstdint>
#include <string>

namespace zrepro {

enum class LossNormalization { mean, token, token_per_rank, token_scaled_twice };

struct LossNormalizationRow {
  LossNormalization kind;
  const char* name;          // as --loss-normalization spells it
  const char* transformers;  // the Trainer releases and settings that behave so
};
const LossNormalizationRow& loss_normalization_row(LossNormalization n);
// Throws ConfigError naming --loss-normalization, the value and every accepted name.
LossNormalization parse_loss_normalization(const std::string& value);

// The step's divisors: each micro-step's loss is the sum over its scored tokens (sum) or
// their mean; backward runs on loss x (loss scale / grad_div); the step's reported loss is
// the micro-steps' losses summed and divided by report_div, which the engine then averages
// over ranks. Divisors, not factors: the mean normalisation's loss x (scale / gas) is
// DeepSpeed's, bit for bit.
struct MicroWeights {
  bool sum = false;
  double grad_div = 1, report_div = 1;
  // What the model's own forward divides the summed loss by (num_items_in_batch: the
  // global or the rank's token count; 1 for mean): a term the forward adds after that
  // division (a MoE router's aux loss) is weighted by it so it survives grad_div as in HF.
  double forward_div = 1;
};
// gas: the micro-steps the step has; run: those this rank runs (fewer under skip-forward);
// rank_tokens: the scored tokens of this rank's micro-batches of the step; global_tokens:
// of every rank's (used by token only).
MicroWeights micro_weights(LossNormalization n, int64_t gas, int64_t run, int world, int64_t rank_tokens,
                           int64_t global_tokens);

}  // namespace zrepro
