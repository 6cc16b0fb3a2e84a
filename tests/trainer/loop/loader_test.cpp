// The data loader: every worker count and prefetch depth hands the loop the same
// batches in the same order, a slow single worker makes the loop wait (measured),
// pinned input batches are counted as input, never as offload, and training with
// workers gives the losses of training without.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <thread>

#include "device/device_memory.h"
#include "offload/host_memory.h"
#include "trainer/config/ds_config.h"
#include "trainer/config/model_spec.h"
#include "trainer/loop/loader.h"
#include "trainer/loop/train.h"
#include "tests/support/train_helpers.h"

using namespace zrepro;

namespace {

std::vector<BatchKey> keys(int n, int64_t micro) {
  std::vector<BatchKey> k;
  for (int i = 0; i < n; ++i) k.push_back({i * micro, micro});
  return k;
}

double seconds_of(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST(Loader, EveryWorkerCountGivesTheSameBatchesInOrder) {
  const MarkovData data(128, 16, 7);
  for (int workers : {0, 1, 3}) {
    for (int prefetch : {1, 4}) {
      BatchLoader loader(data, keys(10, 4), {workers, prefetch, 0.0, false});
      for (int i = 0; i < 10; ++i)
        EXPECT_TRUE(torch::equal(loader.next(), data.samples(i * 4, 4))) << workers << " workers, batch " << i;
      EXPECT_THROW(loader.next(), std::out_of_range);
    }
  }
}

TEST(Loader, OneSlowWorkerMakesTheLoopWaitAndMoreWorkersHideIt) {
  const MarkovData data(128, 16, 7);
  // 8 batches of 4 samples at 5 ms per sample: 20 ms per batch for one worker.
  double one = 0, eight = 0;
  {
    BatchLoader loader(data, keys(8, 4), {1, 2, 5.0, false});
    one = seconds_of([&] { for (int i = 0; i < 8; ++i) loader.next(); });
  }
  {
    BatchLoader loader(data, keys(8, 4), {8, 2, 5.0, false});
    std::this_thread::sleep_for(std::chrono::milliseconds(60));  // the loop computes meanwhile
    eight = seconds_of([&] { for (int i = 0; i < 8; ++i) loader.next(); });
  }
  EXPECT_GE(one, 8 * 0.020 * 0.9) << "one worker prepares the batches one after another";
  EXPECT_LT(eight, one) << "eight workers had the batches ready";
}

TEST(Loader, PinnedBatchesAreInputNotOffload) {
  const MarkovData data(128, 16, 7);
  HostMemory& host = HostMemory::instance();
  const int64_t offload_before = host.pinned_bytes();
  BatchLoader loader(data, keys(4, 2), {2, 2, 0.0, true});
  torch::Tensor b = loader.next();
  EXPECT_TRUE(torch::equal(b, data.samples(0, 2)));
  EXPECT_GE(host.input_pinned_bytes(), b.numel() * 8);
  EXPECT_EQ(host.pinned_bytes(), offload_before);
}

TEST(Loader, TrainingWithWorkersKeepsTheLosses) {
  DeviceMemory::instance().install(0);
  const DsConfig cfg = parse_ds_config(
      R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
          "optimizer": {"type": "AdamW", "params": {"lr": 0.003}}})", "test.json", {});
  TrainResult plain, loaded;
  TrainOptions o;
  o.steps = 4;
  train(zrepro_test::one_rank_job(cfg), o, plain);
  o.loader = {3, 2, 1.0, true};
  train(zrepro_test::one_rank_job(cfg), o, loaded);
  ASSERT_EQ(plain.steps.size(), loaded.steps.size());
  for (size_t i = 0; i < plain.steps.size(); ++i) EXPECT_EQ(plain.steps[i].loss, loaded.steps[i].loss) << "step " << i;
  EXPECT_GT(loaded.input_pinned_peak, 0);
  EXPECT_GT(loaded.steps[0].data_wait_s, 0.0);
}
