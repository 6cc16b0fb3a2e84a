// See virtual_communicator.h.
#include "zero/comm/virtual_communicator.h"

#include <chrono>
#include <sstream>

#include "device/device_memory.h"

namespace zrepro {

namespace {

std::string describe(CollOp op, const torch::Tensor& out, const torch::Tensor& in, int root) {
  std::ostringstream os;
  os << coll_op_name(op);
  if (in.defined()) os << " in " << in.numel() << " " << c10::toString(in.scalar_type());
  if (out.defined() && op != CollOp::all_reduce && op != CollOp::broadcast) os << " out " << out.numel();
  if (op == CollOp::broadcast) os << " root " << root;
  return os.str();
}

}  // namespace

VirtualGroup::VirtualGroup(int world, double timeout_s) : world_(world), timeout_s_(timeout_s), posts_(world) {}

void VirtualGroup::abort(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_.empty()) aborted_ = why;
    for (Post& p : posts_) p = Post{};
  }
  cv_.notify_all();
}

std::string VirtualGroup::aborted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return aborted_;
}

void VirtualGroup::check_signatures() {
  const std::string first = describe(posts_[0].op, posts_[0].out, posts_[0].in, posts_[0].root);
  auto issued_by = [&](int k) { return posts_[k].label.empty() ? std::string() : " [" + posts_[k].label + "]"; };
  for (int k = 1; k < world_; ++k) {
    const std::string mine = describe(posts_[k].op, posts_[k].out, posts_[k].in, posts_[k].root);
    if (mine != first)
      throw CommError("virtual ranks disagree on collective #" + std::to_string(round_) + ": rank 0 " + first +
                      issued_by(0) + ", rank " + std::to_string(k) + " " + mine + issued_by(k));
  }
  for (int k = 1; k < world_; ++k)  // [Note: collectives that paired different parameters]
    if (posts_[k].label != posts_[0].label) {
      if (label_mismatches_.count++ == 0)
        label_mismatches_.first = "collective #" + std::to_string(round_) + " " + first + ": rank 0 issued it for " +
                                  posts_[0].label + ", rank " + std::to_string(k) + " for " + posts_[k].label;
      return;
    }
}

Communicator::LabelMismatches VirtualGroup::label_mismatches() const {
  std::lock_guard<std::mutex> lock(mu_);
  return label_mismatches_;
}

void VirtualGroup::combine() {
  torch::NoGradGuard no_grad;
  DeviceMemory::HostScope host;  // the group's scratch is nobody's device memory
  const CollOp op = posts_[0].op;
  // 16-bit payloads are summed in fp32 (as MpiCommunicator's reduction), the rest in their own type.
  const torch::ScalarType in_type = posts_[0].in.defined() ? posts_[0].in.scalar_type() : torch::kFloat;
  const torch::ScalarType acc_type =
      in_type == torch::kHalf || in_type == torch::kBFloat16 ? torch::kFloat : in_type;
  auto sum = [&] {
    torch::Tensor acc = posts_[0].in.to(torch::kCPU, acc_type, /*non_blocking=*/false, /*copy=*/true);
    for (int k = 1; k < world_; ++k) acc.add_(posts_[k].in.to(torch::kCPU, acc_type));
    return acc;
  };
  switch (op) {
    case CollOp::all_reduce: {
      const torch::Tensor acc = sum();
      for (Post& p : posts_) p.out.copy_(acc);
      break;
    }
    case CollOp::reduce_scatter: {
      const torch::Tensor acc = sum();
      const int64_t m = posts_[0].out.numel();
      for (int k = 0; k < world_; ++k) posts_[k].out.copy_(acc.narrow(0, k * m, m).view(posts_[k].out.sizes()));
      break;
    }
    case CollOp::all_gather: {
      const int64_t m = posts_[0].in.numel();
      for (int k = 0; k < world_; ++k) {
        torch::Tensor flat = posts_[k].out.view({-1});
        for (int j = 0; j < world_; ++j) {
          torch::Tensor slot = flat.narrow(0, j * m, m);
          if (slot.data_ptr() != posts_[j].in.data_ptr()) slot.copy_(posts_[j].in.view({-1}));  // else in place
        }
      }
      break;
    }
    case CollOp::broadcast: {
      const int root = posts_[0].root;
      for (int k = 0; k < world_; ++k)
        if (k != root) posts_[k].out.copy_(posts_[root].in);
      break;
    }
    case CollOp::barrier: break;
  }
}

void VirtualGroup::run(int rank, CollOp op, torch::Tensor& out, torch::Tensor& in, int root, const std::string& label) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!aborted_.empty()) throw CommError(aborted_);
  posts_[rank] = Post{op, out, in, root, true, label};
  const int64_t my_round = round_;
  if (++arrived_ == world_) {
    try {
      check_signatures();
      combine();
    } catch (const std::exception& e) {
      aborted_ = e.what();
    }
    for (Post& p : posts_) p = Post{};  // drop the tensors before anyone returns
    arrived_ = 0;
    ++round_;
    lock.unlock();
    cv_.notify_all();
    lock.lock();
  } else {
    auto done = [&] { return round_ != my_round || !aborted_.empty(); };
    if (timeout_s_ > 0) {
      if (!cv_.wait_for(lock, std::chrono::duration<double>(timeout_s_), done)) {
        std::ostringstream os;
        os << "virtual rank " << rank << " waited " << timeout_s_ << " s in collective #" << my_round << " ("
           << describe(op, out, in, root) << "); not arrived:";
        for (int k = 0; k < world_; ++k)
          if (!posts_[k].posted) os << " rank " << k;
        aborted_ = os.str();
        for (Post& p : posts_) p = Post{};
        lock.unlock();
        cv_.notify_all();
        throw CommError(aborted_);
      }
    } else {
      cv_.wait(lock, done);
    }
  }
  if (round_ == my_round || !aborted_.empty()) {
    if (round_ == my_round) posts_[rank] = Post{};
    throw CommError(aborted_);
  }
}

VirtualCommunicator::VirtualCommunicator(std::shared_ptr<VirtualGroup> group, int rank)
    : Communicator(rank, group->world(), /*threaded=*/true), group_(std::move(group)) {}

VirtualCommunicator::~VirtualCommunicator() { stop_worker(); }

void VirtualCommunicator::execute(CollOp op, torch::Tensor& out, torch::Tensor& in, int root) {
  group_->run(rank(), op, out, in, root, executing_label());
}

}  // namespace zrepro
