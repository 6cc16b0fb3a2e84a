// See out_dir.h.
#include "trainer/runtime/out_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "device/base/errors.h"
#include "trainer/runtime/subprocess.h"
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

constexpr const char* kManifest = ".zrepro-outputs";

constexpr const char* kRankViews = "summary_rank*.json";  // one per failing rank of a multi-process run

bool is_rank_view(const std::string& name) {
  return name.rfind("summary_rank", 0) == 0 && name.size() > 17 && name.compare(name.size() - 5, 5, ".json") == 0;
}

bool is_output_name(const std::string& name) {
  for (const auto& n : run_output_names())
    if (name == n) return true;
  return is_rank_view(name);
}

// The names an earlier run's manifest lists (empty when there is none).
std::vector<std::string> manifest_names(const fs::path& dir, bool& found) {
  std::ifstream in(dir / kManifest);
  found = static_cast<bool>(in);
  std::vector<std::string> names;
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line.find('/') == std::string::npos && line != "." && line != "..") names.push_back(line);
  return names;
}

[[noreturn]] void refuse_foreign(const std::string& dir, const std::string& name, const std::string& why) {
  throw ConfigError("--out \"" + dir + "\": \"" + name + "\" " + why +
                    ", and zrepro writes there; it was left as it is. Move it, or choose another --out");
}

void write_manifest_file(const std::string& dir, const std::vector<std::string>& names) {
  std::string text;
  for (const auto& n : names) text += n + "\n";
  write_file_atomic((fs::path(dir) / kManifest).string(), text);
}

// The entries of dir with a name a run writes, each with its manifest key.
struct OutputEntry {
  std::string name, key;
  bool is_directory;
};
std::vector<OutputEntry> output_entries(const std::string& dir) {
  std::vector<OutputEntry> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (is_output_name(name)) out.push_back({name, is_rank_view(name) ? kRankViews : name, e.is_directory()});
  }
  return out;
}

// [Note: only zrepro's files move]: what an earlier run left in dir, to move aside.
std::vector<std::string> earlier_outputs(const std::string& dir) {
  bool has_manifest = false;
  const std::vector<std::string> listed = manifest_names(dir, has_manifest);
  std::vector<std::string> moved;
  for (const auto& [name, key, is_directory] : output_entries(dir)) {
    const bool mine = has_manifest ? std::find(listed.begin(), listed.end(), key) != listed.end()
                                   : !is_directory;  // before manifests: zrepro's plain files only
    if (!mine)
      refuse_foreign(dir, name, std::string(is_directory ? "is a folder" : "is a file") +
                                    " no zrepro run recorded writing (" + kManifest + ")");
    moved.push_back(name);
  }
  if (has_manifest) moved.push_back(kManifest);
  return moved;
}

// OUT/previous/ is replaced only when all it holds is an earlier run's: its manifest and the
// names that manifest lists. A file the user put there is never deleted.
void check_previous(const std::string& dir) {
  const fs::path previous = fs::path(dir) / "previous";
  bool zrepro_made = false;
  const std::vector<std::string> listed = manifest_names(previous.string(), zrepro_made);
  if (!zrepro_made) refuse_foreign(dir, "previous", "holds no zrepro manifest (it is not an earlier run's)");
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(previous, ec)) {
    const std::string name = e.path().filename().string();
    const std::string key = is_rank_view(name) ? kRankViews : name;
    if (name != kManifest && std::find(listed.begin(), listed.end(), key) == listed.end())
      refuse_foreign(dir, "previous/" + name, "is not one of the earlier run's files (its manifest does not list it)");
  }
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
  std::vector<std::string> moved = earlier_outputs(dir);
  std::error_code ec;
  const fs::path previous = fs::path(dir) / "previous";
  if (!moved.empty() && fs::exists(previous)) check_previous(dir);
  // This run owns the output names from here on (the manifest goes aside with the rest).
  auto write_manifest = [&] {
    std::vector<std::string> names = run_output_names();
    names.push_back(kRankViews);
    write_manifest_file(dir, names);
  };
  if (moved.empty()) {
    write_manifest();
    return moved;
  }
  fs::remove_all(previous, ec);
  fs::create_directories(previous, ec);
  if (ec) throw ConfigError("--out: cannot create \"" + previous.string() + "\" for the earlier run's files: " + ec.message());
  for (const auto& name : moved) {
    fs::rename(fs::path(dir) / name, previous / name, ec);
    if (ec)
      throw ConfigError("--out: cannot move the earlier run's " + name + " to " + previous.string() + ": " +
                        ec.message() + "; remove it or choose another --out");
  }
  write_manifest();
  moved.erase(std::remove(moved.begin(), moved.end(), std::string(kManifest)), moved.end());
  return moved;
}

void seal_out_dir(const std::string& dir) {
  std::vector<std::string> present;
  for (const auto& e : output_entries(dir))
    if (std::find(present.begin(), present.end(), e.key) == present.end()) present.push_back(e.key);
  write_manifest_file(dir, present);
}

void publish_rank_view(const std::string& dir, int rank, int world, const Summary& own) {
  write_file_atomic(dir + "/summary_rank" + std::to_string(rank) + ".json", summary_text(own.to_json()));
  const std::string lock_path = dir + "/.views.lock";
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw IoError("cannot create " + lock_path + " to merge the ranks' summaries");
  ::flock(fd, LOCK_EX);  // released by close (or by the kernel if this rank is killed)
  try {
    std::vector<std::optional<Summary>> views(static_cast<size_t>(world));
    for (int r = 0; r < world; ++r) {
      const std::string path = dir + "/summary_rank" + std::to_string(r) + ".json";
      views[r] = r == rank ? std::optional<Summary>(own) : read_summary(path);
    }
    write_summary_and_report(dir, *merge_rank_views(views, world));
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
}

}  // namespace zrepro
