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
#include <set>
#include <sstream>

#include "tests/support/process.h"
#include "trainer/diagnose/diagnose.h"
#include "trainer/diagnose/evidence.h"
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
  // spent-heldout/: held out once, scored then (the entry's held_out_result), since used to
  // write rules ([Note: a held-out set is spent once]); part of the rules' corpus now.
  bool spent = false;
  bool written_here = false;  // tests/trainer/diagnose/diagnose_logs/: zrepro's own output, and logs written here
  std::string text;       // normalised
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
enum class Part { rules, spent, held_out };
void read_part(const std::string& dir, Part part, std::vector<Case>& cases) {
  std::vector<std::string> indexes;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().filename().string().rfind("index-", 0) == 0) indexes.push_back(e.path().string());
  std::sort(indexes.begin(), indexes.end());
  for (const auto& index : indexes) {
    const json entries = json::parse(zrepro_test::read_text(index));  // items() of a temporary would dangle
    for (const auto& [file, entry] : entries.items()) {
      Case c{file, entry, nullptr, false, part == Part::held_out, part == Part::spent, false,
             zrepro_test::read_text(dir + file)};
      normalise_log(c.text);
      c.got = diagnose_log(c.text).to_json();
      c.named = names(entry["expected"], c.got);
      cases.push_back(c);
    }
  }
}

std::vector<Case> corpus() {
  std::vector<Case> cases;
  read_part(kCorpus, Part::rules, cases);
  read_part(kCorpus + "spent-heldout/", Part::spent, cases);
  if (std::filesystem::exists(kCorpus + "heldout/")) read_part(kCorpus + "heldout/", Part::held_out, cases);
  return cases;
}

// The logs zrepro's own tests wrote (its run output, Flight Recorder-style lines), with
// their expected diagnosis: rules that read zrepro's own lines are needed there.
std::vector<Case> written_here() {
  const std::string dir = std::string(ZREPRO_SOURCE_DIR).append("/tests/trainer/diagnose/diagnose_logs/");
  const json expected = json::parse(zrepro_test::read_text(dir + "expected.json"));
  std::vector<Case> cases;
  for (const auto& [file, want] : expected.items()) {
    Case c{file, {{"expected", want}}, nullptr, false, false, false, true, zrepro_test::read_text(dir + file)};
    normalise_log(c.text);
    c.got = diagnose_log(c.text).to_json();
    c.named = names(want, c.got);
    cases.push_back(c);
  }
  return cases;
}

// The fingerprints no stored log needs yet, each with what it is for. [Note: a rule no log
// needs is dead]: a fingerprint outside this list that no log needs fails the test (remove
// it, or add the real log that needs it), and so does one in it that a log comes to need
// (take it off). The list only shrinks; the page shows it.
const std::map<std::string, std::string> kUnproven = {
    {"completed_steps", "context: the steps a job completed (numbers.completed_steps), for the wording of a hang or a kill"},
    {"divergent_gathers", "gloo's and zrepro's form of MoE gathers that differ; the real MoE logs are named by their watchdog and trace-cache lines"},
    {"eval_work", "context for a hang: evaluation or saving on some ranks (rank0-eval-hang)"},
    {"forward_alone", "zrepro's own line for a forward some ranks ran alone"},
    {"generate_work", "context for a hang: generation on some ranks (generate-early-eos)"},
    {"model_state_share", "zrepro's own scale-down table (numbers only)"},
    {"offload_pageable", "speed: an offload block with pin_memory false (pageable-copies)"},
    {"pinned_frame", "context for an OOM raised a few frames under a page-locked allocation (numbers.pinned_allocation_oom)"},
    {"save_gather", "zrepro's own message for the 16-bit gather at a save; no real log of it names the gather"},
    {"sigkill", "the launchers' SIGKILL lines beside a host kill"},
    {"straggler", "zrepro's own straggler line"},
    {"trainer_mismatch_key", "the Trainer's per-key mismatch lines (which key, for the fix)"},
    {"zero_stage", "context: the job's ZeRO stage (numbers.zero_stage)"},
};

// What a user reads first of a diagnosis: the checkpoint, the scenario, the cause and how sure.
bool same_answer(const json& a, const json& b) {
  for (const char* k : {"checkpoint", "scenario", "cause", "confidence"})
    if (a.value(k, json()) != b.value(k, json())) return false;
  return true;
}

// [Note: a rule no log needs is dead] A fingerprint is needed by a log diagnose names when
// the log, read as if the fingerprint's row were not in the table (LogScanner's
// `ignored`), gets another answer: another checkpoint, scenario or cause, or the same
// said with another confidence. Each fingerprint's logs, by part: [0] the rules' corpus,
// [1] held out, [2] written here.
using Needs = std::map<std::string, std::array<std::vector<std::string>, 3>>;
Needs needs(const std::vector<Case>& cases) {
  Needs n;
  for (const std::string& id : diagnosis::fingerprint_ids()) {
    auto& parts = n[id];
    for (const auto& c : cases) {
      if (!c.named) continue;
      const json got = diagnose_scan(diagnosis::scan(c.text, {id})).to_json();
      if (!same_answer(c.got, got)) parts[c.written_here ? 2 : c.held_out ? 1 : 0].push_back(c.file);
    }
  }
  return n;
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

// [Note: a held-out set is spent once] A held-out log is scored once, before anyone reads
// what diagnose does with it. Once its misses are used to write a rule the whole set it
// came in is spent (moving only its misses out would flatter the rest of the set): its
// logs move to spent-heldout/ with the score they had while held out (held_out_result),
// and what measures diagnose from then on is a set collected after that.
int round_of(const Case& c) { return c.entry.value("held_out_result", json::object()).value("round", 0); }
Score score_when_held_out(const std::vector<Case>& cases, int round, bool in_deepspeed = false) {
  Score sc;
  for (const auto& c : cases) {
    if (!c.spent || round_of(c) != round || (in_deepspeed && c.entry["expected"].value("refuse", false))) continue;
    const json r = c.entry.value("held_out_result", json::object());
    ++sc.logs;
    const std::string answer = r.value("answer", std::string());
    if (answer == "named") ++sc.named;
    else if (answer == "named wrong") ++sc.wrong;
    else ++sc.refused;
  }
  return sc;
}

// The rules and the logs that need them, for the page: counts and up to three names.
std::string needs_table(const Needs& n) {
  auto names_of = [](const std::vector<std::string>& v) {
    if (v.empty()) return std::string("-");
    std::string t = std::to_string(v.size()) + ":";
    for (size_t i = 0; i < v.size() && i < 3; ++i) t += (i ? ", " : " ") + v[i];
    return t + (v.size() > 3 ? ", ..." : "");
  };
  std::ostringstream o;
  o << "\n## The rules and the logs that need them\n\n"
    << "A fingerprint (a row of the table in trainer/diagnose/evidence.cpp) is **needed** by a log when the log, read "
       "as if that row were not there, gets another answer (checkpoint, scenario, cause or confidence) ([Note: a rule no log needs is dead] in the test). Every "
       "fingerprint is needed by at least one log or listed below with what it is for; a new rule no log needs fails the test. \"Written "
       "here\" are zrepro's own logs (tests/trainer/diagnose/diagnose_logs/: its run output, which diagnose reads too).\n\n"
    << "| fingerprint | the rules' corpus | held out | written here |\n|---|---|---|---|\n";
  int needed = 0;
  for (const auto& [id, parts] : n) {
    needed += !kUnproven.count(id);
    o << "| `" << id << "` | " << names_of(parts[0]) << " | " << names_of(parts[1]) << " | " << names_of(parts[2]) << " |\n";
  }
  o << "\n" << needed << " of " << n.size() << " fingerprints are needed by a stored log. The " << kUnproven.size()
    << " no stored log needs yet, and what each is for (the test's kUnproven: it only shrinks):\n\n";
  for (const auto& [id, why] : kUnproven) o << "- `" << id << "`: " << why << "\n";
  return o.str();
}

// Each spent round's score as it was while held out ([Note: a held-out set is spent once]).
std::string spent_rounds(const std::vector<Case>& cases) {
  std::set<int> rounds;
  for (const auto& c : cases)
    if (c.spent) rounds.insert(round_of(c));
  std::ostringstream o;
  for (int r : rounds)
    o << "- **Held out, round " << r << "** (spent-heldout/, sets whose held_out_result.round is " << r
      << ": collected after the rules were frozen, scored while held out, then spent by writing rules from their "
         "misses ([Note: a held-out set is spent once] in the test)): "
      << score_when_held_out(cases, r).text() << " when held out; of those whose cause is one zrepro names: "
      << score_when_held_out(cases, r, true).text() << ".\n";
  return o.str();
}

std::string folder(const Case& c) { return c.held_out ? "heldout/" : c.spent ? "spent-heldout/" : ""; }

std::string page(const std::vector<Case>& cases, const Needs& n) {
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
    << "- The logs the rules were written from (tests/data/diagnose_corpus/, and spent-heldout/ since the rules were "
       "written from its misses): " << score(cases, false).text() << ".\n"
    << spent_rounds(cases)
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
    o << "| " << folder(c) << c.file << " | " << c.entry.value("source", std::string()) << " | " << cause << " | "
      << expected_text(c.entry["expected"]) << " | " << got_text(c.got) << " | " << (c.named ? "yes" : "**no**") << " |\n";
  }
  o << "\n## The misses, and why\n\n";
  for (const auto& c : cases)
    if (!c.named) o << "- " << folder(c) << c.file << ": " << c.entry.value("diagnosis", json::object()).value("miss", std::string("?")) << "\n";
  o << needs_table(n);
  return o.str();
}

// The corpus and zrepro's own logs together: what the rules are measured against.
std::vector<Case> every_log() {
  std::vector<Case> all = corpus(), here = written_here();
  all.insert(all.end(), here.begin(), here.end());
  return all;
}

}  // namespace

TEST(DiagnoseCorpus, EveryLogIsNamedOrMissedAsRecorded) {
  const std::vector<Case> cases = corpus();
  ASSERT_GE(cases.size(), 100u) << "the corpus holds at least 100 real logs";
  for (const auto& c : cases) {
    const json record = c.entry.value("diagnosis", json::object());
    ASSERT_TRUE(record.contains("named")) << c.file << ": no diagnosis record";
    EXPECT_EQ(c.named, record["named"].get<bool>())
        << c.file << " (" << c.entry.value("source", std::string()) << "): expected " << expected_text(c.entry["expected"])
        << ", diagnose says " << got_text(c.got) << "\n" << c.got.dump(1).substr(0, 3000);
    if (!c.named) {
      EXPECT_FALSE(record.value("miss", std::string()).empty()) << c.file << ": a miss says why";
    }
    if (c.spent) {
      const std::string answer = c.entry.value("held_out_result", json::object()).value("answer", std::string());
      EXPECT_GE(round_of(c), 1) << c.file << ": a spent held-out log says in which round it was held out";
      EXPECT_TRUE(answer == "named" || answer == "refused" || answer == "named wrong")
          << c.file << ": a spent held-out log keeps its held-out answer (held_out_result.answer), not \"" << answer << "\"";
    }
    EXPECT_FALSE(c.entry.value("source", std::string()).empty()) << c.file << ": provenance";
  }
}

// [Note: a rule no log needs is dead]
TEST(DiagnoseCorpus, EveryFingerprintIsNeededByALog) {
  for (const auto& [id, parts] : needs(every_log())) {
    const bool needed = !(parts[0].empty() && parts[1].empty() && parts[2].empty());
    if (kUnproven.count(id)) {
      EXPECT_FALSE(needed) << "fingerprint " << id << ": a log needs it now; take it off kUnproven";
    } else {
      EXPECT_TRUE(needed) << "fingerprint " << id << ": no log needs it (every log gets the same answer without it): "
                             "a dead rule; remove it from trainer/diagnose/evidence.cpp, or add the real log that "
                             "needs it to the corpus";
    }
  }
}

TEST(DiagnoseCorpus, ThePageIsTheMeasuredScore) {
  const std::vector<Case> cases = corpus();
  const std::string text = page(cases, needs(every_log()));
  if (std::getenv("ZREPRO_WRITE_CORPUS_DOC")) std::ofstream(kCorpusPage) << text;
  EXPECT_EQ(zrepro_test::read_text(kCorpusPage), text) << "docs/lab/DIAGNOSE_CORPUS.md is stale: ZREPRO_WRITE_CORPUS_DOC=1 "
                                  "build/zrepro_unit_tests --gtest_filter=DiagnoseCorpus.*";
}
