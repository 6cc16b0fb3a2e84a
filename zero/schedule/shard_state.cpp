// See shard_state.h.
#include "zero/schedule/shard_state.h"

namespace zrepro {

ShardLifecycle::ShardLifecycle(bool sharded, bool host_shard)
    : sharded_(sharded), host_shard_(host_shard && sharded), gathered_(!sharded), stale_(sharded) {}

ShardState ShardLifecycle::state() const {
  if (!sharded_) return ShardState::replicated;
  if (!gathered_) return ShardState::sharded;
  return pending_ ? ShardState::gathering : ShardState::gathered;
}

ShardLifecycle::Start ShardLifecycle::start() {
  Start s;
  if (!sharded_ || pending_) return s;
  s.gather_dynamic = !gathered_;
  s.gather_persistent = stale_;
  if (!s.any()) return s;
  s.alloc_dynamic = s.gather_dynamic;
  s.alloc_persistent = s.gather_persistent && !persist_allocated_;
  persist_allocated_ = true;
  gathered_ = true;
  stale_ = false;
  pending_ = true;
  if (host_shard_) {
    s.upload = uploading_ = true;
    upload_dyn_ = s.gather_dynamic, upload_per_ = s.gather_persistent;
  }
  return s;
}

ShardLifecycle::Wait ShardLifecycle::wait() {
  Wait w;
  if (uploading_) {
    w.upload_landed = true;
    w.gather_dynamic = upload_dyn_, w.gather_persistent = upload_per_;
    uploading_ = false;
  }
  pending_ = false;
  return w;
}

bool ShardLifecycle::reshard() {
  if (!sharded_ || !gathered_) return false;
  gathered_ = false;
  return true;
}

}  // namespace zrepro
