// `zrepro check --suite DIR` / `--save-suite DIR` ([Note: a check suite], check.h) and the
// JUnit XML a CI displays.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "device/base/errors.h"
#include "device/base/utf8.h"
#include "trainer/app/check.h"
#include "trainer/app/cli.h"
#include "trainer/config/user_file.h"
#include "trainer/report/report.h"
#include "trainer/runtime/subprocess.h"

namespace zrepro {

using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

struct SuiteCase {
  std::string name, config, args_file, baseline;
};

// The configs of a suite folder, by name; ConfigError when there is none.
std::vector<SuiteCase> suite_cases(const std::string& dir) {
  if (!fs::is_directory(dir))
    throw ConfigError("--suite: \"" + dir + "\" is not a folder; expected a folder of DeepSpeed configs (NAME.json, "
                      "optional NAME.args) with their baselines in DIR/baselines/ (zrepro check --save-suite DIR)");
  std::vector<SuiteCase> cases;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (!e.is_regular_file() || e.path().extension() != ".json") continue;
    const std::string name = e.path().stem().string();
    cases.push_back({name, e.path().string(), (fs::path(dir) / (name + ".args")).string(),
                     (fs::path(dir) / "baselines" / (name + ".json")).string()});
  }
  std::sort(cases.begin(), cases.end(), [](const SuiteCase& a, const SuiteCase& b) { return a.name < b.name; });
  if (cases.empty())
    throw ConfigError("--suite: \"" + dir + "\" holds no DeepSpeed config (*.json); put the configs the check guards "
                      "there, each with an optional NAME.args of its run arguments");
  return cases;
}

// NAME.args: blank-separated words, `#` to the end of a line a comment. --config and --out
// are the suite's to give.
std::vector<std::string> case_args(const SuiteCase& c) {
  std::vector<std::string> args = {"--config", c.config};
  if (!fs::exists(c.args_file)) return args;
  std::istringstream lines(read_user_file("--suite", c.args_file, "the run arguments of " + c.name + ".json"));
  std::string line, word;
  while (std::getline(lines, line)) {
    std::istringstream words(line.substr(0, line.find('#')));
    while (words >> word) {
      if (word == "--config" || word == "--out" || word.rfind("--out=", 0) == 0 || word.rfind("--config=", 0) == 0)
        throw ConfigError("--suite: " + c.args_file + " gives " + word + "; leave --config and --out out (the suite "
                          "runs DIR/" + c.name + ".json into --work)");
      args.push_back(word);
    }
  }
  return args;
}

// One case: run it, then save its baseline or compare with it. A case that cannot run is
// an error of that case, not of the suite.
// A case under two real releases ([Note: check against the real releases]): no baseline.
void run_releases_case(const SuiteCase& c, const std::string& pair, const std::string& work, JUnitCase& out) {
  const ReleasesRun r = run_releases(pair, case_args(c), work + "/" + c.name);
  out.run_dir = r.run_dir, out.log = r.log;
  if (r.code != kExitOk) out.error = "the runs of the two releases did not finish (exit " + std::to_string(r.code) + ")";
  else out.result = r.result;
}

JUnitCase run_case(const SuiteCase& c, bool save, const std::string& work, const CheckTolerances& tol,
                   const std::optional<std::string>& deepspeed) {
  JUnitCase out{c.name, {}, "", 0, "", ""};
  const auto t0 = std::chrono::steady_clock::now();
  struct Timed {  // the case's time, however it ends
    JUnitCase& c;
    std::chrono::steady_clock::time_point t0;
    ~Timed() { c.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); }
  } timed{out, t0};
  try {
    if (deepspeed) {
      run_releases_case(c, *deepspeed, work, out);
      return out;
    }
    Baseline base;
    if (!save) {
      if (!fs::exists(c.baseline)) {
        out.error = "no baseline " + c.baseline + ": write the suite's baselines with zrepro check --save-suite DIR";
        return out;
      }
      base = read_baseline(c.baseline);
    }
    const std::string dir = work + "/" + c.name;
    make_out_dir(dir);
    std::vector<std::string> args = {"run"};
    for (const auto& a : case_args(c)) args.push_back(a);
    args.insert(args.end(), {"--out", dir + "/run"});
    out.run_dir = dir + "/run", out.log = dir + "/run.log";
    const int code = run_self(args, dir + "/run.log", c.name);
    std::cerr << "[zrepro check] " << c.name << ": zrepro run exit " << code << ", log " << dir << "/run.log" << std::endl;
    const Baseline now = baseline_of_run(dir + "/run", "--suite " + c.name);
    if (save) {
      fs::create_directories(fs::path(c.baseline).parent_path());
      write_json_file(c.baseline, now.to_json());
      return out;
    }
    out.result = check_against(base, now, tol);
  } catch (const ConfigError& e) {
    out.error = e.what();
  }
  return out;
}

// Valid UTF-8 (a name's other bytes become U+FFFD, as do U+FFFE and U+FFFF: XML 1.0 allows
// no others), escaped.
std::string xml_escaped(const std::string& raw) {
  std::string s = valid_utf8(raw);
  for (const char* never : {"\xEF\xBF\xBE", "\xEF\xBF\xBF"})
    for (size_t at = s.find(never); at != std::string::npos; at = s.find(never, at)) s.replace(at, 3, "\xEF\xBF\xBD");
  std::string o;
  for (const char ch : s) {
    switch (ch) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&apos;"; break;
      default:
        // XML 1.0 allows tab, newline and carriage return among the control characters.
        if (static_cast<unsigned char>(ch) >= 0x20 || ch == '\t' || ch == '\n' || ch == '\r') o += ch;
    }
  }
  return o;
}

std::string junit_time(double seconds) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f", seconds);
  return b;
}

// What a CI shows beside a case: where its run wrote, and what was compared.
std::string system_out(const JUnitCase& c) {
  std::string s = c.run_dir.empty() ? "no run\n" : "run folder: " + c.run_dir + "\n";
  if (!c.log.empty()) s += "log: " + c.log + "\n";
  if (c.error.empty() && !c.result.rows.empty()) s += std::to_string(c.result.rows.size()) + " rows compared:\n" + c.result.table();
  return s;
}

}  // namespace

std::string junit_xml(const std::string& suite, const std::vector<JUnitCase>& cases) {
  int failures = 0, errors = 0;
  for (const auto& c : cases) {
    if (!c.error.empty()) ++errors;
    else if (!c.result.passed()) ++failures;
  }
  double total = 0;
  for (const auto& c : cases) total += c.seconds;
  std::ostringstream o;
  const std::string counts = "\" tests=\"" + std::to_string(cases.size()) + "\" failures=\"" + std::to_string(failures) +
                             "\" errors=\"" + std::to_string(errors) + "\" time=\"" + junit_time(total) + "\">\n";
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    << "<testsuites name=\"" << xml_escaped(suite) << counts << "  <testsuite name=\"" << xml_escaped(suite) << counts;
  for (const auto& c : cases) {
    o << "    <testcase classname=\"zrepro.check\" name=\"" << xml_escaped(c.name) << "\" time=\"" << junit_time(c.seconds)
      << "\">\n";
    if (!c.error.empty())
      o << "      <error message=\"" << xml_escaped(c.error) << "\" type=\"error\"/>\n";
    else if (!c.result.passed())
      o << "      <failure message=\"" << xml_escaped(c.result.headline()) << "\" type=\"" << xml_escaped(c.result.verdict())
        << "\">" << xml_escaped(c.result.table()) << "</failure>\n";
    o << "      <system-out>" << xml_escaped(system_out(c)) << "</system-out>\n    </testcase>\n";
  }
  o << "  </testsuite>\n</testsuites>\n";
  return o.str();
}

namespace suite_report {

// A case's verdict in the suite's table: ERROR, SAVED, or the comparison's.
std::string verdict_of(const JUnitCase& c, bool save) { return !c.error.empty() ? "ERROR" : save ? "SAVED" : c.result.verdict(); }

json case_json(const JUnitCase& c, bool save) {
  return {{"name", c.name}, {"verdict", verdict_of(c, save)}, {"error", c.error.empty() ? json(nullptr) : json(c.error)},
          {"comparison", save || !c.error.empty() ? json(nullptr) : c.result.to_json()}};
}

// The case's line, and its moved figures when it regressed.
std::string case_lines(const JUnitCase& c, bool save) {
  char line[256];
  std::snprintf(line, sizeof line, "  %-32s %-14s", c.name.c_str(), verdict_of(c, save).c_str());
  std::string out = line + c.error + "\n";
  if (c.error.empty() && !save && !c.result.passed()) out += c.result.table();
  return out;
}

std::string closing_line(const std::string& dir, size_t n, int bad, bool save) {
  const std::string verdict = bad == 0 ? (save ? "SAVED" : "PASS") : (save ? "ERROR" : "REGRESSION");
  return "[zrepro check] suite " + dir + ": " + std::to_string(n) + " config(s), " + std::to_string(bad) +
         (save ? " could not be saved" : " moved or could not run") + ": " + verdict + "\n";
}

}  // namespace suite_report

int check_suite(const std::string& dir, bool save, const std::string& work, const CheckTolerances& tol, bool as_json,
                const std::string& junit_path, const std::optional<std::string>& deepspeed) {
  using namespace suite_report;
  const std::vector<SuiteCase> cases = suite_cases(dir);
  for (const auto& c : cases) case_args(c);  // a wrong NAME.args is refused before any run
  std::vector<JUnitCase> done;
  for (size_t k = 0; k < cases.size(); ++k) {
    std::cerr << "[zrepro check] suite " << dir << ": " << (save ? "saving " : "checking ") << cases[k].name << " ("
              << k + 1 << "/" << cases.size() << ")" << std::endl;
    done.push_back(run_case(cases[k], save, work, tol, deepspeed));
  }
  int bad = 0;
  json j = json::array();
  std::string table;
  for (const auto& c : done) {
    const std::string verdict = verdict_of(c, save);
    bad += verdict != "PASS" && verdict != "SAVED";
    j.push_back(case_json(c, save));
    table += case_lines(c, save);
  }
  if (as_json) std::cout << json_text({{"suite", dir}, {"passed", bad == 0}, {"cases", j}}) << "\n";
  else std::cout << table << closing_line(dir, done.size(), bad, save);
  if (!junit_path.empty()) write_file_atomic(junit_path, junit_xml("zrepro check " + dir, done));
  return bad == 0 ? kExitOk : kExitCheckRegressed;
}

}  // namespace zrepro
