// See release_env.h.
#include "trainer/bisect/release_env.h"

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "device/base/errors.h"
#include "trainer/config/ds_versions.h"
#include "trainer/config/json_file.h"
#include "trainer/config/user_file.h"
#include "trainer/runtime/subprocess.h"
#include "trainer/runtime/torch_python.h"
#include "zero/schedule/stage_policy.h"

#ifndef ZREPRO_CONFORMANCE_DIR
#define ZREPRO_CONFORMANCE_DIR "conformance"
#endif

namespace zrepro {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// A DeepSpeed run that has not finished in this long is stopped (the first run of a
// release builds its extensions: about 3 minutes on 2 cores).
constexpr int kRunTimeoutS = 900;

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

std::string home() { return env_or("HOME", "/root"); }

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// FNV-1a over everything that decides a run's figures.
struct Fnv {
  uint64_t h = 1469598103934665603ull;
  void add(const std::string& s) {
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    h = (h ^ 0xff) * 1099511628211ull;  // a separator: ("ab","c") != ("a","bc")
  }
  std::string hex() const {
    char b[20];
    std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(h));
    return b;
  }
};

// The line after `marker` in a log ("ZREPRO_TORCH 2.15.0").
std::string marked(const std::string& log, const std::string& marker) {
  std::ifstream in(log);
  for (std::string l; std::getline(in, l);)
    if (l.rfind(marker + " ", 0) == 0) return l.substr(marker.size() + 1);
  return "";
}

// The exception a rank died of ("[rank0]: ValueError: ..."), else the launcher's last
// error line, else the log's tail.
std::string error_of(const std::string& log, bool* raised_by_rank = nullptr) {
  if (raised_by_rank) *raised_by_rank = false;
  std::ifstream in(log);
  std::string last, line;
  while (std::getline(in, line)) {
    const bool rank = line.rfind("[rank", 0) == 0 && line.find("]: ") != std::string::npos;
    const std::string text = rank ? line.substr(line.find("]: ") + 3) : line;
    const size_t colon = text.find(": ");
    const bool error = colon != std::string::npos && colon > 5 && text.compare(colon - 5, 5, "Error") == 0 &&
                       text.find(' ') >= colon;
    if (error && rank) {
      if (raised_by_rank) *raised_by_rank = true;
      return text;
    }
    if (error) last = text;
  }
  return last.empty() ? tail_of(log, 8) : last;
}

// The installed release imports, and its own torch requirement (Requires-Dist, read with
// pip's packaging) admits this Python's torch: "ZREPRO_TORCH_SPEC <spec or any> ok|no".
const char* const kImportCheck =
    "import deepspeed, torch, importlib.metadata as m\n"
    "from pip._vendor.packaging.requirements import Requirement\n"
    "reqs = [Requirement(r) for r in (m.requires('deepspeed') or [])]\n"
    "torch_reqs = [r for r in reqs if r.name == 'torch' and not r.marker]\n"
    "v = torch.__version__.split('+')[0]\n"
    "ok = all(r.specifier.contains(v, prereleases=True) for r in torch_reqs)\n"
    "print('ZREPRO_DS', deepspeed.__version__)\n"
    "print('ZREPRO_TORCH_SPEC', ','.join(str(r.specifier) for r in torch_reqs) or 'any', 'ok' if ok else 'no')\n";

// The DeepSpeed release a run record says it imported (ds_run.py's "versions"), without a
// local "+..." suffix; none when the record does not say.
std::optional<std::string> imported_deepspeed(const json& record) {
  if (!record.is_object() || !record.contains("versions") || !record["versions"].is_object()) return std::nullopt;
  const json v = record["versions"].value("deepspeed", json());
  if (!v.is_string()) return std::nullopt;
  const std::string s = v.get<std::string>();
  return s.substr(0, s.find('+'));
}

// [Note: a cache entry is checked, never trusted]: the cached figures of `release`, when the
// record names it (older ones only by their file name) and imported it; another release's
// figures under this one's name are removed (run again).
std::optional<ReleaseFigures> cached_figures(const std::string& release, const std::string& cached) {
  if (!fs::exists(cached)) return std::nullopt;
  const json j = read_json_file(cached);
  if (j.is_object() && j.value("release", release) == release && imported_deepspeed(j).value_or(release) == release)
    return figures_from_json(j);
  if (!j.is_null()) fs::remove(cached);
  return std::nullopt;
}

}  // namespace

std::string default_bisect_cache() {
  const char* dir = std::getenv("ZREPRO_CACHE_DIR");
  return dir && *dir ? std::string(dir) + "/bisect" : home() + "/.cache/zrepro/bisect";
}

std::string default_bisect_python() {
  return env_or("ZREPRO_PYTHON", home() + "/.cache/zrepro/conformance-venv/bin/python");
}

std::string conformance_scripts_dir() { return env_or("ZREPRO_CONFORMANCE_DIR", ZREPRO_CONFORMANCE_DIR); }

std::optional<std::string> cpu_refusal(const std::string& release, int stage) {
  if (compare_versions(release, "0.15.0") < 0)
    return "DeepSpeed " + release + "'s CPU accelerator needs Intel's intel_extension_for_pytorch and "
           "oneccl_bindings_for_pytorch, native packages tied to an older torch (0.15.0 is the oldest release that "
           "runs on a plain CPU torch)";
  const bool stage3 = StagePolicy::valid(stage) && stage_policy(stage).shard_params();  // DeepSpeed's stage3.py
  if (stage3 && compare_versions(release, "0.16.0") < 0 && std::system("command -v numactl >/dev/null 2>&1") != 0)
    return "DeepSpeed " + release + " at ZeRO-3 calls numactl on the CPU accelerator (utils/numa.py), which this "
           "machine does not have (apt-get install numactl)";
  return std::nullopt;
}

std::string inputs_key(const std::string& config, const std::string& inputs_dir, int ranks, int steps) {
  Fnv f;
  f.add(read_text(config));
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(inputs_dir))
    if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& p : files) {
    f.add(p.filename().string());
    f.add(read_text(p.string()));
  }
  f.add(std::to_string(ranks) + " ranks " + std::to_string(steps) + " steps");
  return f.hex();
}

ReleaseRunner::ReleaseRunner(BisectPaths paths, std::string torch, std::string work)
    : paths_(std::move(paths)), torch_(std::move(torch)), work_(std::move(work)) {}

std::string ReleaseRunner::env_dir(const std::string& release) const {
  return paths_.cache + "/envs/deepspeed-" + release + "+torch-" + torch_;
}

std::string ReleaseRunner::run_file(const std::string& release, const RunInputs& in, const std::string& torch) const {
  return paths_.cache + "/runs/" + in.key + "/deepspeed-" + release + "+torch-" + torch + ".json";
}

std::string ReleaseRunner::cached_torch(const std::string& release, const RunInputs& in) const {
  const std::string dir = paths_.cache + "/runs/" + in.key, prefix = "deepspeed-" + release + "+torch-";
  if (!fs::is_directory(dir)) return "";
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && e.path().extension() == ".json")
      return name.substr(prefix.size(), name.size() - prefix.size() - 5);
  }
  return "";
}

// [Note: the bisect cache] installed into a temporary folder, imported, then renamed.
bool ReleaseRunner::install(const std::string& release, std::string& why) {
  const std::string dir = env_dir(release);
  // [Note: a cache entry is checked, never trusted] A folder marked ready whose package is
  // gone (emptied, half deleted) would run whatever DeepSpeed the Python has under this
  // release's name: it is made again instead.
  if (fs::exists(dir + "/.ready") && fs::exists(dir + "/deepspeed/__init__.py")) return true;
  if (fs::exists(dir)) fs::remove_all(dir);
  fs::create_directories(paths_.cache + "/envs");
  const std::string tmp = dir + ".tmp", log = work_ + "/install-" + release + ".log";
  fs::remove_all(tmp);
  int rc = run_program({paths_.python, "-m", "pip", "install", "--no-deps", "--disable-pip-version-check",
                        "--target", tmp, "deepspeed==" + release},
                       {}, log, "installing DeepSpeed " + release);
  if (rc == 0)
    rc = run_program(under_probe_timeout({paths_.python, "-c", kImportCheck}),
                     {{"PYTHONPATH", tmp}, {"DS_ACCELERATOR", "cpu"}}, log + ".import",
                     "importing DeepSpeed " + release);  // [Note: a Python that never answers]
  const std::string spec = marked(log + ".import", "ZREPRO_TORCH_SPEC");
  if (rc == 0 && spec.size() > 3 && spec.compare(spec.size() - 3, 3, " no") == 0) {
    fs::remove_all(tmp);
    why = "deepspeed==" + release + " requires torch" + spec.substr(0, spec.size() - 3) + " and this Python has torch " +
          torch_ + ": pass --python with a torch that fits";
    return false;
  }
  if (rc != 0 || marked(log + ".import", "ZREPRO_DS") != release) {
    fs::remove_all(tmp);
    why = "could not install or import deepspeed==" + release + " (no network and not in the cache " +
          paths_.cache + "?):\n" + tail_of(rc == 0 || !fs::exists(log + ".import") ? log : log + ".import", 4);
    return false;
  }
  fs::remove_all(dir);
  fs::rename(tmp, dir);
  write_file_atomic(dir + "/.ready", "deepspeed " + release + " over torch " + torch_ + " (" + paths_.python + ")\n");
  return true;
}

ReleaseFigures ReleaseRunner::figures(const std::string& release, const RunInputs& in, bool& from_cache,
                                      bool spread) {
  const std::string torch = torch_.empty() ? cached_torch(release, in) : torch_;
  const std::string cached = run_file(release, in, torch);
  from_cache = false;
  ReleaseFigures got;
  if (auto f = torch.empty() ? std::nullopt : cached_figures(release, cached)) {
    from_cache = true;
    got = *f;
  } else {
    got.outcome = "unavailable";
    if (torch_.empty()) {
      got.message = "not in the cache (" + paths_.cache + ") and no Python with torch to run it (--python " +
                    paths_.python + ": run scripts/conformance.sh to make one)";
      return got;
    }
    if (!install(release, got.message)) return got;
    const OneRun run = run_once(release, in, "");
    if (run.keep) keep(release, in, cached, run);
    got = run.figures;
  }
  // [Note: a release's own spread]: a second run on the same inputs, once, kept beside the first.
  std::string why_not;
  if (spread && got.outcome == "ran" && !got.spread && !torch_.empty() && install(release, why_not)) {
    const OneRun again = run_once(release, in, "-rerun");
    if (again.figures.outcome == "ran") {
      got.spread = run_spread(got, again.figures);
      if (got.spread) {
        json rec = read_json_file(cached);
        rec["spread"] = *got.spread;
        rec["spread_from"] = "a second run of DeepSpeed " + release + " on the same inputs";
        write_json_file(cached, rec);
      }
    }
  }
  return got;
}

ReleaseRunner::OneRun ReleaseRunner::run_once(const std::string& release, const RunInputs& in,
                                              const std::string& tag) {
  OneRun r;
  ReleaseFigures& got = r.figures;
  const std::string env = env_dir(release), out = work_ + "/deepspeed-" + release + tag + ".json",
                    log = work_ + "/deepspeed-" + release + tag + ".log";
  fs::remove(out);
  const int rc = run_program(
      {"timeout", "--kill-after=10", std::to_string(kRunTimeoutS), paths_.python, "-m", "torch.distributed.run",
       "--standalone", "--nproc_per_node", std::to_string(in.ranks), paths_.conformance + "/ds_run.py", "--inputs",
       in.inputs, "--config", in.config, "--steps", std::to_string(in.steps), "--out", out},
      {{"DS_ACCELERATOR", "cpu"}, {"OMP_NUM_THREADS", "1"}, {"PYTHONPATH", env},
       {"TORCH_EXTENSIONS_DIR", env + "/.torch_extensions"}},
      log, "DeepSpeed " + release + " on " + std::to_string(in.ranks) + " rank(s)" + (tag.empty() ? "" : " (again)"));
  bool raised = false;
  r.record = read_json_file(out);
  if (const auto imported = imported_deepspeed(r.record); imported && *imported != release) {
    fs::remove_all(env);  // [Note: a cache entry is checked, never trusted]: made again next time
    got.outcome = "failed";
    got.message = "the environment of DeepSpeed " + release + " (" + env + ") imported DeepSpeed " + *imported +
                  ": damaged, removed; run the bisect again to reinstall it";
    return r;
  }
  got = figures_from_deepspeed(r.record, error_of(log, &raised));
  if (rc == 124) got.outcome = "failed", got.message = "timed out after " + std::to_string(kRunTimeoutS) + " s";
  if (got.torch.empty()) got.torch = torch_;
  r.keep = got.outcome == "ran" || got.outcome == "refused" || (got.outcome == "failed" && raised && rc != 124);
  return r;
}

// Ran, refused, or died of an exception a rank raised is what the release does with these
// inputs: kept. Another failure may be this machine's (killed, timed out, out of disk): run
// again next time.
void ReleaseRunner::keep(const std::string& release, const RunInputs& in, const std::string& cached, const OneRun& run) {
  fs::create_directories(fs::path(cached).parent_path());
  json rec = to_json(run.figures);
  rec["release"] = release;  // provenance: what ran, where, when
  if (run.record.is_object() && run.record.contains("versions")) rec["versions"] = run.record["versions"];  // what it imported
  rec["recorded_by"] = "zrepro bisect on " + std::to_string(in.ranks) + " CPU ranks (gloo, DS_ACCELERATOR=cpu)";
  write_json_file(cached, rec);
}

}  // namespace zrepro
