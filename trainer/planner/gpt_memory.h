// What trainer/model/gpt.cpp allocates on the device, op by op: the planner's
// activation model. Each part of the model (embedding, block, head; forward,
// backward, recomputation) is a tape of allocations (+sym) and frees (-sym) recorded
// from the tracking allocator's log of LibTorch on the CPU, with sizes as symbols of
// the model's dimensions (n = B*S*h elements of the compute dtype, m = B*S*I,
// t = B*a*S*S, kv = B*S*kv_heads*d, ...), one set per family, attention, tied head,
// compute dtype and micro-batch class, recorded by the build from its own LibTorch
// ([Note: tapes of this LibTorch], tape_recorder.h). Replaying the tapes gives the
// activation bytes at every point of a micro-step, transient peaks included, for
// any model size. tests/trainer/planner/tapes_test.cpp checks the recording;
// planner_test.cpp replays it against real runs.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "trainer/config/model_spec.h"
#include "trainer/planner/tape_recorder.h"
#include "zero/zero_config.h"

namespace zrepro {

// Bytes per element the model computes in (fp16 on the CPU-emulated device computes
// in fp32: trainer/model/gpt.cpp compute_dtype).
int64_t gpt_compute_elem(Precision p, bool cpu_device);
// Whether a tape symbol is a parameter gradient (W..., b..., hb): freed at its layer's reduce.
bool is_param_token(const std::string& symbol);
// Byte sizes of the tape symbols for one micro-batch.
using TapeSymbols = std::map<std::string, int64_t>;
TapeSymbols gpt_tape_symbols(const ModelSpec& m, int64_t micro_batch, Precision p, bool cpu_device);

// A MoE block's routing state, saved from its forward to its backward: the router's
// logits and fp32 probabilities, the top-k weights and indices, each token-expert pair's
// gathered input and weighted output, and with the router's aux loss the logits kept for
// it ([Note: MoE in the planner], gpt_memory.cpp). 0 for a dense model. e: bytes per
// compute element.
int64_t moe_dispatch_bytes(const ModelSpec& m, int64_t micro_batch, int64_t e);

enum class GptTape {
  embed_forward, block_forward, head_forward,                 // with autograd (saves for backward)
  block_forward_no_grad,                                      // checkpointed forward (saves only the input)
  // Param gradients included. A block's backward in two parts, the MLP's and then the
  // attention's ([Note: a block's backward in two parts], gpt.cpp).
  head_backward, block_backward_mlp, block_backward_attn, block_backward_recomputed_mlp,
  block_backward_recomputed_attn,
  embed_backward,
  block_recompute_release,                                    // after a recomputed block's reduce
  backward_tail,                                              // after the embedding's reduce
  between_blocks, between_checkpointed_blocks,                // after a block's forward, before the next layer's
  // A checkpointed block's forward again, in backward: zrepro's model runs the whole
  // forward (its block_forward tape); a recorded one's is inside its recomputed backward.
  block_recompute,
};
const char* gpt_tape_name(GptTape which);
// The tapes the planner replays: this build's recording (<build>/generated/gpt_tapes.json,
// or the file ZREPRO_TAPES_FILE names), read once. Throws std::runtime_error when it is
// missing, unreadable or of another LibTorch release, saying how to record it.
const TapeTable& planner_tapes();
// The tape of `which` for this model. Throws std::logic_error when the table has none.
// checkpointed: the job checkpoints activations; a recorded model's parts replayed once
// then have their own tapes ([Note: a recorded tape replays as the planner's], hf_record.py).
const char* gpt_tape(const ModelSpec& m, GptTape which, int64_t micro_batch, Precision p, bool cpu_device,
                     bool checkpointed = false);
// The table's key of that tape ("llama sdpa untied bf16 B1 block_forward",
// "gpt2 eager tied bf16 BN gelu_new softmax16 block_forward").
std::string gpt_tape_key(const ModelSpec& m, GptTape which, int64_t micro_batch, Precision p, bool cpu_device);
// The part of the key that says which of a family's ops the model runs ("" or
// "gelu_new softmax16 ", ...).
std::string gpt_tape_variant(const ModelSpec& m);

// What one block adds to a forward's activations per micro-batch: its forward's tape and
// what follows before the next block (the previous output freed where nothing saved it).
// Compared with the tensors Hugging Face's own decoder layer saves
// (tests/trainer/planner/hf_activations_test.cpp).
int64_t block_activation_bytes(const ModelSpec& m, int64_t micro_batch, Precision p, bool cpu_device);

// Replays a tape: on(+bytes) for each allocation, on(-bytes) for each free. Tokens
// naming parameter gradients (W..., b..., hb) are reported through on_param instead,
// so the caller can charge them and free them at the layer's reduce.
// experts > 0: a MoE block's MLP backward, whose experts run one after another: the
// tape's MLP part is replayed once per expert, each pass with its share of the weight
// gradients and saved activations and one expert's temporaries (m~) ([Note: MoE in the
// planner], gpt_memory.cpp).
void replay_tape(const char* tape, const TapeSymbols& sym, const std::function<void(int64_t)>& on_activation,
                 const std::function<void(int64_t)>& on_param, int experts = 0);

}  // namespace zrepro
