// zrepro diagnose on logs users really pasted: tests/data/diagnose_corpus/ holds real logs
// from public GitHub issues, each with its source, versions, the cause the thread
// established and the fix that worked (index-*.json). [Note: the diagnose corpus] For
// every log the test runs diagnose and compares it with the thread's cause: the checkpoint,
// the catalogue scenario when there is one, the cause word (Diagnosis::cause); a log
// outside DeepSpeed must get no diagnosis. Each entry records whether zrepro names the
// cause ("named") and, when not, why ("miss"): a log that stops being named fails (a
// regression), and one that starts being named fails too until its record says so, so
// the score in docs/lab/DIAGNOSE_CORPUS.md is always the measured one. The page is
// generated (ZREPRO_WRITE_CORPUS_DOC=1 build/zrepro_unit_tests --gtest_filter=DiagnoseCorpus.*).
#include <gtest/gtest.h>

#include <array>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "tests/support/process.h"
#include "trainer/diagnose/diagnose.h"
#include "trainer/diagnose/log_text.h"

using namespace zrepro;
using json = nlohmann::json;

namespace {

const std::string kCorpus = std::string(ZREPRO_SOURCE_DIR).append("/tests/data/diagnose_corpus/");
const std::string kCorpusPage = std::string(ZREPRO_SOURCE_DIR).append("/docs/lab/DIAGNOSE_CORPUS.md");

struct Case {
  std::string file;
  json entry, got;
  bool named = false;
  bool held_out = false;  // heldout/: collected after the rules were frozen, never used to write one
};

// A diagnosis that is not the thread's: no answer (refused) or another one (wrong). A wrong
// name is worse: --write-scenario would reproduce a mechanism the log rules out.
bool answered(const json& got) { return !got["checkpoint"].is_null() || !got["scenario"].is_null(); }

// Does the diagnosis name the thread's cause?
bool names(const json& want, const json& got) {
  if (want.value("refuse", false)) return got["checkpoint"].is_null() && got["scenario"].is_null();
  if (got["checkpoint"] != want.value("checkpoint", json())) return false;
  if (want.value("scenario", json()).is_string() && got["scenario"] != want["scenario"]) return false;
  if (want.value("cause", json()).is_string() && got["cause"] != want["cause"]) return false;
  return true;
}

// The logs of one folder's index-*.json files.
void read_part(const std::string& dir, bool held_out, std::vector<Case>& cases) {
  std::vector<std::string> indexes;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().filename().string().rfind("index-", 0) == 0) indexes.push_back(e.path().string());
  std::sort(indexes.begin(), indexes.end());
  for (const auto& index : indexes) {
    const json entries = json::parse(zrepro_test::read_text(index));  // items() of a temporary would dangle
    for (const auto& [file, entry] : entries.items()) {
      Case c{file, entry, nullptr, false, held_out};
      std::string text = zrepro_test::read_text(dir + file);
      normalise_log(text);
      c.got = diagnose_log(text).to_json();
      c.named = names(entry["expected"], c.got);
      cases.push_back(c);
    }
  }
}

std::vector<Case> corpus() {
  std::vector<Case> cases;
  read_part(kCorpus, false, cases);
  if (std::filesystem::exists(kCorpus + "heldout/")) read_part(kCorpus + "heldout/", true, cases);
  return cases;
}

std::string cell(const json& v) { return v.is_null() ? "-" : v.is_string() ? v.get<std::string>() : v.dump(); }

std::string expected_text(const json& w) {
  if (w.value("refuse", false)) return "refused";
  std::string t = cell(w.value("checkpoint", json()));
  if (w.value("scenario", json()).is_string()) t += " / " + w["scenario"].get<std::string>();
  if (w.value("cause", json()).is_string()) t += " (" + w["cause"].get<std::string>() + ")";
  return t;
}

std::string got_text(const json& g) {
  if (g["checkpoint"].is_null() && g["scenario"].is_null())
    return g["cause"].is_string() ? "none (" + g["cause"].get<std::string>() + ")" : "none";
  std::string t = cell(g["checkpoint"]);
  if (g["scenario"].is_string()) t += " / " + g["scenario"].get<std::string>();
  if (g["cause"].is_string()) t += " (" + g["cause"].get<std::string>() + ")";
  return t;
}

// One part's score: named, refused (no answer), named wrong (another answer), logs.
struct Score {
  int named = 0, refused = 0, wrong = 0, logs = 0;
  std::string text() const {
    return "**" + std::to_string(named) + " of " + std::to_string(logs) + "** named (" + std::to_string(refused) +
           " refused, " + std::to_string(wrong) + " named wrong)";
  }
};

// in_deepspeed: only the logs whose thread established a cause zrepro names (not a refusal),
// where a refusal is no longer the right answer: the score that does not flatter.
Score score(const std::vector<Case>& cases, bool held_out, bool in_deepspeed = false) {
  Score sc;
  for (const auto& c : cases) {
    if (c.held_out != held_out) continue;
    if (in_deepspeed && c.entry["expected"].value("refuse", false)) continue;
    ++sc.logs;
    if (c.named) ++sc.named;
    else if (answered(c.got)) ++sc.wrong;
    else ++sc.refused;
  }
  return sc;
}

std::string page(const std::vector<Case>& cases) {
  std::map<std::string, std::array<int, 4>> by_class;  // named, logs; held out: named, logs
  for (const auto& c : cases) {
    auto& v = by_class[c.entry.value("class", std::string("?"))];
    v[c.held_out ? 2 : 0] += c.named, ++v[c.held_out ? 3 : 1];
  }
  std::ostringstream o;
  o << "# zrepro diagnose on real logs\n\n"
    << "<!-- Generated by tests/trainer/diagnose/diagnose_corpus_test.cpp from tests/data/diagnose_corpus/; do not edit by hand.\n"
    << "     `ZREPRO_WRITE_CORPUS_DOC=1 build/zrepro_unit_tests --gtest_filter=DiagnoseCorpus.*` rewrites it. -->\n\n"
    << "Logs DeepSpeed and Hugging Face users pasted into public issues, each with the cause its thread "
       "established ([Note: the diagnose corpus] in the test). A log is **named** when `zrepro diagnose` gives the "
       "thread's checkpoint, its catalogue scenario where one exists, and its cause word; a log outside DeepSpeed "
       "is named when diagnose refuses it. A log not named is **refused** (no answer) or **named wrong** (another "
       "answer: worse, since a reproduction written from it reproduces a mechanism the log rules out).\n\n"
    << "- The logs the rules were written from (tests/data/diagnose_corpus/): " << score(cases, false).text() << ".\n"
    << "- **Held out** (tests/data/diagnose_corpus/heldout/: collected after the rules were frozen, never used to "
       "write a rule or tune one; the measure of what diagnose does on a log nobody here has read): "
    << score(cases, true).text() << "; of those whose cause is one zrepro names (a refusal is right for the rest): "
    << score(cases, true, true).text() << ".\n\n"
    << "| class | named | logs | held out: named | held out: logs |\n|---|---|---|---|---|\n";
  for (const auto& [cls, v] : by_class)
    o << "| " << cls << " | " << v[0] << " | " << v[1] << " | " << v[2] << " | " << v[3] << " |\n";
  o << "\n| log | source | the thread's cause | expected | diagnose | named |\n|---|---|---|---|---|---|\n";
  for (const auto& c : cases) {
    std::string cause = c.entry.value("cause", std::string());
    for (char& ch : cause)
      if (ch == '|' || ch == '\n') ch = ' ';
    o << "| " << (c.held_out ? "heldout/" : "") << c.file << " | " << c.entry.value("source", std::string()) << " | " << cause << " | "
      << expected_text(c.entry["expected"]) << " | " << got_text(c.got) << " | " << (c.named ? "yes" : "**no**") << " |\n";
  }
  o << "\n## The misses, and why\n\n";
  for (const auto& c : cases)
    if (!c.named) o << "- " << (c.held_out ? "heldout/" : "") << c.file << ": " << c.entry.value("diagnosis", json::object()).value("miss", std::string("?")) << "\n";
  return o.str();
}

}  // namespace

TEST(DiagnoseCorpus, EveryLogIsNamedOrMissedAsRecorded) {
  const std::vector<Case> cases = corpus();
  ASSERT_GE(cases.size(), 85u) << "the corpus holds at least 85 real logs";
  for (const auto& c : cases) {
    const json record = c.entry.value("diagnosis", json::object());
    ASSERT_TRUE(record.contains("named")) << c.file << ": no diagnosis record";
    EXPECT_EQ(c.named, record["named"].get<bool>())
        << c.file << " (" << c.entry.value("source", std::string()) << "): expected " << expected_text(c.entry["expected"])
        << ", diagnose says " << got_text(c.got) << "\n" << c.got.dump(1).substr(0, 3000);
    if (!c.named) {
      EXPECT_FALSE(record.value("miss", std::string()).empty()) << c.file << ": a miss says why";
    }
    EXPECT_FALSE(c.entry.value("source", std::string()).empty()) << c.file << ": provenance";
  }
}

TEST(DiagnoseCorpus, ThePageIsTheMeasuredScore) {
  const std::string text = page(corpus());
  if (std::getenv("ZREPRO_WRITE_CORPUS_DOC")) std::ofstream(kCorpusPage) << text;
  EXPECT_EQ(zrepro_test::read_text(kCorpusPage), text) << "docs/lab/DIAGNOSE_CORPUS.md is stale: ZREPRO_WRITE_CORPUS_DOC=1 "
                                  "build/zrepro_unit_tests --gtest_filter=DiagnoseCorpus.*";
}
