// See job_spec.h.
#include "trainer/config/job_spec.h"

#include <algorithm>
#include <limits>
#include <string>

#include "device/base/errors.h"
#include "trainer/config/leaf_modules.h"

namespace zrepro {

void check_job(const JobSpec& job) {
  const int64_t per_token = std::max<int64_t>(job.model.seq + 1, 1);
  const int64_t most = std::numeric_limits<int32_t>::max() / per_token;
  if (job.cfg.micro_batch > most)
    throw ConfigError("train_micro_batch_size_per_gpu: got " + std::to_string(job.cfg.micro_batch) + " with sequence " +
                      std::to_string(job.model.seq) + ": more than 2^31 tokens per micro-batch, past what one device "
                      "step can index; use a micro-batch of at most " + std::to_string(most));
  check_leaf_module_classes(job.model, job.cfg.zero);
}

}  // namespace zrepro
