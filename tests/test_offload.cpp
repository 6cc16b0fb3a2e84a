// CPU offload: the copy engine (order, events, the host-link model, pageable copies),
// host memory (pinned accounting, the memlock failure and its fix), the staging
// ring (no buffer reused before its copy finished), and training with offload on vs
// off: stages 1-3, gas 1 and 4, 1 and 2 ranks, optimizer and parameter offload,
// partial offload; the injected accumulation bug caught by that comparison; device
// memory and copy bytes against the formulas.
#include <gtest/gtest.h>

#include <atomic>

#include "device/device_memory.h"
#include "offload/copy_engine.h"
#include "offload/host_memory.h"
#include "offload/optimizer_offload.h"
#include "tests/train_helpers.h"
#include "tests/zrepro_process.h"
#include "trainer/ds_config.h"
#include "trainer/model_spec.h"
#include "trainer/train.h"

using namespace zrepro;
using zrepro_test::expect_same_losses;
using zrepro_test::train_tiny;

TEST(CopyEngine, CopiesCompleteInOrderAfterTheirHostWork) {
  CopyEngine ce({/*link_gbps=*/0.2, 0.5, false});
  HostMemory& host = HostMemory::instance();
  std::vector<torch::Tensor> dst;
  std::vector<CopyEventPtr> events;
  std::vector<int> order;
  std::mutex mu;
  for (int i = 0; i < 8; ++i) {
    torch::Tensor src = torch::full({1000 * (8 - i)}, static_cast<float>(i));  // later copies are smaller
    dst.push_back(host.empty(src.numel(), torch::kFloat, true, "test"));
    events.push_back(ce.copy(dst.back(), src, CopyDir::d2h, true, [&, i] {
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(i);
    }));
  }
  for (int i = 0; i < 8; ++i) {
    ce.wait(events[i]);
    // An event completes only after its bytes landed and its host work ran.
    EXPECT_EQ(dst[i][0].item<float>(), static_cast<float>(i));
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_GE(order.size(), static_cast<size_t>(i + 1));
  }
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  const auto rec = ce.records();
  ASSERT_EQ(rec.size(), 8u);
  for (size_t i = 1; i < rec.size(); ++i) EXPECT_GE(rec[i].t_start, rec[i - 1].t_end);  // one engine, FIFO
  // The link model is a lower bound: 4000 bytes at 0.2 GB/s take at least 20 us.
  for (const auto& r : rec) EXPECT_GE(r.t_end - r.t_start, r.bytes / 0.2e9 * 0.999);
  const CopyStats s = ce.stats();
  EXPECT_EQ(s.copies[0], 8);
  EXPECT_EQ(s.bytes[0], 4 * 1000 * (8 + 7 + 6 + 5 + 4 + 3 + 2 + 1));
}

TEST(CopyEngine, PageableCopiesAreSynchronousAndExposed) {
  CopyEngine ce({0, 0.5, false});
  torch::Tensor src = torch::arange(4096, torch::kFloat);
  torch::Tensor dst = HostMemory::instance().empty(4096, torch::kFloat, false, "test");
  CopyEventPtr e = ce.copy(dst, src, CopyDir::d2h, /*pinned=*/false);
  EXPECT_TRUE(e->done());  // done when copy() returns
  EXPECT_TRUE(dst.equal(src));
  EXPECT_GT(ce.stats().exposed_s, 0);
  EXPECT_THROW(ce.copy(dst.narrow(0, 0, 10), src, CopyDir::d2h, true), std::invalid_argument);
}

TEST(HostMemory, PinnedAndPageableBuffersAreCountedAndNotDeviceMemory) {
  HostMemory& host = HostMemory::instance();
  DeviceMemory& dev = DeviceMemory::instance();
  dev.install(0);
  const int64_t dev0 = dev.snapshot().allocated, pinned0 = host.pinned_bytes(), pageable0 = host.pageable_bytes();
  {
    torch::Tensor p = host.empty(1 << 16, torch::kFloat, true, "test pinned");
    torch::Tensor q = host.empty(1 << 10, torch::kBFloat16, false, "test pageable");
    EXPECT_EQ(host.pinned_bytes() - pinned0, 4 << 16);
    EXPECT_EQ(host.pageable_bytes() - pageable0, 2 << 10);
    EXPECT_EQ(p.sum().item<float>(), 0.0f);  // zero-filled
    EXPECT_EQ(dev.snapshot().allocated - dev0, 0);
    const MemlockInfo info = memlock_info();
    EXPECT_GE(info.locked_bytes, 4 << 16);  // really mlock-ed (VmLck)
  }
  EXPECT_EQ(host.pinned_bytes(), pinned0);
  EXPECT_EQ(host.pageable_bytes(), pageable0);
}

TEST(OptimizerOffload, LandingBufferIsRewrittenOnlyAfterItsAddReadIt) {
  // A slow link and no waiting on the compute side: each micro-step's piece lands in
  // the same range as the previous one, so any reordering of copies and host adds
  // would corrupt the sums.
  CopyEngine ce({0.05, 0.5, false});
  OptimizerOffload::Options o;
  OptimizerOffload off({1024}, {true}, o, ce);
  for (int micro = 0; micro < 3; ++micro) {
    off.begin_micro_step(micro);
    for (int piece = 0; piece < 4; ++piece)  // 4 pieces of 256 cover the partition
      off.add_grad(0, piece * 256, torch::full({256}, static_cast<float>(1 + piece + 10 * micro)));
  }
  off.finish_grads();
  for (int piece = 0; piece < 4; ++piece) {
    const float want = (1 + piece) + (11 + piece) + (21 + piece);  // micro 0 copies, 1 and 2 add
    EXPECT_TRUE(off.grad(0).narrow(0, piece * 256, 256).eq(want).all().item<bool>()) << "piece " << piece;
  }
  EXPECT_EQ(ce.stats().copies[0], 12);
}

namespace {

DsConfig offload_config(int stage, const std::string& offload, int64_t gas, const std::string& precision = "fp32",
                        double ratio = 1.0) {
  std::string zero = R"("stage": )" + std::to_string(stage) +
                     R"(, "reduce_bucket_size": 20000, "stage3_param_persistence_threshold": 1000)";
  if (offload == "optimizer" || offload == "both")
    zero += R"(, "offload_optimizer": {"device": "cpu", "pin_memory": true, "ratio": )" + std::to_string(ratio) + "}";
  if (offload == "both") zero += R"(, "offload_param": {"device": "cpu", "pin_memory": true})";
  ConfigFlags f;
  f.grad_accum = gas;
  f.precision = precision;
  return parse_ds_config(R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": "auto",
      "bf16": {"enabled": "auto"}, "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.01}},
      "zero_optimization": {)" + zero + "}}",
                         "offload_test.json", f);
}

void expect_same(const TrainResult& a, const TrainResult& b, double tol, const std::string& what) {
  ASSERT_EQ(a.steps.size(), b.steps.size()) << what;
  for (size_t i = 0; i < a.steps.size(); ++i) {
    EXPECT_NEAR(b.steps[i].loss, a.steps[i].loss, tol * a.steps[i].loss) << what << " step " << i;
    EXPECT_NEAR(b.steps[i].grad_norm, a.steps[i].grad_norm, tol * a.steps[i].grad_norm) << what << " step " << i;
  }
}

}  // namespace

TEST(Offload, SameLossesAndGradNormsOnOneRank) {
  for (int stage : {1, 2, 3})
    for (int64_t gas : {1, 4}) {
      const TrainResult off = train_tiny(offload_config(stage, "none", gas), 5);
      const TrainResult on = train_tiny(offload_config(stage, "optimizer", gas), 5);
      expect_same(off, on, 1e-5, "optimizer offload, stage " + std::to_string(stage) + " gas " + std::to_string(gas));
      if (stage == 3) expect_same(off, train_tiny(offload_config(3, "both", gas), 5), 1e-5, "param offload");
    }
  const TrainResult b16 = train_tiny(offload_config(2, "none", 4, "bf16"), 5);
  expect_same(b16, train_tiny(offload_config(2, "optimizer", 4, "bf16"), 5), 2e-2, "bf16 optimizer offload");
}

TEST(Offload, InjectedAccumulationBugIsCaughtByTheComparison) {
  const TrainResult ref = train_tiny(offload_config(2, "none", 4), 4);
  const TrainResult bad = train_tiny(offload_config(2, "optimizer", 4), 4, {parse_injection("drop-accumulated-grads:0")});
  // Only micro-step 0's quarter of the gradient survives: the norm is far off.
  for (size_t i = 0; i < ref.steps.size(); ++i)
    EXPECT_GT(std::abs(bad.steps[i].grad_norm - ref.steps[i].grad_norm), 0.1 * ref.steps[i].grad_norm) << "step " << i;
  // With gas 1 there is nothing to drop.
  expect_same(train_tiny(offload_config(2, "none", 1), 3),
              train_tiny(offload_config(2, "optimizer", 1), 3, {parse_injection("drop-accumulated-grads:0")}), 1e-5,
              "gas 1");
}

TEST(Offload, DeviceHoldsTwoBytesPerParamAndCopiesFollowTheFormulas) {
  const int64_t psi = resolve_model("tiny").param_count();  // no padding on one rank
  const int64_t steps = 3, gas = 4;
  const TrainResult r = train_tiny(offload_config(2, "optimizer", gas, "bf16"), steps);
  EXPECT_EQ(r.memory.params, 2 * psi);  // the 16-bit parameters only
  EXPECT_EQ(r.memory.grads, 0);
  EXPECT_EQ(r.memory.optimizer_states, 0);
  // Host: fp32 master, moments and gradient (16 B) + the bf16 landing buffer and copy (2 + 2 B) per param.
  EXPECT_EQ(r.memory.host_pinned, 20 * psi);
  // Down: every micro-step's reduced bf16 gradient; up: the updated bf16 parameters once per step.
  EXPECT_EQ(r.copies.bytes[static_cast<int>(CopyDir::d2h)], steps * gas * 2 * psi);
  EXPECT_EQ(r.copies.bytes[static_cast<int>(CopyDir::h2d)], steps * 2 * psi);
  EXPECT_EQ(r.steps.back().copies.bytes[0], gas * 2 * psi);
}

TEST(Offload, PartialOptimizerOffloadKeepsTheRestOnTheDevice) {
  const TrainResult full = train_tiny(offload_config(3, "none", 2), 4);
  const TrainResult half = train_tiny(offload_config(3, "optimizer", 2, "fp32", 0.5), 4);
  expect_same(full, half, 1e-5, "ratio 0.5");
  EXPECT_GT(half.memory.optimizer_states, 0);
  EXPECT_LT(half.memory.optimizer_states, full.memory.optimizer_states);
}

// Done-when of the offload issue: stage 3 with optimizer and parameter offload to
// pinned CPU memory and gas 4 trains on 2 ranks with the same losses as without
// offload, and the report shows copy bytes, copy time and the overlapped share.
TEST(Offload, Stage3FullOffloadOnTwoRanksMatchesAndReportsCopies) {
  const std::string base = R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
      "optimizer": {"type": "AdamW", "params": {"lr": 0.003}},
      "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 1000)";
  const std::string offload = R"(, "offload_optimizer": {"device": "cpu", "pin_memory": true},
      "offload_param": {"device": "cpu", "pin_memory": true})";
  auto ref = zrepro_test::zrepro_run("off_ref", base + "}}", "--ranks 2 --steps 6");
  auto on = zrepro_test::zrepro_run("off_on", base + offload + "}}", "--ranks 2 --steps 6 --host-link-gbps 4");
  expect_same_losses(ref, on, 1e-5, "stage 3 full offload, gas 4, 2 ranks");
  ASSERT_TRUE(on.summary["offload"].is_object()) << on.output;
  for (const auto& r : on.summary["offload"]["ranks"]) {
    EXPECT_GT(r["d2h_bytes"].get<int64_t>(), 0);
    EXPECT_GT(r["h2d_bytes"].get<int64_t>(), 0);
    EXPECT_GT(r["copy_s"].get<double>(), 0);
    EXPECT_GE(r["overlap_ratio"].get<double>(), 0);
    EXPECT_LE(r["overlap_ratio"].get<double>(), 1);
    EXPECT_GT(r["host_pinned_bytes"].get<int64_t>(), 0);
  }
  EXPECT_EQ(on.summary["offload"]["host_link_gbps"], 4.0);
  EXPECT_GT(on.summary["time"]["breakdown_s"]["offload_copy"].get<double>(), 0);
  const std::string html = zrepro_test::read_text(on.dir + "/out/report.html");
  EXPECT_NE(html.find("<h2>Offload (host link 4 GB/s modelled)</h2>"), std::string::npos);
  const auto& dev = on.summary["memory"]["ranks"][0]["model_states"];
  EXPECT_EQ(dev["optimizer_states"], 0);
  EXPECT_EQ(dev["grads"], 0);
}

TEST(Bench, CopyReportsPinnedPageableAndOverlap) {
  auto p = zrepro_test::zrepro_cmd("bench copy --sizes 256K --reps 1 --host-link-gbps 8 --json", 120, false);
  ASSERT_EQ(p.code, 0) << p.output;
  const nlohmann::json rows = nlohmann::json::parse(p.output);
  ASSERT_EQ(rows.size(), 3u);  // d2h, h2d, overlap
  for (int i = 0; i < 2; ++i) {
    for (const char* k : {"pinned_gbps", "pageable_gbps", "memcpy_gbps"}) EXPECT_GT(rows[i][k].get<double>(), 0) << k;
    // The link model bounds the pinned bandwidth; pageable runs at half of it.
    EXPECT_LE(rows[i]["pinned_gbps"].get<double>(), 8.0 * 1.01);
    EXPECT_LE(rows[i]["pageable_gbps"].get<double>(), 4.0 * 1.01);
  }
  EXPECT_GE(rows[2]["overlap"]["overlap_efficiency"].get<double>(), 0);
}
