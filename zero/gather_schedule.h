// GatherSchedule: the stage-3 decisions of DeepSpeed's PartitionedParameterCoordinator,
// as pure bookkeeping over layer indices and sizes. The first micro-step records the
// order in which layers are fetched (the trace); once it is complete, a fetch also
// prefetches the next layers of the trace (bounded by stage3_prefetch_bucket_size
// and stage3_max_live_parameters), and a release keeps a layer gathered when the
// trace uses it again within stage3_max_reuse_distance elements. The engine executes
// these decisions on its ParamGroups; the planner replays them to predict how many
// gathered bytes are live at each point.
#pragma once
#include <cstdint>
#include <vector>

namespace zrepro {

class GatherSchedule {
 public:
  struct Options {
    int64_t prefetch_bucket_size = 50000000;
    int64_t max_live_parameters = 1000000000;
    int64_t max_reuse_distance = 1000000000;
  };
  // dynamic_numels: per layer, the gathered elements a reshard frees (0: all persistent).
  GatherSchedule(std::vector<int64_t> dynamic_numels, Options options);

  // The model needs `layer` now. Marks it gathered and returns the layers to
  // prefetch after it (already marked gathered), in trace order.
  std::vector<int> fetch(int layer);
  // After a use of `layer`: true when it must be resharded now (and marks it so).
  bool release(int layer);
  void begin_micro_step() { pos_ = 0; }
  // End of backward: every layer is resharded and the trace is complete.
  void end_backward();

  bool gathered(int layer) const { return gathered_[layer]; }
  int64_t live_numel() const;  // gathered dynamic elements
  const std::vector<int>& trace() const { return trace_; }

 private:
  std::vector<int64_t> numel_;
  Options o_;
  std::vector<bool> gathered_;
  std::vector<int> trace_;
  bool complete_ = false;
  size_t pos_ = 0;
};

}  // namespace zrepro
