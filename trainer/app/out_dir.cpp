// See out_dir.h.
#include "trainer/app/out_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "device/base/errors.h"
#include "trainer/app/subprocess.h"
#include "trainer/report/rank_views.h"
#include "trainer/report/report.h"

namespace zrepro {

namespace fs = std::filesystem;

const std::vector<std::string>& run_output_names() {
  static const std::vector<std::string> names = {"summary.json", "report.html",    "metrics.jsonl",
                                                 "metrics.jsonl.partial", "trace.json", "trace",
                                                 "hang_report.json", "flight",  "inputs"};
  return names;
}

namespace {

bool is_earlier_output(const std::string& name) {
  for (const auto& n : run_output_names())
    if (name == n) return true;
  return name.rfind("summary_rank", 0) == 0 && name.size() > 17 && name.compare(name.size() - 5, 5, ".json") == 0;
}

}  // namespace

std::vector<std::string> claim_out_dir(const std::string& dir) {
  const std::string lock_path = dir + "/.zrepro.lock";
  // Held until the process exits (the kernel drops the lock with the descriptor).
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw ConfigError("--out: cannot create the lock file \"" + lock_path + "\"; choose a writable --out");
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    std::string holder;
    std::ifstream(lock_path) >> holder;
    ::close(fd);
    throw ConfigError("--out \"" + dir + "\": another zrepro run (pid " + (holder.empty() ? "unknown" : holder) +
                      ") is writing there; wait for it to end or choose another --out");
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::write(fd, pid.data(), pid.size()) != static_cast<ssize_t>(pid.size())) {
    // The lock holds without the pid; a second run then says "pid unknown".
  }
  std::vector<std::string> moved;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (is_earlier_output(name)) moved.push_back(name);
  }
  if (moved.empty()) return moved;
  const fs::path previous = fs::path(dir) / "previous";
  fs::remove_all(previous, ec);
  fs::create_directories(previous, ec);
  if (ec) throw ConfigError("--out: cannot create \"" + previous.string() + "\" for the earlier run's files: " + ec.message());
  for (const auto& name : moved) {
    fs::rename(fs::path(dir) / name, previous / name, ec);
    if (ec)
      throw ConfigError("--out: cannot move the earlier run's " + name + " to " + previous.string() + ": " +
                        ec.message() + "; remove it or choose another --out");
  }
  return moved;
}

void publish_rank_view(const std::string& dir, int rank, int world, const nlohmann::json& own) {
  using json = nlohmann::json;
  write_file_atomic(dir + "/summary_rank" + std::to_string(rank) + ".json", summary_text(own));
  const std::string lock_path = dir + "/.views.lock";
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw IoError("cannot create " + lock_path + " to merge the ranks' summaries");
  ::flock(fd, LOCK_EX);  // released by close (or by the kernel if this rank is killed)
  try {
    std::vector<json> views(static_cast<size_t>(world));
    for (int r = 0; r < world; ++r) {
      const std::string path = dir + "/summary_rank" + std::to_string(r) + ".json";
      views[r] = r == rank ? own : (fs::exists(path) ? read_json_file(path) : json());
    }
    const json merged = merge_rank_views(views, world);
    write_summary_and_report(dir, merged);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
}

}  // namespace zrepro
