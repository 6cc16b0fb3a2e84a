// The training loop of one rank: micro-steps over the rank's slice of each global
// batch, each micro-batch's loss weighted as the loss normalisation says (loss / gas by
// default) times the loss scale, backward, then the ZeRO optimizer step at the
// accumulation boundary. Records one StepRecord per optimizer step.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "trainer/checkpoint/zero_to_fp32.h"
#include "device/device_memory.h"
#include "trainer/config/job_spec.h"
#include "trainer/loop/trace.h"
#include "zero/comm/communicator.h"
#include "trainer/loop/loader.h"
#include "trainer/loop/loss_normalization.h"
#include "trainer/loop/rank_work.h"
#include "zero/engine.h"
#include "zero/peer_shadow.h"

namespace zrepro {

// --inject KIND:RANK[:ARG], faults for tests and scenarios:
//   inf-grad:R[:STEPS]    +inf into rank R's gradients on STEPS ("N", "N-", "N-M"; all)
//   gas-mismatch:R        rank R runs one more micro-step per step
//   skip-forward:R[:STEP] rank R skips micro-step 0 of step STEP (default 1)
//   straggler:R:MS        rank R sleeps MS milliseconds per micro-step
//   drop-accumulated-grads:R  with optimizer offload, rank R's host accumulator drops
//                         the gradients of micro-steps after the first (a historic bug)
//   loss-spike:R:FACTOR   rank R's gradients are FACTOR times what its data gives, every
//                         step (an outlier batch): fp16 overflows, bf16 does not
enum class InjectKind { inf_grad, gas_mismatch, skip_forward, straggler, drop_accumulated_grads, loss_spike };
const char* inject_kind_name(InjectKind k);  // "inf-grad", as --inject spells it
struct Injection {
  InjectKind kind = InjectKind::inf_grad;
  int rank = 0;
  int64_t from = 0, to = -1;  // inclusive step range; to = -1: no end
  double ms = 0;              // straggler delay
  double factor = 1;          // loss-spike: gradient multiplier
  bool covers(int64_t step) const { return step >= from && (to < 0 || step <= to); }
  // The rank's collective sequence or timing differs from its peers' (gas-mismatch,
  // skip-forward, straggler): only real processes show what that does.
  bool changes_collectives() const;
};
Injection parse_injection(const std::string& spec);  // throws ConfigError

// What the injections do to one rank's step, resolved once at its start
// ([Note: injections are resolved once per step], train.cpp).
struct StepFaults {
  int64_t gas = 1;          // micro-steps this rank runs: grad_accum, one more under gas-mismatch
  bool skip_first = false;  // skip-forward: micro-step 0 is not run
  double straggle_ms = 0;   // straggler: sleep per micro-step
  double grad_factor = 1;   // loss-spike: gradient multiplier
  bool inf_grad = false;    // inf-grad: +inf into the gradients before the step
  bool runs(int64_t t) const { return !(skip_first && t == 0); }
};
StepFaults faults_at(const std::vector<Injection>& inject, int rank, int64_t step, int64_t grad_accum);

// How one run of a job is carried out (what is trained: JobSpec).
struct TrainOptions {
  int64_t steps = 50;
  uint64_t seed = 1234;
  torch::Device device = torch::kCPU;
  Communicator* comm = nullptr;  // null: a single rank (SelfCommunicator)
  // What follows the engine's state (--peers stand-in: the peers' model, made with the
  // StandInCommunicator; [Note: one hook for what watches the engine]).
  EngineObserver* engine_observer = &no_engine_observer();
  std::vector<Injection> inject;
  bool verify_replicas = false;  // stages 0-2: check parameters are bit-identical on all ranks each step
  TraceRecorder* trace = nullptr;         // compute spans and memory counter, when set
  // Dynamic padding (batches padded to their longest sample instead of a fixed
  // length): step j uses a sequence length between dynamic_seq_min and the model's,
  // the same for every micro-step and rank of the step. 0: fixed length.
  int64_t dynamic_seq_min = 0;
  SeqLenDist seq_len_dist;  // --seq-len-dist: each sample's length, padded after it (data.h)
  // --loss-normalization: how the step's token losses make the gradient
  // ([Note: the loss of an accumulated step], loss_normalization.h).
  LossNormalization loss_normalization = LossNormalization::mean;
  LoaderOptions loader;  // the input pipeline (trainer/loop/loader.h)
  // --data-rule same: every rank draws rank 0's micro-batches (the data rule a virtual
  // run is compared under; distinct, the default, is an ordinary data-parallel split).
  bool same_data = false;
  // Evaluation and generation forwards between steps, on every rank or some
  // ([Note: a forward on some ranks], trainer/loop/rank_work.h).
  RankWork rank_work;
  // Asked at every step boundary, on every rank, after the step: a signal number (SIGINT,
  // SIGTERM) ends the run there with Interrupted; 0 goes on. The answer must be the same
  // on every rank (run.cpp agrees it across processes).
  std::function<int()> stop_signal;
  // This process's stop signal now, without agreement (0: none): an injected delay inside a
  // step (--inject straggler) ends at it, so a run held there is not deaf to SIGTERM until a
  // second signal kills it without a summary ([Note: stopping on a signal]).
  std::function<int()> signal_seen;
  // Checkpoints (trainer/checkpoint/ds_checkpoint.h): DeepSpeed's ZeRO checkpoint into
  // save_dir after every save_every-th step (0: none), and a resume from resume_dir's
  // latest tag, which continues at the step after it (steps counts from the start).
  std::string save_dir;
  int64_t save_every = 0;
  std::string resume_dir;
  int64_t host_memory = 0;  // --host-memory: rank 0's emulated host for the 16-bit consolidation (0: none)
};
// The sequence length of step `step` under dynamic padding (deterministic).
int64_t dynamic_seq_len(int64_t step, int64_t min_len, int64_t max_len);

struct StepRecord {
  int64_t step = 0;
  double loss = 0;       // the step's objective: the loss normalisation's mean over the global batch
  double grad_norm = 0;  // NaN when the step was skipped
  double loss_scale = 1;
  bool skipped = false;
  double lr = 0;
  double step_s = 0, forward_s = 0, backward_s = 0, optimizer_s = 0, data_wait_s = 0;
  double comm_wait_s = 0;  // time blocked waiting for collectives
  CommStats comm;          // collectives issued during this step (this rank)
  CopyStats copies;        // offload copies completed during this step (this rank)
  int replicas_identical = -1;  // 1 / 0 when verified, -1 when not checked
  MemorySnapshot memory;        // device memory after the step (peaks: since the run started)
  std::vector<PhaseWindow> windows;  // the step's phases ([Note: phase windows]); the first step's from init
};

struct TrainResult {
  std::vector<StepRecord> steps;
  CopyStats copies;                  // offload copies over the run (this rank)
  std::vector<CopyRecord> copy_log;  // the last copies, for the trace
  int64_t skipped_steps = 0;
  int64_t input_pinned_peak = 0;  // the loader's page-locked batches at most (pin_memory)
  EngineMemory memory;  // this rank's engine-owned bytes by category
  // --peers stand-in: whether the peers' model matched this rank's own state (peer_shadow.h).
  std::optional<StandInChecks> stand_in;
  // Full fp32 parameters after the last step, one tensor per layer (for checks).
  std::vector<torch::Tensor> final_params;
  // Checkpoints written (each after its step) and the one resumed from.
  struct Saved {
    int64_t step = 0;  // global_steps: the steps done when it was written
    std::string folder;
    double seconds = 0;
    // [Note: the 16-bit consolidation at save]: the whole 16-bit model rank 0 held on the
    // host for pytorch_model.bin (0 when the config does not ask for it, or another rank).
    int64_t consolidated_host_bytes = 0;
  };
  std::vector<Saved> saved;
  struct Resume {
    std::string folder, tag;
    int64_t step = 0;  // the steps done in the checkpoint: this run starts at the next
    bool universal = false;  // from ds_to_universal's layout (checkpoint.load_universal)
  };
  std::optional<Resume> resumed;
  // --zero-to-fp32: the consolidation after the run (rank 0).
  std::optional<Fp32Export> fp32_export;
};

// Runs until opts.steps optimizer steps are done. Throws NumericalError (loss scale
// at minimum, non-finite loss); result keeps the steps completed before that.
// on_step runs after every optimizer step (logging, metrics) with the scaler event.
using StepCallback = std::function<void(const StepRecord&, const std::string& scale_log)>;
// job.world_size must be the communicator's (ConfigError otherwise): the job the planner
// sees is the job that is trained ([Note: one job description], trainer/config/job_spec.h).
void train(const JobSpec& job, const TrainOptions& opts, TrainResult& result, const StepCallback& on_step = {},
           bool keep_final_params = false);

}  // namespace zrepro
