// ShardLifecycle: the explicit state of one stage-3 ParamGroup's parameters, as pure
// bookkeeping (FSDP2's TrainingState / ShardedState): which gathered buffers exist,
// whether gathers or a host-shard upload are in flight, whether the persistent
// parameters are stale after an optimizer step. ParamGroup owns one and executes
// what its transitions return on tensors; the planner owns one per layer and adds
// the same transitions' bytes to its timeline. No tensors, no devices.
//
// [Note: stage-3 lifecycle]
//     replicated                       stages 0-2: always whole, no transitions
//     sharded --start()--> gathering --wait()--> gathered --reshard()--> sharded
// start() on a group that is gathered (or gathering) with fresh persistent
// parameters does nothing. With a host shard (offload_param) start() brings the
// shard up first; wait() then issues the gathers from its device copy and frees that
// copy. The persistent buffer (parameters under stage3_param_persistence_threshold)
// is allocated at the first start() and never freed; after each optimizer step it is
// stale and the next start() regathers it.
#pragma once

namespace zrepro {

enum class ShardState { replicated, sharded, gathering, gathered };

class ShardLifecycle {
 public:
  // sharded: stage 3 (else the group is replicated and never changes state).
  // host_shard: the shard lives in host memory (offload_param).
  ShardLifecycle(bool sharded, bool host_shard);

  // What unshard_start must do now.
  struct Start {
    bool alloc_dynamic = false;     // the dynamic gathered buffer (a comm buffer)
    bool alloc_persistent = false;  // the persistent gathered buffer, first time only (params)
    bool gather_dynamic = false, gather_persistent = false;  // which buffers the gathers fill
    bool upload = false;            // host shard: bring it up first; gathers follow in wait()
    bool any() const { return gather_dynamic || gather_persistent; }
  };
  Start start();
  // What unshard_wait must do: issue the gathers of an upload that landed (then free
  // the shard's device copy), and wait for the gathers.
  struct Wait {
    bool upload_landed = false;
    bool gather_dynamic = false, gather_persistent = false;
  };
  Wait wait();
  // After wait(): true when the dynamic buffer must be freed now.
  bool reshard();
  // An optimizer step changed the shard: persistent parameters must be regathered.
  void mark_stale() { stale_ = sharded_; }

  ShardState state() const;
  bool uploading() const { return uploading_; }  // host shard on its way up
  bool host_shard() const { return host_shard_; }

 private:
  bool sharded_, host_shard_;
  bool gathered_;              // the dynamic buffer holds (or is receiving) the parameters
  bool pending_ = false;       // gathers or an upload issued, not waited for
  bool uploading_ = false;
  bool stale_;                 // persistent parameters must be (re)gathered
  bool persist_allocated_ = false;
  bool upload_dyn_ = false, upload_per_ = false;
};

}  // namespace zrepro
