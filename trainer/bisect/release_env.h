// Real DeepSpeed releases on this CPU for `zrepro bisect`: which releases can run here,
// one environment per (deepspeed, torch), one run of a release on zrepro's exported inputs
// (conformance/ds_run.py under torch.distributed.run, gloo, DS_ACCELERATOR=cpu), and the
// cache that makes a second bisect of the same inputs run offline.
//
// [Note: the bisect cache] CACHE/envs/deepspeed-V+torch-T/ holds release V installed with
// `pip install --no-deps --target` over the Python whose torch is T (every DeepSpeed
// release lists an unpinned `torch`, so the newest torch serves them all; the Python's own
// DeepSpeed, if any, is shadowed), its C++ extensions built inside it on first use, and
// `.ready` once it imported. CACHE/runs/INPUTS/deepspeed-V+torch-T.json holds what the
// release gave on those inputs, INPUTS being a hash of the config, the exported weights
// and batches, the rank and step counts: the same inputs find it again without Python,
// network or DeepSpeed (kept: trained, refused, or died of an exception a rank raised; a
// run killed or timed out is run again). Everything is written to a temporary name and renamed.
#pragma once
#include <optional>
#include <string>

#include "trainer/bisect/release_figures.h"
#include "trainer/runtime/torch_python.h"  // python_torch_version

namespace zrepro {

struct BisectPaths {
  std::string cache;        // --cache
  std::string python;       // --python: a Python with torch (scripts/conformance.sh makes one)
  std::string conformance;  // the folder of ds_run.py
};
std::string default_bisect_cache();   // $ZREPRO_CACHE_DIR/bisect, else ~/.cache/zrepro/bisect
std::string default_bisect_python();  // $ZREPRO_PYTHON, else the conformance venv's python
std::string conformance_scripts_dir();  // $ZREPRO_CONFORMANCE_DIR, else the source tree's conformance/

// Why release V cannot run ZeRO stage `stage` on this machine's CPU, or nullopt when it
// can (measured: docs/lab/DEEPSPEED_RELEASES.md). Older than 0.15.0: DeepSpeed's CPU
// accelerator needs Intel's extension for PyTorch; 0.15.x at stage 3 needs numactl.
std::optional<std::string> cpu_refusal(const std::string& release, int stage);

// What a bisect runs every release on.
struct RunInputs {
  std::string key;     // hash of everything below that decides the figures
  std::string inputs;  // zrepro's exported inputs folder (weights, batches, layout)
  std::string config;  // the DeepSpeed config file
  int ranks = 2;
  int steps = 3;
};
// The key of a run's inputs: a hash of the config file, every file of the inputs folder,
// the ranks and the steps.
std::string inputs_key(const std::string& config, const std::string& inputs_dir, int ranks, int steps);

class ReleaseRunner {
 public:
  // torch: the Python's torch ("" when there is no usable Python: cached runs only).
  ReleaseRunner(BisectPaths paths, std::string torch, std::string work);
  // The figures of release V on these inputs: from the cache, else installed and run.
  // `from_cache` says which. A release that cannot be installed (no network, pip fails)
  // is a failure whose message says why. With `spread`, a run without its spread gets a
  // second run on the same inputs and its spread (ReleaseFigures::spread), kept in the
  // cache beside the first ([Note: a release's own spread], release_figures.h).
  ReleaseFigures figures(const std::string& release, const RunInputs& in, bool& from_cache, bool spread = false);
  // The torch of the cached run of V on these inputs when there is no Python ("" if none).
  std::string cached_torch(const std::string& release, const RunInputs& in) const;

 private:
  std::string env_dir(const std::string& release) const;
  std::string run_file(const std::string& release, const RunInputs& in, const std::string& torch) const;
  bool install(const std::string& release, std::string& why);
  // One run of V on the inputs (ds_run.py under torch.distributed.run): its figures, the
  // record it wrote, and whether it is what the release does (kept in the cache) rather
  // than this machine's trouble (killed, timed out).
  struct OneRun {
    ReleaseFigures figures;
    nlohmann::json record;
    bool keep = false;
  };
  OneRun run_once(const std::string& release, const RunInputs& in, const std::string& tag);
  void keep(const std::string& release, const RunInputs& in, const std::string& cached, const OneRun& run);
  BisectPaths paths_;
  std::string torch_, work_;
};

}  // namespace zrepro
