// GatherSchedule: ZeRO stage 3's gather / prefetch / release algorithm (DeepSpeed's
// PartitionedParameterCoordinator), run by the engine on its ParamGroups and by the
// planner on its ShardLifecycles through one interface, ShardOps: the decisions and
// the order of the start / wait / reshard calls live here only.
//   - The first micro-step records the order in which layers are fetched (the trace).
//   - Once it is complete, a fetch also prefetches the next layers of the trace,
//     bounded by stage3_prefetch_bucket_size and stage3_max_live_parameters, and by
//     BufferPolicy::max_param_uploads host shards on their way up (offload_param).
//   - A release keeps a layer gathered when the trace uses it again within
//     stage3_max_reuse_distance elements.
//   - The end of backward reshards everything and completes the trace.
#pragma once
#include <cstdint>
#include <vector>

namespace zrepro {

// The groups a GatherSchedule acts on (ZeroEngine's ParamGroups; the planner's
// byte-counting lifecycles).
class ShardOps {
 public:
  virtual ~ShardOps() = default;
  virtual void unshard_start(int layer) = 0;
  virtual void unshard_wait(int layer) = 0;
  virtual void reshard(int layer) = 0;
  virtual bool uploading(int layer) const = 0;   // host shard on its way up
  virtual bool host_shard(int layer) const = 0;  // offload_param: the shard lives in host memory
};

class GatherSchedule {
 public:
  struct Options {
    int64_t prefetch_bucket_size = 50000000;
    int64_t max_live_parameters = 1000000000;
    int64_t max_reuse_distance = 1000000000;
    int64_t max_uploads = 0;  // BufferPolicy::max_param_uploads (0: no bound)
  };
  // dynamic_numels: per layer, the gathered elements a reshard frees (0: all persistent).
  GatherSchedule(std::vector<int64_t> dynamic_numels, Options options);

  // --- the algorithm (what ZeroEngine::acquire / after_forward / end_backward run)
  // The model needs `layer` now: start it, start the admitted prefetches, wait for it.
  void fetch(int layer, ShardOps& groups);
  // After a use of `layer` (its forward, or its backward's gradients): reshard it
  // unless the trace reuses it soon.
  void release(int layer, ShardOps& groups);
  void begin_micro_step() { pos_ = 0; }
  // End of backward: every layer is resharded and the trace is complete.
  void end_backward(ShardOps& groups);
  // End of a forward without backward (an evaluation or generation forward): every layer
  // is resharded; the trace is kept as it stands (a forward follows the recorded order's
  // first half; one that did not has already begun recording again).
  void end_forward_only(ShardOps& groups);

  // --- the bookkeeping underneath, for tests
  // Marks `layer` gathered and returns the layers the trace would prefetch after it
  // (marked gathered too), in trace order.
  std::vector<int> prefetch_after(int layer);
  bool gathered(int layer) const { return gathered_[layer]; }
  int64_t live_numel() const;  // gathered dynamic elements
  const std::vector<int>& trace() const { return trace_; }

 private:
  bool keep_after_use(int layer) const;
  void reshard_all(ShardOps& groups);  // every layer resharded, the next micro-step from the trace's start

  std::vector<int64_t> numel_;
  Options o_;
  std::vector<bool> gathered_;
  std::vector<int> trace_;
  bool complete_ = false;
  size_t pos_ = 0;
};

}  // namespace zrepro
