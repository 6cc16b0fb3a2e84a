// See param_group.h. Stage-3 storage is released and re-materialised by swapping
// the data pointer of the buffer's StorageImpl (FSDP's storage resize): views that
// autograd saved for backward share that StorageImpl and see the regathered data.
#include "zero/param_group.h"

#include "device/device_memory.h"
#include "offload/host_memory.h"

namespace zrepro {

int64_t ParamSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

ParamGroup::ParamGroup(int index, std::string name, std::vector<ParamSpec> specs, const ShardingConfig& cfg)
    : index_(index), name_(std::move(name)), specs_(std::move(specs)), cfg_(cfg) {
  std::vector<int64_t> numels;
  for (const auto& s : specs_) {
    offsets_.push_back(numel_);
    numels.push_back(s.numel());
    numel_ += s.numel();
  }
  auto opts = torch::TensorOptions().dtype(cfg_.dtype).device(cfg_.device);
  DeviceMemory::CategoryScope tag(MemCategory::params);
  flat_ = partition_flat(numel_, cfg_.world_size);
  if (cfg_.stage < 3) {
    flat_tensor_ = torch::zeros({flat_.padded_numel}, opts);
    units_.push_back({0, flat_.partition_numel, 0});
  } else {
    layout_ = partition_params(numels, cfg_.world_size);
    int64_t dyn = 0, per = 0;
    for (size_t i = 0; i < specs_.size(); ++i) {
      const auto& p = layout_.params[i];
      persistent_.push_back(p.numel < cfg_.persistence_threshold);
      full_offsets_.push_back(persistent_.back() ? per : dyn);
      (persistent_.back() ? per : dyn) += p.padded_numel;
      units_.push_back({p.full_offset, p.slice_numel, p.shard_offset});
    }
    shard_ = cfg_.host_shard ? HostMemory::instance().empty(layout_.shard_numel, cfg_.dtype, cfg_.host_pinned,
                                                           "offload_param shard " + name_)
                             : torch::zeros({layout_.shard_numel}, opts);
    flat_tensor_ = torch::empty({dyn}, opts);
    persist_ = torch::empty({per}, opts);
    gathered_ = false;
  }
  if (cfg_.stage == 3) free_storage(flat_tensor_), free_storage(persist_);
}

std::vector<torch::Tensor> ParamGroup::params() const {
  std::vector<torch::Tensor> views;
  for (size_t i = 0; i < specs_.size(); ++i) {
    const int64_t n = specs_[i].numel();
    const torch::Tensor& buf = cfg_.stage < 3 ? flat_tensor_ : (persistent_[i] ? persist_ : flat_tensor_);
    const int64_t off = cfg_.stage < 3 ? offsets_[i] : full_offsets_[i];
    views.push_back(buf.narrow(0, off, n).view(specs_[i].shape));
  }
  return views;
}

void ParamGroup::free_storage(torch::Tensor& t) {
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
  TORCH_CHECK(values.numel() == numel_, "ParamGroup::load: ", name_, " expects ", numel_, " values");
  if (cfg_.stage < 3) {
    flat_tensor_.narrow(0, 0, numel_).copy_(values);
    return;
  }
  // This rank's slice of each padded parameter.
  for (size_t i = 0; i < specs_.size(); ++i) {
    const auto& p = layout_.params[i];
    const int64_t lo = cfg_.rank * p.slice_numel, hi = std::min(lo + p.slice_numel, p.numel);
    if (hi > lo) shard_.narrow(0, p.shard_offset, hi - lo).copy_(values.narrow(0, offsets_[i] + lo, hi - lo));
  }
}

void ParamGroup::unshard_start(Communicator& comm) {
  if (cfg_.stage < 3 || !pending_.empty() || upload_) return;
  const bool dyn = !gathered_, per = persistent_stale_;
  if (!dyn && !per) return;
  {
    // Gathered layers are transient (comm buffers); persistent ones stay (params).
    DeviceMemory::CategoryScope tag(MemCategory::comm_buffers);
    if (dyn) alloc_storage(flat_tensor_);
  }
  {
    DeviceMemory::CategoryScope tag(MemCategory::params);
    if (per) alloc_storage(persist_);
  }
  gathered_ = true;
  persistent_stale_ = false;
  if (cfg_.host_shard) {
    DeviceMemory::CategoryScope tag(MemCategory::comm_buffers);
    device_shard_ = torch::empty({layout_.shard_numel}, torch::TensorOptions().dtype(cfg_.dtype).device(cfg_.device));
    upload_ = cfg_.host_shard->copy(device_shard_, shard_, CopyDir::h2d, cfg_.host_pinned, {}, "shard " + name_);
    upload_comm_ = &comm;
    upload_dyn_ = dyn, upload_per_ = per;
    return;
  }
  submit_gathers(comm, shard_, dyn, per);
}

void ParamGroup::submit_gathers(Communicator& comm, const torch::Tensor& shard, bool dyn, bool per) {
  // One all-gather per parameter, straight into its padded slot: rank-major
  // slices of a padded parameter are the parameter itself.
  for (size_t i = 0; i < specs_.size(); ++i) {
    if (persistent_[i] ? !per : !dyn) continue;
    const auto& p = layout_.params[i];
    torch::Tensor& buf = persistent_[i] ? persist_ : flat_tensor_;
    // The gather rewrites the parameter with its own values: write through an alias
    // with its own version counter, so autograd does not see the views it saved for
    // backward as modified in place (FSDP preserves the version counter likewise).
    auto* dst = static_cast<char*>(buf.data_ptr()) + full_offsets_[i] * buf.element_size();
    pending_.push_back(comm.all_gather(torch::from_blob(dst, {p.padded_numel}, buf.options()),
                                       shard.narrow(0, p.shard_offset, p.slice_numel),
                                       "unshard " + name_ + "." + specs_[i].name));
  }
}

void ParamGroup::unshard_wait() {
  if (upload_) {
    cfg_.host_shard->wait(upload_);
    upload_.reset();
    submit_gathers(*upload_comm_, device_shard_, upload_dyn_, upload_per_);
  }
  for (auto& w : pending_) w->wait();
  pending_.clear();
  device_shard_ = torch::Tensor();
}

void ParamGroup::reshard() {
  if (cfg_.stage < 3 || !gathered_) return;
  unshard_wait();
  free_storage(flat_tensor_);
  gathered_ = false;
}

int64_t ParamGroup::dynamic_numel() const { return cfg_.stage < 3 ? 0 : flat_tensor_.numel(); }

int64_t ParamGroup::full_grad_numel() const {
  return cfg_.stage < 3 ? flat_.padded_numel : layout_.full_numel;
}

int64_t ParamGroup::grad_offset(size_t i) const {
  return cfg_.stage < 3 ? offsets_[i] : layout_.params[i].full_offset;
}

void ParamGroup::scatter_param_grads(const std::vector<torch::Tensor>& grads, torch::Tensor& full) const {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < specs_.size(); ++i)
    if (grads[i].defined()) full.narrow(0, grad_offset(i), specs_[i].numel()).add_(grads[i].reshape({-1}));
}

void ParamGroup::copy_grad_range(const std::vector<torch::Tensor>& grads, int64_t begin, torch::Tensor dst) const {
  // Parameters sit at increasing offsets in both layouts: one ordered pass copies
  // their parts of the range and zeroes the padding between and after them.
  const int64_t end = begin + dst.numel();
  int64_t pos = begin;  // first element of the range not written yet
  for (size_t i = 0; i < specs_.size(); ++i) {
    const int64_t off = grad_offset(i);
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

torch::Tensor ParamGroup::owned_params() {
  if (cfg_.stage == 0) return flat_tensor_;
  if (cfg_.stage < 3) return flat_tensor_.narrow(0, flat_.begin(cfg_.rank), flat_.partition_numel);
  return shard_;
}

int64_t ParamGroup::owned_numel() const {
  if (cfg_.stage == 0) return flat_.padded_numel;
  if (cfg_.stage < 3) return flat_.partition_numel;
  return layout_.shard_numel;
}

WorkPtr ParamGroup::gather_partitions(Communicator& comm) {
  torch::Tensor part = flat_tensor_.narrow(0, flat_.begin(cfg_.rank), flat_.partition_numel);
  return comm.all_gather(flat_tensor_, part, "gather_partitions " + name_);
}

int64_t ParamGroup::param_bytes() const {
  const int64_t es = c10::elementSize(cfg_.dtype);
  if (cfg_.stage < 3) return flat_.padded_numel * es;
  return ((cfg_.host_shard ? 0 : layout_.shard_numel) + persist_.numel()) * es;
}

int64_t ParamGroup::host_bytes() const {
  return cfg_.host_shard ? layout_.shard_numel * static_cast<int64_t>(c10::elementSize(cfg_.dtype)) : 0;
}

}  // namespace zrepro
