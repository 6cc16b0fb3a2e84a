// `zrepro diagnose LOG`: a failed job's log (DeepSpeed / PyTorch / NCCL, several ranks
// interleaved, plain or gzip) to a diagnosis (trainer/diagnose/diagnose.h). With --config
// and --device-memory it also asks the planner (`zrepro plan --json` as a child) whether
// it predicts what the log shows: the same failure phase, or a fit.
// With --write-scenario DIR it writes a ready reproduction (trainer/app/reproduction.h): the
// job's config as side A, the candidate fixes beside it; --run then runs it as `zrepro
// scenario run` (exit codes: 0 reproduced and a fix verified, 6 no fix verified, 7 not
// reproduced). Otherwise exit 0 when a scenario matched, 7 when the log has no known
// fingerprint, 2 on bad input.
#include <zlib.h>

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <vector>

#include "trainer/app/cli.h"
#include "trainer/app/env.h"
#include "trainer/app/reproduction.h"
#include "trainer/app/scenario.h"
#include "trainer/runtime/subprocess.h"
#include "device/base/json_optional.h"
#include "trainer/config/user_file.h"
#include "trainer/diagnose/diagnose.h"
#include "trainer/diagnose/evidence.h"
#include "trainer/diagnose/flight_recorder.h"
#include "trainer/diagnose/log_text.h"
#include "trainer/report/report.h"

namespace zrepro {

using json = nlohmann::json;

namespace {

// The whole file, gunzipped when it is gzip (zlib reads plain files unchanged).
// A log as diagnose reads it: plain or gzip, streamed, at most `limit` bytes
// (decompressed) held: its first eighth and its last seven eighths (a 2 GB gzip bomb
// costs no more memory than a log of the limit; failures are found at a log's end,
// set-up at its start).
struct LogText {
  std::string text;
  int64_t total = 0;     // decompressed bytes
  int64_t head = 0, tail = 0;  // what was kept of each end when cut
  bool cut = false;      // the middle was skipped
};
constexpr const char* kDefaultReadLimit = "64MiB";

// [Note: Flight Recorder dumps] A folder of dumps (TORCH_NCCL_DEBUG_INFO_TEMP_FILE<rank>),
// or one dump: each rank's last collective, the rank from the file name's trailing digits
// (else its place in the folder). None when the path is a text log.
std::optional<std::vector<WatchdogEntry>> flight_recorder_rows(const std::string& path) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  if (fs::is_directory(path)) {
    for (const auto& e : fs::directory_iterator(path))
      if (e.is_regular_file()) files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
  } else if (path != "-" && fs::is_regular_file(path)) {
    std::ifstream in(path, std::ios::binary);
    char head[2] = {0, 0};
    in.read(head, 2);
    if (!looks_like_pickle(std::string(head, 2))) return std::nullopt;
    files.push_back(path);
  } else {
    return std::nullopt;
  }
  std::vector<WatchdogEntry> rows;
  for (size_t k = 0; k < files.size(); ++k) {
    const std::string bytes = read_user_file("LOG", files[k], "a Flight Recorder dump or a text log");
    const std::string name = fs::path(files[k]).filename().string();
    const size_t digits = name.find_last_not_of("0123456789");
    if (!looks_like_pickle(bytes)) {
      // A README or a text log beside the dumps is skipped; a rank's file that is no dump is
      // not: read without it, the other ranks would look alone in their collective.
      if (fs::is_directory(path) && digits + 1 < name.size())
        throw ConfigError("LOG: \"" + files[k] + "\" is named as a rank's Flight Recorder dump but holds none (" +
                          std::to_string(bytes.size()) + " bytes, not a pickle: a rank that died while writing it?); "
                          "without it the other ranks would look alone in their collective. Move it out of the folder "
                          "to diagnose the others, knowing that rank is unaccounted for");
      continue;
    }
    const int rank = digits + 1 < name.size() ? std::stoi(name.substr(digits + 1, 9)) : static_cast<int>(k);
    if (auto row = flight_recorder_row(read_flight_recorder(bytes, files[k]), rank, name)) rows.push_back(*row);
  }
  if (rows.empty() && fs::is_directory(path))
    throw ConfigError("LOG: \"" + path + "\" is a folder without a Flight Recorder dump; give a text log, or the folder "
                      "TORCH_NCCL_DEBUG_INFO_TEMP_FILE wrote each rank's dump to (TORCH_NCCL_DUMP_ON_TIMEOUT=1)");
  return rows;
}

// [Note: a log read as a stream] (trainer/diagnose/evidence.h): a text log is read through
// zlib in 64 KiB chunks and handed to the scanner one line at a time, NUL bytes dropped
// ([Note: NUL bytes in a log]); nothing holds the file, so memory stays flat whatever its
// size and every line is read. A line longer than 1 MiB (a log without newlines) is cut
// there. Its first 64 KiB decide what it is (normalise_log): binary is refused, UTF-16 (a
// Windows tool's small log) is read whole as before, up to --read-limit.
struct StreamedLog {
  LogKind kind = LogKind::empty;
  int64_t total = 0;  // decompressed bytes
  diagnosis::Scan scan;
  std::string note;  // what of a UTF-16 log above --read-limit was read
};

gzFile open_log(const std::string& path) {
  // "-": standard input (plain or gzip, as zlib tells them apart).
  if (path != "-" && !std::filesystem::is_regular_file(path))
    throw ConfigError("LOG: \"" + path + "\" is not a readable file");
  gzFile f = path == "-" ? gzdopen(::dup(STDIN_FILENO), "rb") : gzopen(path.c_str(), "rb");
  if (!f) throw ConfigError("LOG: cannot open \"" + path + "\"");
  return f;
}

void close_log(gzFile f, int last, const std::string& path) {
  int err = 0;
  const std::string msg = gzerror(f, &err);  // gzclose frees gzerror's string: copied first
  gzclose(f);
  if (last < 0 || err < 0) throw ConfigError("LOG: \"" + path + "\" is a damaged gzip file (" + msg + ")");
}

// Splits chunks into lines for the scanner; true once a byte other than NUL was seen.
class LineFeeder {
 public:
  explicit LineFeeder(diagnosis::LogScanner& s) : scanner_(s) {}
  void feed(const char* data, size_t n) {
    for (size_t i = 0; i < n;) {
      const char* nl = static_cast<const char*>(std::memchr(data + i, '\n', n - i));
      const size_t end = nl ? static_cast<size_t>(nl - data) : n;
      append(data + i, end - i);
      if (nl) flush();
      i = end + (nl ? 1 : 0);
    }
  }
  void finish() {
    if (!line_.empty()) flush();
  }
  bool saw_text() const { return text_; }

 private:
  static constexpr size_t kMaxLine = 1 << 20;
  void append(const char* p, size_t n) {
    n = std::min(n, kMaxLine - std::min(kMaxLine, line_.size()));
    if (!std::memchr(p, '\0', n)) {
      line_.append(p, n), text_ = text_ || n > 0;
      return;
    }
    for (size_t k = 0; k < n; ++k)
      if (p[k] != '\0') line_.push_back(p[k]), text_ = true;
  }
  void flush() {
    scanner_.line(std::move(line_));
    line_.clear();
  }
  diagnosis::LogScanner& scanner_;
  std::string line_;
  bool text_ = false;
};

LogText read_log(const std::string& path, int64_t limit);

StreamedLog stream_log(const std::string& path, int64_t limit) {
  gzFile f = open_log(path);
  StreamedLog log;
  std::vector<char> buf(1 << 16);
  int n = 0;
  size_t head = 0;  // the first 64 KiB decide the kind
  while (head < buf.size() && (n = gzread(f, buf.data() + head, static_cast<unsigned>(buf.size() - head))) > 0)
    head += static_cast<size_t>(n);
  std::string probe(buf.data(), head);
  log.kind = normalise_log(probe);
  if (log.kind == LogKind::utf16 || log.kind == LogKind::binary || (n < 0 && head == 0)) {
    close_log(f, n, path);
    if (log.kind != LogKind::utf16) return log;
    LogText whole = read_log(path, limit);
    normalise_log(whole.text);
    log.total = whole.total, log.scan = diagnosis::scan(whole.text);
    if (whole.cut)
      log.note = "the log is " + format_bytes(whole.total) + " decompressed UTF-16, above --read-limit: read its first " +
                 format_bytes(whole.head) + " and last " + format_bytes(whole.tail);
    return log;
  }
  diagnosis::LogScanner scanner;
  LineFeeder lines(scanner);
  lines.feed(buf.data(), head);
  log.total = static_cast<int64_t>(head);
  while (n > 0 && (n = gzread(f, buf.data(), static_cast<unsigned>(buf.size()))) > 0) {
    log.total += n;
    lines.feed(buf.data(), static_cast<size_t>(n));
  }
  close_log(f, n, path);
  lines.finish();
  log.kind = lines.saw_text() ? LogKind::text : LogKind::empty;
  log.scan = scanner.finish();
  return log;
}

LogText read_log(const std::string& path, int64_t limit) {
  const int64_t kLogHead = limit / 8, kLogTail = limit - limit / 8;
  gzFile f = open_log(path);
  LogText log;
  std::string tail;  // the last kLogTail bytes after the head, kept by trimming in large steps
  std::vector<char> buf(1 << 16);
  int n = 0;
  while ((n = gzread(f, buf.data(), static_cast<unsigned>(buf.size()))) > 0) {
    log.total += n;
    size_t used = 0;
    if (static_cast<int64_t>(log.text.size()) < kLogHead) {
      used = std::min<size_t>(static_cast<size_t>(n), static_cast<size_t>(kLogHead) - log.text.size());
      log.text.append(buf.data(), used);
    }
    tail.append(buf.data() + used, static_cast<size_t>(n) - used);
    if (static_cast<int64_t>(tail.size()) > 2 * kLogTail) {
      tail.erase(0, tail.size() - static_cast<size_t>(kLogTail));
      log.cut = true;
    }
  }
  close_log(f, n, path);
  if (static_cast<int64_t>(tail.size()) > kLogTail) {
    tail.erase(0, tail.size() - static_cast<size_t>(kLogTail));
    log.cut = true;
  }
  if (log.cut) log.text += "\n";  // the skipped middle: no line spans it
  log.text += tail;
  log.head = kLogHead, log.tail = kLogTail;
  return log;
}

// `zrepro plan --json` for the job (a child: the planner's errors come back as exit 2).
PlanAnswer plan_job(const std::vector<std::string>& plan_args) {
  std::vector<std::string> args = {"plan", "--json"};
  args.insert(args.end(), plan_args.begin(), plan_args.end());
  // A private folder (mkdtemp: 0700, unpredictable), removed however this ends.
  std::string templ = std::filesystem::temp_directory_path().string() + "/zrepro_diagnose.XXXXXX";
  if (!::mkdtemp(templ.data())) throw IoError("cannot make a private temporary folder under " + templ);
  struct Remove {
    std::string dir;
    ~Remove() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } remove{templ};
  const std::string out = templ + "/plan.json";
  try {
    run_self_or_refuse("the plan for --config", args, out);
  } catch (const ConfigError& e) {  // the planner refuses what DeepSpeed would refuse at init
    PlanAnswer refused;
    refused.refused = e.what();
    return refused;
  }
  return PlanAnswer::from_json(read_json_file(out));
}

// The planner's view of the user's setup against what the log showed.
PlannerCheck planner_check(const Diagnosis& d, const PlanAnswer& a) {
  PlannerCheck c;
  if (a.refused || !a.plan) {  // agrees when the log shows DeepSpeed refusing the config too
    c.planned_verdict = "refused", c.agrees = d.checkpoint == "config", c.refused = a.refused.value_or("");
    return c;
  }
  const SummaryPlanned& p = *a.plan;
  c.planned_verdict = p.verdict;
  c.planned_phase = p.oom_phase;
  c.planned_peak_bytes = p.peak_bytes;
  c.capacity_bytes = p.device_capacity_bytes;
  c.log_phase = d.numbers.oom_phase();
  const bool planned_oom = c.planned_verdict == "oom";
  const bool log_oom = d.checkpoint == "zero-stage" || d.numbers.request_bytes.has_value();
  const bool phase_agrees = !c.log_phase || !c.planned_phase || *c.planned_phase == *c.log_phase;
  c.agrees = planned_oom == log_oom && (!planned_oom || phase_agrees);
  return c;
}

json read_user_config(const std::string& path) {
  json c = parse_user_json("--config " + path, read_user_file("--config", path, "the job's DeepSpeed JSON config"));
  if (c.is_discarded() || !c.is_object())
    throw ConfigError("--config: \"" + path + "\" is not a JSON object (zrepro config --config " + path + " names the error)");
  return c;
}

// [Note: a reproduction the log tells apart] The diagnosis to reproduce: the log's own, or
// with --as the open scenario the user picked. Ambiguous without --as: written as named
// and said so; --run refuses to pick for the user.
Diagnosis chosen_diagnosis(const Diagnosis& d, const cxxopts::ParseResult& r, const std::string& templ_dir) {
  const std::vector<std::string> open = open_scenarios(d, scenario_names(templ_dir));
  std::string list;
  for (const std::string& n : open) list += (list.empty() ? "" : ", ") + n;
  Diagnosis chosen = d;
  if (r.count("as")) {
    const std::string as = r["as"].as<std::string>();
    if (std::find(open.begin(), open.end(), as) == open.end())
      throw ConfigError("--as: got \"" + as + "\", expected one of the scenarios this log leaves open (" + list +
                        "): --as picks among them, it does not override what the log shows");
    chosen.scenario = as;
    return chosen;
  }
  if (open.size() <= 1) return chosen;
  std::cout << "[zrepro diagnose] the log does not tell these apart: " << list << " (" << d.confidence
            << "); what would: " << (d.alternatives.empty() ? std::string("more of the log") : d.alternatives.front())
            << std::endl;
  if (r.count("run"))
    throw ConfigError("--run: the log leaves " + std::to_string(open.size()) + " scenarios open (" + list +
                      "), and a reproduction of the wrong one would verify a fix the job does not need: add --as NAME "
                      "to reproduce one of them, or give more of the log (every rank's lines, the watchdog's)");
  return chosen;
}

// --write-scenario DIR [--run]: the reproduction written, then (with --run) run on this
// machine ([Note: a reproduction this machine can run]).
int write_and_run(const Diagnosis& log_diagnosis, const std::string& log, const cxxopts::ParseResult& r,
                  const json& user_config, const PlanAnswer& plan) {
  if (!r.count("config")) throw ConfigError("--write-scenario: needs --config (the job's DeepSpeed config is side A)");
  const std::string templ_dir = scenarios_dir(opt<std::string>(r, "scenarios-dir"));
  const Diagnosis d = chosen_diagnosis(log_diagnosis, r, templ_dir);
  if (d.scenario.empty()) {  // none named, none picked (--as can pick one the log leaves open)
    std::cout << "[zrepro diagnose] no known fingerprint: no reproduction written" << std::endl;
    return kExitAbNoFailure;
  }
  JobSetup job{opt<std::string>(r, "model"), opt<int>(r, "world-size"), opt<std::string>(r, "device-memory"),
               r.count("job-args") ? words("--job-args", r["job-args"].as<std::string>()) : std::vector<std::string>{}};
  const json templ = load_scenario(templ_dir + "/" + d.scenario + "/scenario.json");
  const std::string dir = r["write-scenario"].as<std::string>();
  std::filesystem::path where = std::filesystem::absolute(dir).lexically_normal();
  if (where.filename().empty()) where = where.parent_path();  // "DIR/"
  const std::string name = where.filename().string();
  const Reproduction rep =
      build_reproduction(d, name, log, templ, user_config, job, plan);
  write_reproduction(rep, dir);
  std::cout << "[zrepro diagnose] wrote " << dir << ": ds_config.json (side A) and " << rep.fixes.size()
            << " candidate fix(es):";
  for (size_t i = 0; i < rep.fixes.size(); ++i) std::cout << " fix_" << i + 1 << " " << rep.fixes[i].name << ";";
  std::cout << "\n[zrepro diagnose] run it: zrepro scenario run " << name << " --dir " << where.parent_path().string()
            << std::endl;
  if (!r.count("run")) return kExitOk;
  const MachineRun m = run_on_this_machine(rep.scenario, cpu_slots());
  if (!m.note.empty()) std::cout << "[zrepro diagnose] " << m.note << std::endl;
  return run_scenario(where.parent_path().string(), name, m.ranks,
                      r.count("out") ? r["out"].as<std::string>() : where.string() + "/out", m.ab_flags);
}

cxxopts::Options diagnose_options() {
  cxxopts::Options o("zrepro diagnose", "From a failed job's log to the scenario it matches, the evidence lines, "
                                        "the numbers and what to try.");
  o.add_options("diagnose")
      ("log", "the log file (plain or .gz; several ranks interleaved are fine), or a folder of PyTorch Flight Recorder dumps (TORCH_NCCL_DUMP_ON_TIMEOUT=1), or one dump", cxxopts::value<std::string>())
      ("config", "the job's DeepSpeed config: ask the planner whether it predicts what the log shows",
       cxxopts::value<std::string>())
      ("model", "the job's model (preset or HF config.json), with --config", cxxopts::value<std::string>())
      ("world-size", "the job's ranks, with --config", cxxopts::value<int>())
      ("device-memory", "the job's device capacity (a100-40gb, 80GB, ...), with --config", cxxopts::value<std::string>())
      ("write-scenario", "write a ready reproduction to this new folder: the job's config as side A, the candidate "
                         "fixes as configs beside it (needs --config; an OOM also --model)", cxxopts::value<std::string>())
      ("job-args", "flags zrepro plan and run both take that describe the job: --activation-checkpointing, "
                   "--micro-batch, --seq, ... (planned, and given to both sides)",
       cxxopts::value<std::string>())
      ("run", "with --write-scenario: reproduce it and verify each fix (zrepro scenario run); rank counts above this "
              "machine's cores run as virtual ranks (memory, numerics) or capped at the cores (hangs, timing)")
      ("as", "with --write-scenario: the scenario to reproduce when the log leaves several open (it names them)",
       cxxopts::value<std::string>())
      ("out", "with --run: output folder (default DIR/out)", cxxopts::value<std::string>())
      ("scenarios-dir", "the scenario catalogue (default configs/scenarios)", cxxopts::value<std::string>())
      ("read-limit", "a UTF-16 log (read whole, not streamed): the most of it held, its first eighth and last seven eighths",
       cxxopts::value<std::string>()->default_value(kDefaultReadLimit))
      ("json", "print the diagnosis as JSON")
      ("h,help", "show this help");
  o.parse_positional({"log"});
  return o;
}

// `zrepro plan`'s flags for the job the log came from: its config, model, ranks, device (the
// flag's, else the capacity the OOM message printed) and --job-args.
std::vector<std::string> job_plan_args(const cxxopts::ParseResult& r, const Diagnosis& d) {
  std::vector<std::string> args = {"--config", r["config"].as<std::string>()};
  if (r.count("model")) args.insert(args.end(), {"--model", r["model"].as<std::string>()});
  if (r.count("world-size")) args.insert(args.end(), {"--world-size", std::to_string(r["world-size"].as<int>())});
  if (r.count("device-memory"))
    args.insert(args.end(), {"--device-memory", r["device-memory"].as<std::string>()});
  else if (d.numbers.capacity_bytes.value_or(0) > 0)
    args.insert(args.end(), {"--device-memory", std::to_string(*d.numbers.capacity_bytes)});
  if (r.count("job-args")) {  // flags plan and run both take: the job's model, batch, checkpointing
    const auto job = words("--job-args", r["job-args"].as<std::string>());
    args.insert(args.end(), job.begin(), job.end());
  }
  return args;
}

// The diagnosis on the terminal: what was read, the diagnosis, the planner's agreement.
void print_diagnosis(const Diagnosis& d, LogKind kind) {
  if (d.read.log_read) std::cout << "[zrepro diagnose] " << *d.read.log_read << "\n";
  if (kind == LogKind::utf16) std::cout << "[zrepro diagnose] the log is UTF-16: read as such\n";
  std::cout << d.to_text();
  if (d.planner)
    std::cout << "  planner: " << d.planner->planned_verdict
              << (d.planner->agrees ? " (agrees with the log)" : " (does NOT agree with the log)") << " "
              << json_text(d.to_json()["planner"], -1) << "\n";
}

// What --write-scenario needs, and one LOG, checked before the log is read.
void check_diagnose_flags(const cxxopts::ParseResult& r) {
  if (r.count("write-scenario")) {
    if (r["write-scenario"].as<std::string>().empty())
      throw ConfigError("--write-scenario: got \"\", expected the new folder to write the reproduction to");
    if (!r.count("config")) throw ConfigError("--write-scenario: needs --config (the job's DeepSpeed config is side A)");
    const std::string dir = r["write-scenario"].as<std::string>();
    if (std::filesystem::exists(dir))
      throw ConfigError("--write-scenario: \"" + dir + "\" exists; give a new folder (nothing is overwritten)");
    const std::string templ_dir = scenarios_dir(opt<std::string>(r, "scenarios-dir"));
    if (!std::filesystem::is_directory(templ_dir))
      throw ConfigError("--scenarios-dir: \"" + templ_dir + "\" is not a folder of scenarios (configs/scenarios)");
  } else if (r.count("run")) {
    throw ConfigError("--run: needs --write-scenario DIR (the folder to write and run)");
  if (r.count("as") && !r.count("write-scenario"))
    throw ConfigError("--as: needs --write-scenario DIR (it picks the scenario a reproduction is written for)");
  }
  if (!r.unmatched().empty())
    throw ConfigError("one LOG at a time, got also \"" + r.unmatched().front() +
                      "\": for one log per rank, diagnose each, or concatenate them (cat rank*.log > all.log)");
}

int diagnose(const cxxopts::Options& o, const cxxopts::ParseResult& r) {
  if (!r.count("log")) {
    std::cout << o.help() << std::endl;
    return kExitBadInput;
  }
  const std::string path = r["log"].as<std::string>();
  check_diagnose_flags(r);
  const json user_config = r.count("config") ? read_user_config(r["config"].as<std::string>()) : json();
  if (const auto rows = flight_recorder_rows(path)) {
    Diagnosis d = diagnose_flight_recorder(*rows);
    d.read.flight_recorder_ranks = static_cast<int64_t>(rows->size());
    std::cout << (r.count("json") ? json_text(d.to_json()) + "\n" : "[zrepro diagnose] " + std::to_string(rows->size()) +
                                                          " Flight Recorder dump(s) in " + path + "\n" + d.to_text());
    return d.scenario.empty() && d.cause.empty() ? kExitAbNoFailure : kExitOk;
  }
  StreamedLog log = stream_log(path, parse_size("--read-limit", r["read-limit"].as<std::string>()));
  const LogKind kind = log.kind;
  if (kind == LogKind::binary)
    throw ConfigError("LOG: \"" + path + "\" is binary, not a text log (NUL bytes, or a tenth of its start neither "
                      "text nor terminal control); give the job's text output (a .gz of it is read as such)");
  if (kind == LogKind::empty) {
    std::cout << "[zrepro diagnose] LOG \"" << path << "\" is empty: nothing to diagnose" << std::endl;
    return kExitAbNoFailure;
  }
  Diagnosis d = diagnose_scan(std::move(log.scan), user_config);
  d.read.log_bytes = log.total;
  d.read.log_encoding = log_kind_name(kind);
  if (!log.note.empty()) d.read.log_read = log.note;
  PlanAnswer plan;
  if (r.count("config")) {
    plan = plan_job(job_plan_args(r, d));
    d.planner = planner_check(d, plan);
  }
  if (r.count("json"))
    std::cout << json_text(d.to_json()) << std::endl;
  else
    print_diagnosis(d, kind);
  if (r.count("write-scenario")) return write_and_run(d, path, r, user_config, plan);
  return d.scenario.empty() ? kExitAbNoFailure : kExitOk;
}

}  // namespace

int diagnose_command(int argc, char** argv) {
  cxxopts::Options o = diagnose_options();
  return command_main(o, argc, argv, [&](const cxxopts::ParseResult& r) { return diagnose(o, r); }, nullptr,
                      Words::the_command_reads_them);
}

}  // namespace zrepro
