// See param_group.h. Stage-3 storage is released and re-materialised by swapping
// the data pointer of the buffer's StorageImpl (FSDP's storage resize): views that
// autograd saved for backward share that StorageImpl and see the regathered data.
#include "zero/param_group.h"

#include "device/device_memory.h"
#include "offload/host_memory.h"

namespace zrepro {

namespace {

std::vector<int64_t> numels_of(const std::vector<ParamSpec>& specs) {
  std::vector<int64_t> out;
  for (const auto& s : specs) out.push_back(s.numel());
  return out;
}

}  // namespace

ParamGroup::ParamGroup(int index, std::string name, std::vector<ParamSpec> specs, const ShardingConfig& cfg)
    : index_(index),
      name_(std::move(name)),
      specs_(std::move(specs)),
      cfg_(cfg),
      layout_(layer_layout(numels_of(specs_), cfg.policy, cfg.world_size, cfg.persistence_threshold,
                           cfg.host_shard != nullptr)),
      life_(cfg.policy.shard_params(), cfg.host_shard != nullptr) {
  auto opts = torch::TensorOptions().dtype(cfg_.dtype).device(cfg_.device);
  DeviceMemory::CategoryScope tag(MemCategory::params);
  if (!cfg_.policy.shard_params()) {
    flat_tensor_ = torch::zeros({layout_.flat.padded_numel}, opts);
    return;
  }
  shard_ = cfg_.host_shard ? HostMemory::instance().empty(layout_.shard.shard_numel, cfg_.dtype, cfg_.host_pinned,
                                                         "offload_param shard " + name_)
                           : torch::zeros({layout_.shard.shard_numel}, opts);
  flat_tensor_ = torch::empty({layout_.dynamic_numel}, opts);
  persist_ = torch::empty({layout_.persist_numel}, opts);
  free_storage(flat_tensor_);
  free_storage(persist_);
}

std::vector<torch::Tensor> ParamGroup::params() const {
  std::vector<torch::Tensor> views;
  const bool sharded = cfg_.policy.shard_params();
  for (size_t i = 0; i < specs_.size(); ++i) {
    const torch::Tensor& buf = !sharded                  ? flat_tensor_
                               : layout_.shard_is_gathered ? shard_
                               : layout_.persistent[i]     ? persist_
                                                           : flat_tensor_;
    const int64_t off = sharded ? layout_.gathered_offsets[i] : layout_.natural_offsets[i];
    views.push_back(buf.narrow(0, off, specs_[i].numel()).view(specs_[i].shape));
  }
  return views;
}

void ParamGroup::free_storage(torch::Tensor& t) {
  TORCH_CHECK(pending_.empty(), "ParamGroup ", name_, ": storage freed with ", pending_.size(),
              " gather(s) pending ([Note: a gather outlives its group])");
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(at::DataPtr(nullptr, t.device()));
  s->set_nbytes(0);
}

void ParamGroup::alloc_storage(torch::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  const size_t nbytes = static_cast<size_t>(t.numel()) * t.element_size();
  if (s->nbytes() == nbytes) return;
  s->set_data_ptr_noswap(s->allocator()->allocate(nbytes));
  s->set_nbytes(nbytes);
}

void ParamGroup::load(const torch::Tensor& values) {
  torch::NoGradGuard no_grad;
  TORCH_CHECK(values.numel() == layout_.numel, "ParamGroup::load: ", name_, " expects ", layout_.numel, " values");
  if (!cfg_.policy.shard_params()) {
    flat_tensor_.narrow(0, 0, layout_.numel).copy_(values);
    return;
  }
  // This rank's slice of each padded parameter.
  for (size_t i = 0; i < specs_.size(); ++i) {
    const auto& p = layout_.shard.params[i];
    const int64_t lo = cfg_.rank * p.slice_numel, hi = std::min(lo + p.slice_numel, p.numel);
    if (hi > lo)
      shard_.narrow(0, p.shard_offset, hi - lo).copy_(values.narrow(0, layout_.natural_offsets[i] + lo, hi - lo));
  }
}

void ParamGroup::unshard_start(Communicator& comm) {
  const ShardLifecycle::Start s = life_.start();
  if (!s.any()) return;
  {
    // Gathered layers are transient (comm buffers); persistent ones stay (params).
    DeviceMemory::CategoryScope tag(MemCategory::comm_buffers);
    if (s.alloc_dynamic) alloc_storage(flat_tensor_);
  }
  {
    DeviceMemory::CategoryScope tag(MemCategory::params);
    if (s.alloc_persistent) alloc_storage(persist_);
  }
  if (s.upload) {
    DeviceMemory::CategoryScope tag(MemCategory::comm_buffers);
    device_shard_ =
        torch::empty({layout_.shard.shard_numel}, torch::TensorOptions().dtype(cfg_.dtype).device(cfg_.device));
    upload_ = cfg_.host_shard->copy(device_shard_, shard_, CopyDir::h2d, cfg_.host_pinned, {}, "shard " + name_);
    upload_comm_ = &comm;
    return;
  }
  submit_gathers(comm, shard_, s.gather_dynamic, s.gather_persistent);
}

void ParamGroup::submit_gathers(Communicator& comm, const torch::Tensor& shard, bool dyn, bool per) {
  if (layout_.shard_is_gathered) return;  // one rank: the parameters are views of the shard
  // One all-gather per parameter, straight into its padded slot: rank-major
  // slices of a padded parameter are the parameter itself.
  for (size_t i = 0; i < specs_.size(); ++i) {
    if (layout_.persistent[i] ? !per : !dyn) continue;
    const auto& p = layout_.shard.params[i];
    torch::Tensor& buf = layout_.persistent[i] ? persist_ : flat_tensor_;
    // The gather rewrites the parameter with its own values: write through an alias
    // with its own version counter, so autograd does not see the views it saved for
    // backward as modified in place (FSDP preserves the version counter likewise).
    // [Note: a gather outlives its group] The alias owns a reference to the buffer's
    // storage: a group destroyed while its gather is still queued (an OOM or a failed
    // collective unwinds the engine while the communicator's worker carries on) must not
    // free the memory MPI is about to write. Open MPI wrote into such freed buffers on an
    // OOM in zero3-live-params (glibc "corrupted double-linked list", 7 runs of 8 on two
    // busy cores); free_storage is never called with gathers pending (unshard_wait first).
    auto* dst = static_cast<char*>(buf.data_ptr()) + layout_.gathered_offsets[i] * buf.element_size();
    c10::Storage keep = buf.storage();
    pending_.push_back(comm.all_gather(torch::from_blob(dst, {p.padded_numel}, [keep](void*) {}, buf.options()),
                                       shard.narrow(0, p.shard_offset, p.slice_numel),
                                       "unshard " + name_ + "." + specs_[i].name));
  }
}

void ParamGroup::unshard_wait() {
  const ShardLifecycle::Wait w = life_.wait();
  if (w.upload_landed) {
    cfg_.host_shard->wait(upload_);
    upload_.reset();
    submit_gathers(*upload_comm_, device_shard_, w.gather_dynamic, w.gather_persistent);
  }
  for (auto& p : pending_) p->wait();
  pending_.clear();
  device_shard_ = torch::Tensor();
}

void ParamGroup::reshard() {
  unshard_wait();  // nothing to wait for unless gathering
  if (life_.reshard()) free_storage(flat_tensor_);
}

void ParamGroup::scatter_param_grads(const std::vector<torch::Tensor>& grads, torch::Tensor& full) const {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < specs_.size(); ++i)
    if (grads[i].defined()) full.narrow(0, layout_.grad_offset(i), specs_[i].numel()).add_(grads[i].reshape({-1}));
}

void ParamGroup::copy_grad_range(const std::vector<torch::Tensor>& grads, int64_t begin, torch::Tensor dst) const {
  // Parameters sit at increasing offsets in both layouts: one ordered pass copies
  // their parts of the range and zeroes the padding between and after them.
  const int64_t end = begin + dst.numel();
  int64_t pos = begin;  // first element of the range not written yet
  for (size_t i = 0; i < specs_.size(); ++i) {
    const int64_t off = layout_.grad_offset(i);
    const int64_t lo = std::max(begin, off), hi = std::min(end, off + specs_[i].numel());
    if (lo >= hi) continue;
    if (lo > pos) dst.narrow(0, pos - begin, lo - pos).zero_();
    torch::Tensor out = dst.narrow(0, lo - begin, hi - lo);
    if (grads[i].defined())
      out.copy_(grads[i].reshape({-1}).narrow(0, lo - off, hi - lo));
    else
      out.zero_();
    pos = hi;
  }
  if (pos < end) dst.narrow(0, pos - begin, end - pos).zero_();
}

void ParamGroup::copy_grad_rows(const std::vector<torch::Tensor>& grads, int64_t begin, int64_t stride,
                                torch::Tensor dst) const {
  const int64_t rows = dst.size(0), m = dst.size(1);
  dst.zero_();  // padding, and the rows below rewritten whole
  std::vector<bool> done(static_cast<size_t>(rows), false);
  for (size_t i = 0; i < specs_.size(); ++i) {
    const int64_t off = layout_.grad_offset(i), n = specs_[i].numel();
    // Rows that lie inside parameter i: begin + k * stride >= off and + m <= off + n.
    const int64_t lo = off > begin ? (off - begin + stride - 1) / stride : 0;
    const int64_t last = off + n - m - begin;
    if (last < 0) continue;
    const int64_t hi = std::min(rows - 1, last / stride);
    if (hi < lo) continue;
    if (grads[i].defined()) {
      const torch::Tensor g = grads[i].reshape({-1});
      dst.narrow(0, lo, hi - lo + 1)
          .copy_(g.as_strided({hi - lo + 1, m}, {stride, 1}, g.storage_offset() + begin + lo * stride - off));
    }
    for (int64_t k = lo; k <= hi; ++k) done[static_cast<size_t>(k)] = true;
  }
  // Rows across a parameter's edge (at most one per edge): element by element.
  for (int64_t k = 0; k < rows; ++k) {
    if (done[static_cast<size_t>(k)]) continue;
    const int64_t b = begin + k * stride;
    bool touches = false;
    for (size_t i = 0; i < specs_.size() && !touches; ++i) {
      const int64_t off = layout_.grad_offset(i);
      touches = b < off + specs_[i].numel() && off < b + m;
    }
    if (touches) copy_grad_range(grads, b, dst[k]);
  }
}

torch::Tensor ParamGroup::owned_params() {
  if (cfg_.policy.shard_params()) return shard_;
  if (cfg_.policy.owns_whole_flat()) return flat_tensor_;
  return flat_tensor_.narrow(0, layout_.flat.begin(cfg_.rank), layout_.flat.partition_numel);
}

torch::Tensor ParamGroup::gather_source() const {
  if (cfg_.policy.shard_params()) return device_shard_.defined() ? device_shard_ : shard_;
  if (cfg_.policy.owns_whole_flat()) return flat_tensor_;
  return flat_tensor_.narrow(0, layout_.flat.begin(cfg_.rank), layout_.flat.partition_numel);
}

WorkPtr ParamGroup::gather_partitions(Communicator& comm) {
  torch::Tensor part = flat_tensor_.narrow(0, layout_.flat.begin(cfg_.rank), layout_.flat.partition_numel);
  return comm.all_gather(flat_tensor_, part, "gather_partitions " + name_);
}

int64_t ParamGroup::param_bytes() const {
  return layout_.param_device_numel(host_shard()) * static_cast<int64_t>(c10::elementSize(cfg_.dtype));
}

int64_t ParamGroup::host_bytes() const {
  return host_shard() ? layout_.shard.shard_numel * static_cast<int64_t>(c10::elementSize(cfg_.dtype)) : 0;
}

}  // namespace zrepro
