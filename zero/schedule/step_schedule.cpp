// See step_schedule.h.
#include "zero/schedule/step_schedule.h"

#include <algorithm>

namespace zrepro {

StepSchedule step_schedule(const StagePolicy& policy, const std::vector<int64_t>& owned_numels,
                           const std::vector<bool>& offloaded, int64_t sub_group_size) {
  StepSchedule s;
  const int L = static_cast<int>(owned_numels.size());
  s.group_of.assign(L, -1);
  s.grads_persist = policy.shard_params();
  if (!policy.shard_optimizer()) return s;  // stage 0: nothing flattened
  // Stages 1-2: one parameter group, one partition. Stage 3: sub-groups closed when they
  // reach sub_group_size (stage3.py _create_fp16_sub_groups; per parameter there, per layer
  // here: a sub-group may overshoot by up to one layer instead of one parameter).
  const int64_t limit = policy.shard_params() && sub_group_size > 0 ? sub_group_size : INT64_MAX;
  StepGroup open;
  auto close = [&] {
    if (open.layers.empty()) return;
    for (int l : open.layers) s.group_of[l] = static_cast<int>(s.groups.size());
    s.groups.push_back(open);
    open = StepGroup();
  };
  for (int l = 0; l < L; ++l) {
    if (offloaded[l]) continue;
    open.layers.push_back(l);
    open.offsets.push_back(open.numel);
    open.numel += owned_numels[l];
    if (open.numel >= limit) close();
  }
  close();
  for (const StepGroup& g : s.groups)
    s.init_transient_numel = policy.shard_params() ? std::max(s.init_transient_numel, g.numel)
                                                   : s.init_transient_numel + g.numel;
  return s;
}

}  // namespace zrepro
