// See grad_reducer.h.
#include "zero/grad_reducer.h"

#include "device/device_memory.h"

namespace zrepro {

namespace {

std::vector<std::pair<int, const LayerLayout*>> layouts_of(const std::vector<ParamGroup*>& groups) {
  std::vector<std::pair<int, const LayerLayout*>> out;
  for (ParamGroup* g : groups) out.emplace_back(g->index(), &g->layout());
  return out;
}

}  // namespace

GradReducer::GradReducer(std::vector<ParamGroup*> groups, const Options& o, Communicator& comm)
    : comm_(comm), o_(o), schedule_(layouts_of(groups), o.reduce_bucket_size, comm.world_size(), o.buffers) {
  buffers_.resize(schedule_.buffers());
  buffer_reads_.resize(schedule_.buffers());
  launched_.resize(schedule_.buckets().size());
  schedule_.prepare(*this);
}

void GradReducer::allocate_buffers(int count, int64_t numel) {
  DeviceMemory::CategoryScope tag(MemCategory::comm_buffers);
  for (auto& b : buffers_)
    if (!b.defined()) b = torch::empty({numel}, torch::TensorOptions().dtype(o_.comm_dtype).device(o_.device));
}

void GradReducer::reuse_buffer(int i) {
  // The buffer may be refilled once its pieces are on the host; their adds into the
  // fp32 accumulators run on (DeepSpeed's copy stream order, not the host's).
  for (auto& e : buffer_reads_[i]) o_.copier->wait_landed(e);
  buffer_reads_[i].clear();
}

void GradReducer::add(int g, const torch::Tensor& full, std::vector<torch::Tensor>& owned) {
  torch::NoGradGuard no_grad;
  DeviceMemory::CategoryScope tag(MemCategory::comm_buffers);
  fill_ = [&](int64_t begin, int64_t stride, torch::Tensor dst) {
    dst.copy_(full.as_strided({dst.size(0), dst.size(1)}, {stride, 1}, full.storage_offset() + begin));
  };
  owned_ = &owned;
  schedule_.add(g, *this);
}

void GradReducer::add(const ParamGroup& group, const std::vector<torch::Tensor>& grads,
                      std::vector<torch::Tensor>& owned) {
  torch::NoGradGuard no_grad;
  DeviceMemory::CategoryScope tag(MemCategory::comm_buffers);
  fill_ = [&](int64_t begin, int64_t stride, torch::Tensor dst) { group.copy_grad_rows(grads, begin, stride, dst); };
  owned_ = &owned;
  schedule_.add(group.index(), *this);
}

void GradReducer::fill(int b, int buffer, int g) {
  // Rank-major: rank r's pieces sit at r * numel_per_rank.
  const Bucket& bk = schedule_.buckets()[b];
  const int ws = schedule_.world_size();
  torch::Tensor buf = buffers_[buffer];
  int64_t pos = 0;
  for (const auto& p : bk.pieces) {
    const ReduceSchedule::Unit& u = schedule_.unit(p.unit);
    // Every rank's slice of the piece at once: row r at r * numel_per_rank + pos.
    if (u.group == g)
      fill_(u.u.base + p.offset, u.u.slice,
            buf.as_strided({ws, p.numel}, {bk.numel_per_rank, 1}, buf.storage_offset() + pos));
    pos += p.numel;
  }
}

void GradReducer::launch(int b, int buffer) {
  const Bucket& bk = schedule_.buckets()[b];
  const int ws = schedule_.world_size();
  torch::Tensor in = buffers_[buffer].narrow(0, 0, ws * bk.numel_per_rank);
  if (ws > 1) in.div_(ws);  // average over ranks before the sum: no 16-bit overflow from the sum
  const std::string label = "reduce_grad bucket " + std::to_string(b);
  Launched& l = launched_[b];
  l.out = o_.reduce_scatter ? torch::empty({bk.numel_per_rank}, in.options())
                            : in.narrow(0, comm_.rank() * bk.numel_per_rank, bk.numel_per_rank);  // this rank's slice
  // [Note: offloaded pieces go down at once] The pieces of offloaded groups start their
  // copy to the host on the comm stream as soon as the bucket is reduced (as DeepSpeed
  // issues them on its reduction stream right after the reduce), not when the schedule
  // next needs the buffer: with two buffers that was the end of backward, so every copy
  // of a micro-step queued behind it. The copies are the buffer's readers
  // (buffer_reads_); complete() then only waits for the reduce. Memory is released no
  // later than before: complete() still holds the output until its fixed point.
  std::function<void()> down;
  if (o_.offloaded) {
    struct Down {
      int group;
      int64_t owned_offset, pos, numel;
    };
    std::vector<Down> pieces;
    int64_t pos = 0;
    for (const auto& p : bk.pieces) {
      const ReduceSchedule::Unit& u = schedule_.unit(p.unit);
      if (o_.offloaded(u.group)) pieces.push_back({u.group, u.u.owned_offset + p.offset, pos, p.numel});
      pos += p.numel;
    }
    if (!pieces.empty())
      down = [this, out = l.out, buffer, pieces] {
        torch::NoGradGuard no_grad;
        for (const Down& d : pieces)
          buffer_reads_[buffer].push_back(o_.sink(d.group, d.owned_offset, out.narrow(0, d.pos, d.numel)));
      };
  }
  // Stood-in peers take every rank's reduced piece first: an offloaded piece's way down
  // may add the host accumulator into this rank's slice in place (all-reduced buckets,
  // whose output is that slice of `in`).
  std::function<void()> then = down;
  if (o_.peer_pieces)
    then = [this, in, b, down] {
      give_peers(b, in);
      if (down) down();
    };
  l.work = o_.reduce_scatter ? comm_.reduce_scatter(l.out, in, label, std::move(then))
                             : comm_.all_reduce(in, label, std::move(then));
}

void GradReducer::give_peers(int b, const torch::Tensor& in) {
  torch::NoGradGuard no_grad;
  const Bucket& bk = schedule_.buckets()[b];
  const torch::Tensor rows = in.view({schedule_.world_size(), bk.numel_per_rank});
  int64_t pos = 0;
  for (const auto& p : bk.pieces) {
    const ReduceSchedule::Unit& u = schedule_.unit(p.unit);
    o_.peer_pieces(u.group, u.u.owned_offset + p.offset, rows.narrow(1, pos, p.numel));
    pos += p.numel;
  }
}

void GradReducer::complete(int b, int /*buffer*/) {
  Launched l = std::move(launched_[b]);
  launched_[b] = Launched{};
  l.work->wait();
  if (o_.before_result) o_.before_result();
  std::vector<torch::Tensor>& owned = *owned_;
  int64_t pos = 0;
  for (const auto& p : schedule_.buckets()[b].pieces) {
    const ReduceSchedule::Unit& u = schedule_.unit(p.unit);
    // Offloaded pieces went down when the reduce finished ([Note: offloaded pieces go
    // down at once]); each copy holds its piece until it lands, and the buffer is
    // refilled only after that, so at most one bucket per buffer waits on the link.
    if (!(o_.offloaded && o_.offloaded(u.group)))
      owned[u.group].narrow(0, u.u.owned_offset + p.offset, p.numel).add_(l.out.narrow(0, pos, p.numel));
    pos += p.numel;
  }
}

void GradReducer::finish(std::vector<torch::Tensor>& owned) {
  torch::NoGradGuard no_grad;
  owned_ = &owned;
  schedule_.finish(*this);
}

void GradReducer::end(bool free_buffers) {
  if (!free_buffers) return;
  // Pending offload copies keep their views (and so the memory) alive; the next
  // backward gets fresh buffers.
  for (auto& buf : buffers_) buf = torch::Tensor();
  for (auto& r : buffer_reads_) r.clear();
}

}  // namespace zrepro
