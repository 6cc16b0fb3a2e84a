// See grad_reducer.h.
#include "zero/grad_reducer.h"

#include <algorithm>

#include "device/device_memory.h"

namespace zrepro {

GradReducer::GradReducer(std::vector<ParamGroup*> groups, const Options& o, Communicator& comm)
    : comm_(comm),
      ws_(comm.world_size()),
      overlap_(o.overlap_comm),
      reduce_scatter_(o.reduce_scatter),
      persistent_(o.persistent_buffers),
      dtype_(o.comm_dtype),
      device_(o.device),
      o_(o) {
  const int64_t reduce_bucket_size = o.reduce_bucket_size;
  int max_group = 0;
  std::vector<int64_t> slices;
  for (ParamGroup* g : groups) {
    max_group = std::max(max_group, g->index());
    for (const auto& u : g->units()) {
      units_.push_back({g->index(), u});
      slices.push_back(u.slice);
    }
  }
  buckets_ = make_buckets(slices, reduce_bucket_size, ws_);
  group_buckets_.resize(max_group + 1);
  buffer_numel_ = 0;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    buffer_numel_ = std::max(buffer_numel_, buckets_[b].numel_per_rank * ws_);
    for (const auto& p : buckets_[b].pieces) {
      auto& gb = group_buckets_[units_[p.unit].group];
      if (gb.empty() || gb.back() != static_cast<int>(b)) gb.push_back(static_cast<int>(b));
    }
  }
  if (o.contiguous_gradients) buffer_numel_ = std::max(buffer_numel_, reduce_bucket_size);
  remaining_.assign(buckets_.size(), 0);
  bucket_buffer_.assign(buckets_.size(), -1);
  const int nbuf = overlap_ ? 2 : 1;
  buffers_.resize(nbuf);
  buffer_busy_.assign(nbuf, false);
  buffer_reads_.resize(nbuf);
  if (persistent_) allocate_buffers();
}

void GradReducer::allocate_buffers() {
  DeviceMemory::CategoryScope tag(MemCategory::comm_buffers);
  for (auto& b : buffers_)
    if (!b.defined()) b = torch::empty({buffer_numel_}, torch::TensorOptions().dtype(dtype_).device(device_));
}

void GradReducer::add(int g, const torch::Tensor& full, std::vector<torch::Tensor>& owned) {
  add_pieces(g, [&](int64_t begin, torch::Tensor dst) { dst.copy_(full.narrow(0, begin, dst.numel())); }, owned);
}

void GradReducer::add(const ParamGroup& group, const std::vector<torch::Tensor>& grads,
                      std::vector<torch::Tensor>& owned) {
  add_pieces(group.index(), [&](int64_t begin, torch::Tensor dst) { group.copy_grad_range(grads, begin, dst); },
             owned);
}

void GradReducer::add_pieces(int g, const std::function<void(int64_t, torch::Tensor)>& fill,
                             std::vector<torch::Tensor>& owned) {
  torch::NoGradGuard no_grad;
  DeviceMemory::CategoryScope tag(MemCategory::comm_buffers);
  for (int b : group_buckets_[g]) {
    Bucket& bk = buckets_[b];
    if (bucket_buffer_[b] < 0) {
      // A free buffer; with all of them reducing, finish the oldest first.
      auto free_it = std::find(buffer_busy_.begin(), buffer_busy_.end(), false);
      while (free_it == buffer_busy_.end()) {
        complete_one(owned);
        free_it = std::find(buffer_busy_.begin(), buffer_busy_.end(), false);
      }
      const int i = static_cast<int>(free_it - buffer_busy_.begin());
      for (auto& e : buffer_reads_[i]) o_.copier->wait(e);
      buffer_reads_[i].clear();
      allocate_buffers();  // all of them at the first bucket, as DeepSpeed does at backward start
      buffer_busy_[i] = true;
      bucket_buffer_[b] = i;
      remaining_[b] = static_cast<int>(bk.pieces.size());
    }
    // Rank-major: rank r's pieces sit at r * numel_per_rank.
    torch::Tensor buf = buffers_[bucket_buffer_[b]];
    int64_t pos = 0;
    for (const auto& p : bk.pieces) {
      const Unit& u = units_[p.unit];
      if (u.group == g) {
        for (int r = 0; r < ws_; ++r)
          fill(u.u.base + r * u.u.slice + p.offset, buf.narrow(0, r * bk.numel_per_rank + pos, p.numel));
        --remaining_[b];
      }
      pos += p.numel;
    }
    if (remaining_[b] == 0) launch(b, owned);
  }
}

void GradReducer::launch(int b, std::vector<torch::Tensor>& owned) {
  const Bucket& bk = buckets_[b];
  torch::Tensor in = buffers_[bucket_buffer_[b]].narrow(0, 0, ws_ * bk.numel_per_rank);
  if (ws_ > 1) in.div_(ws_);  // average over ranks before the sum: no 16-bit overflow from the sum
  const std::string label = "reduce_grad bucket " + std::to_string(b);
  torch::Tensor out;
  WorkPtr w;
  if (reduce_scatter_) {
    out = torch::empty({bk.numel_per_rank}, in.options());
    w = comm_.reduce_scatter(out, in, label);
  } else {
    out = in.narrow(0, comm_.rank() * bk.numel_per_rank, bk.numel_per_rank);  // this rank's slice, after the sum
    w = comm_.all_reduce(in, label);
  }
  in_flight_.push_back({b, bucket_buffer_[b], out, w});
  bucket_buffer_[b] = -1;
  if (!overlap_) complete_one(owned);
}

void GradReducer::complete_one(std::vector<torch::Tensor>& owned) {
  InFlight f = std::move(in_flight_.front());
  in_flight_.pop_front();
  f.work->wait();
  int64_t pos = 0;
  for (const auto& p : buckets_[f.bucket].pieces) {
    const Unit& u = units_[p.unit];
    torch::Tensor piece = f.out.narrow(0, pos, p.numel);
    if (o_.offloaded && o_.offloaded(u.group)) {
      // The copy holds the piece (a view of the buffer with reduce_scatter false, the
      // bucket's output otherwise) until it lands; the buffer is refilled only after
      // that, so at most one bucket per buffer waits on the link.
      buffer_reads_[f.buffer].push_back(o_.sink(u.group, u.u.owned_offset + p.offset, piece));
    } else {
      owned[u.group].narrow(0, u.u.owned_offset + p.offset, p.numel).add_(piece);
    }
    pos += p.numel;
  }
  buffer_busy_[f.buffer] = false;
}

void GradReducer::finish(std::vector<torch::Tensor>& owned) {
  torch::NoGradGuard no_grad;
  while (!in_flight_.empty()) complete_one(owned);
  for (size_t b = 0; b < buckets_.size(); ++b)
    TORCH_CHECK(bucket_buffer_[b] < 0, "GradReducer: bucket ", b, " did not receive all its gradients");
  if (!persistent_) {
    // Pending offload copies keep their views (and so the memory) alive; the next
    // backward gets fresh buffers.
    for (auto& buf : buffers_) buf = torch::Tensor();
    for (auto& r : buffer_reads_) r.clear();
  }
}

}  // namespace zrepro
