// What trainer/gpt.cpp allocates on the device, op by op: the planner's activation
// model. Each part of the model (embedding, block, head; forward, backward,
// recomputation) is a tape of allocations (+sym) and frees (-sym) written down from
// the tracking allocator's log of LibTorch 1.13 on the CPU, with sizes as symbols
// of the model's dimensions (n = B*S*h elements of the compute dtype, m = B*S*I,
// t = B*a*S*S, ...). Replaying the tapes gives the activation bytes at every point
// of a micro-step, transient peaks included, for any model size. A test replays
// them against the allocator on real runs (tests/trainer/planner/planner_test.cpp).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "trainer/config/model_spec.h"
#include "zero/zero_config.h"

namespace zrepro {

// Byte sizes of the tape symbols for one micro-batch.
using TapeSymbols = std::map<std::string, int64_t>;
TapeSymbols gpt_tape_symbols(const ModelSpec& m, int64_t micro_batch, Precision p, bool cpu_device);

enum class GptTape {
  embed_forward, block_forward, head_forward,                 // with autograd (saves for backward)
  block_forward_no_grad,                                      // checkpointed forward (saves only the input)
  head_backward, block_backward, block_backward_recomputed,   // param gradients included
  embed_backward,
  block_recompute_release,                                    // after a recomputed block's reduce
};
const char* gpt_tape(GptTape which, int64_t micro_batch, Precision p, bool cpu_device);

// Replays a tape: on(+bytes) for each allocation, on(-bytes) for each free. Tokens
// naming parameter gradients (W..., b..., hb) are reported through on_param instead,
// so the caller can charge them and free them at the layer's reduce.
void replay_tape(const char* tape, const TapeSymbols& sym, const std::function<void(int64_t)>& on_activation,
                 const std::function<void(int64_t)>& on_param);

}  // namespace zrepro
