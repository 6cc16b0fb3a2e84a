// `zrepro scenario list | run` as a user runs them: every scenario.json is listed and
// valid (its configs exist), every scenario reproduces its symptom and verifies its fix
// through ab (and a failing side's log is recognised by `zrepro diagnose`), the straggler
// is named, and ab.html renders in headless Chromium.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "trainer/report/ab_doc.h"
#include "tests/scenarios/scenario_support.h"
#include "tests/support/process.h"

namespace {

const std::string kDir = std::string(ZREPRO_SOURCE_DIR).append("/configs/scenarios");

// What a user would tell `zrepro diagnose` about the job a catalogue scenario stands for:
// its model and device (the scenario's --model / --target-model, --device-memory /
// --target-device-memory), its world size (the rank count), activation checkpointing.
std::string job_flags(const nlohmann::json& spec, int ranks) {
  std::string model = "tiny", device, job;
  const auto& a = spec["args"];
  for (size_t i = 0; i < a.size(); ++i) {
    const std::string f = a[i];
    if ((f == "--model" || f == "--target-model") && i + 1 < a.size()) model = a[i + 1];
    if ((f == "--device-memory" || f == "--target-device-memory") && i + 1 < a.size()) device = a[i + 1];
    if (f == "--activation-checkpointing") job = " --job-args --activation-checkpointing";
  }
  return " --model " + model + (device.empty() ? "" : " --device-memory " + device) + " --world-size " +
         std::to_string(ranks) + job;
}

}  // namespace

TEST(ScenarioCommand, ListNamesEveryScenarioJsonAndTheirConfigsExist) {
  const auto list = zrepro_test::zrepro_cmd("scenario list --dir " + kDir);
  EXPECT_EQ(list.code, 0) << list.output;
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(kDir)) {
    const auto path = e.path() / "scenario.json";
    if (!std::filesystem::exists(path)) continue;
    ++n;
    std::ifstream in(path);
    const auto s = nlohmann::json::parse(in);
    EXPECT_EQ(s["name"], e.path().filename().string());
    EXPECT_NE(list.output.find(s["name"].get<std::string>() + ": "), std::string::npos) << list.output;
    for (const char* side : {"a", "b"})
      EXPECT_TRUE(std::filesystem::exists(e.path() / s[side]["config"].get<std::string>())) << path;
  }
  EXPECT_GE(n, 3);
}

// Every scenario of the catalogue, as `zrepro scenario run NAME` runs it: the symptom
// reproduced (with the log line users grep for), the fix verified, exit 0; a failing
// side's log is recognised by `zrepro diagnose`, and the reproduction it writes from that
// log and the failing config (`--write-scenario DIR --run`) reproduces and verifies a fix. The one
// exceptions: fragmentation on a CPU where its precondition does not hold (see
// Scenario.Fragmentation), and the "serial" scenarios, whose symptom is a throughput
// ratio that needs the cores to itself: CMakeLists.txt makes each a ctest run alone.
// Every scenario folder is its own test (ScenarioCommand/EveryScenario.ReproducesAndVerifies/NAME),
// so a failure names its scenario and ctest schedules them apart.
namespace {

std::vector<std::string> scenario_names() {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(kDir))
    if (std::filesystem::exists(e.path() / "scenario.json")) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

nlohmann::json scenario_spec(const std::string& name) {
  return nlohmann::json::parse(zrepro_test::read_text(kDir + "/" + name + "/scenario.json"));
}

// Whether the failing side's own log carries a fingerprint `zrepro diagnose` knows: a failure,
// or a speed symptom with DeepSpeed's timers on.
bool has_log_fingerprint(const std::string& name, const nlohmann::json& spec) {
  const std::string expect = spec.value("expect", "failure");
  const auto a_config =
      nlohmann::json::parse(zrepro_test::read_text(kDir + "/" + name + "/" + spec["a"]["config"].get<std::string>()));
  return expect == "failure" || expect == "refused" || a_config.value("wall_clock_breakdown", false);
}

}  // namespace

class EveryScenario : public testing::TestWithParam<std::string> {};

TEST_P(EveryScenario, ReproducesAndVerifies) {
  const std::string name = GetParam();
  const std::string dir = kDir + "/" + name;
  const auto spec = scenario_spec(name);
  if (spec.value("serial", false))
    GTEST_SKIP() << name << ": a throughput ratio, run alone by ctest as ScenarioSerial." << name;
  if (name == "fragmentation" && scenario_test::bf16_matmul_scratch_bytes() == 0)
    GTEST_SKIP() << "fragmentation: precondition absent on this CPU (Scenario.Fragmentation says why)";
  const std::string out = zrepro_test::fresh_dir("scenario_" + name);
  const auto r = zrepro_test::zrepro_cmd("scenario run " + name + " --dir " + kDir + " --out " + out, 300);
  EXPECT_EQ(r.code, 0) << name << "\n" << r.output;
  // [Note: a mechanism is not a fix]: a B that only leaves out A's --inject says so.
  const bool mechanism = spec.contains("b") && spec["b"]["config"] == spec["a"]["config"] &&
                         spec["b"].value("args", nlohmann::json::array()).empty() &&
                         spec["a"].value("args", nlohmann::json::array()).dump().find("--inject") != std::string::npos;
  EXPECT_NE(r.output.find(name + (mechanism ? ": symptom reproduced, mechanism reproduced: without side A's --inject"
                                            : ": symptom reproduced, fix verified")),
            std::string::npos)
      << r.output;
  const zrepro::AbDocument ab = zrepro::AbDocument::from_json(nlohmann::json::parse(zrepro_test::read_text(out + "/ab.json")));
  EXPECT_EQ(ab.outcome, "fixed") << name;
  // Issue 60: each scenario's failure carries its own cause and fix ("hint" in scenario.json:
  // the words its failing side's failure.hint must hold), not another scenario's.
  if (spec.contains("hint")) {
    for (const zrepro::AbRow& row : ab.rows) {
      if (row.side != "A" || !row.failure) continue;
      EXPECT_NE(row.failure->hint.find(spec["hint"].get<std::string>()), std::string::npos)
          << name << " on " << row.ranks << " rank(s): its hint lacks \"" << spec["hint"].get<std::string>()
          << "\": " << row.failure->hint;
    }
  }
  if (!has_log_fingerprint(name, spec)) return;
  // A failing side's own log, fed back through `zrepro diagnose`, is recognised as this scenario,
  // and the reproduction diagnose writes from it, with the scenario's failing config as the
  // user's, reproduces the symptom and verifies one of its candidate fixes.
  const std::string a_path = dir + "/" + spec["a"]["config"].get<std::string>();
  bool from_log = false;
  for (const zrepro::AbComparison& c : ab.comparisons) {
    if (!c.a_shows_symptom) continue;
    const std::string log = out + "/A_r" + std::to_string(c.ranks) + ".log";
    const auto d = zrepro_test::zrepro_cmd("diagnose " + log + " --config " + a_path + " --json", 60, false);
    EXPECT_EQ(d.code, 0) << name << ": " << d.output;
    EXPECT_EQ(nlohmann::json::parse(d.output)["scenario"], name) << d.output;
    const std::string rep = zrepro_test::fresh_dir("from_log_" + name) + "/" + name + "-from-log";
    const auto w = zrepro_test::zrepro_cmd("diagnose " + log + " --config " + a_path +
                                               job_flags(spec, c.ranks) + " --scenarios-dir " + kDir +
                                               " --write-scenario " + rep + " --run",
                                           600);
    EXPECT_EQ(w.code, 0) << name << " from its log:\n" << w.output;
    EXPECT_NE(w.output.find("symptom reproduced; fixes verified: "), std::string::npos) << w.output;
    const auto written = nlohmann::json::parse(zrepro_test::read_text(rep + "/scenario.json"));
    const std::string fix1 = written["fixes"][0]["config"];
    if (mechanism) {
      // The fix is side A without zrepro's stand-in: no copy of the job's config as a "fix".
      EXPECT_EQ(fix1, "ds_config.json") << rep;
      EXPECT_NE(w.output.find("mechanism reproduced (the fix lies in the job's code or data)"), std::string::npos)
          << w.output;
    } else {
      EXPECT_EQ(w.output.find("fixes verified: none"), std::string::npos) << w.output;
    }
    EXPECT_TRUE(std::filesystem::exists(rep + "/" + fix1) && std::filesystem::exists(rep + "/README.md")) << rep;
    from_log = true;
    break;
  }
  EXPECT_TRUE(from_log) << name << ": no side A run showed the symptom to diagnose";
}

INSTANTIATE_TEST_SUITE_P(ScenarioCommand, EveryScenario, testing::ValuesIn(scenario_names()),
                         zrepro_test::param_name);

TEST(ScenarioCommand, TheCatalogueKeepsItsBreadthAndRefusesAnUnknownName) {
  int runnable = 0, with_fingerprint = 0;
  for (const auto& name : scenario_names()) {
    const auto spec = scenario_spec(name);
    if (spec.value("serial", false)) continue;
    ++runnable;
    with_fingerprint += has_log_fingerprint(name, spec);
  }
  EXPECT_GE(runnable, 14);
  EXPECT_GE(with_fingerprint, 10) << "the failing scenarios and the non-serial speed ones with DeepSpeed's timers on";
  const auto unknown = zrepro_test::zrepro_cmd("scenario run no-such-thing --dir " + kDir);
  EXPECT_EQ(unknown.code, 2);
  EXPECT_NE(unknown.output.find("no-such-thing"), std::string::npos) << unknown.output;
}

// The straggler scenario's runs name the slow rank; the data loader scenario keeps the
// loader's pin_memory apart from offload's.
TEST(ScenarioCommand, StragglerIsNamedAndLoaderPinningIsReportedApart) {
  const std::string out = zrepro_test::fresh_dir("scenario_straggler_named");
  ASSERT_EQ(zrepro_test::zrepro_cmd("scenario run straggler --dir " + kDir + " --out " + out, 300).code, 0);
  const auto a = nlohmann::json::parse(zrepro_test::read_text(out + "/A_r2/summary.json"));
  EXPECT_EQ(a["time"]["straggler"]["rank"], 1) << a["time"].dump();
  EXPECT_NE(zrepro_test::read_text(out + "/A_r2.log").find("rank 1 is the straggler"), std::string::npos);
  // B has no injected straggler; on a loaded machine a descheduled rank may still be named
  // (it really was slower), so B is judged by the waits: A's longest is 3x B's (ab did that).

  const std::string pv = zrepro_test::fresh_dir("scenario_pinned_vs_loader");
  ASSERT_EQ(zrepro_test::zrepro_cmd("scenario run pinned-vs-dataloader --dir " + kDir + " --out " + pv, 300).code, 0);
  const auto s = nlohmann::json::parse(zrepro_test::read_text(pv + "/A_r1/summary.json"));
  EXPECT_EQ(s["data"]["loader"]["pin_memory"], true);
  EXPECT_GT(s["data"]["loader"]["pinned_bytes_peak"].get<int64_t>(), 0);
  EXPECT_EQ(s["offload"]["offload_optimizer"]["pin_memory"], false);
  EXPECT_EQ(s["offload"]["ranks"][0]["host_pinned_bytes"], 0) << "the loader's pinned batches are not offload's";
}

// ab.html as a browser renders it, for an OOM, a pinned-memory failure, a hang and an
// offload slowdown: Debian's headless Chromium loads the page (no network, no scripts)
// and its DOM leads with the outcome and the verdict, has the figure each kind needs,
// every rank's bars where the run trained and a loss axis that covers the losses
// without zooming past them; a screenshot of each page is kept in
// build/test-artefacts/ab-<scenario>.png.
struct AbPage {
  std::string scenario;
  std::vector<std::string> dom_has, dom_lacks;
  bool judged = true;  // the outcome is "fixed" (timing-based scenarios are not asserted)
  std::string run;     // side A's folder: its report.html is checked too
  std::vector<std::string> report_has;
};

class AbPageInChromium : public testing::TestWithParam<AbPage> {};

double ab_dom_attr(const std::string& dom, const std::string& name) {
  const size_t at = dom.find(name + "=\"");
  return at == std::string::npos ? NAN : std::stod(dom.substr(at + name.size() + 2));
}

TEST_P(AbPageInChromium, ShowsTheVerdictAndTheFigureTheFailureNeeds) {
  const AbPage& p = GetParam();
  if (zrepro_test::shell("command -v chromium 2>/dev/null").code != 0)
    GTEST_SKIP() << "chromium is not installed (scripts/test.sh installs it)";
  const std::string out = zrepro_test::fresh_dir("ab_page_" + p.scenario);
  const auto run = zrepro_test::zrepro_cmd("scenario run " + p.scenario + " --dir " + kDir + " --out " + out, 300);
  if (p.judged) {
    ASSERT_EQ(run.code, 0) << run.output;
  }
  ASSERT_TRUE(std::filesystem::exists(out + "/ab.html")) << run.output;
  const std::string browser = "timeout 120 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars ";
  const auto dom = zrepro_test::shell(browser + "--dump-dom file://" + out + "/ab.html 2>/dev/null");
  ASSERT_EQ(dom.code, 0) << dom.output;
  const std::string& d = dom.output;
  const size_t verdict = d.find("id=\"verdict\""), memory = d.find("Device memory per rank");
  ASSERT_NE(verdict, std::string::npos) << d.substr(0, 2000);
  EXPECT_LT(verdict, memory) << "the verdict comes first";
  if (p.judged) {
    EXPECT_NE(d.find("id=\"outcome\">fixed<"), std::string::npos) << d.substr(0, 2000);
  }
  for (const auto& s : p.dom_has) EXPECT_NE(d.find(s), std::string::npos) << p.scenario << ": " << s;
  for (const auto& s : p.dom_lacks) EXPECT_EQ(d.find(s), std::string::npos) << p.scenario << ": " << s;
  // The loss axis covers B's losses, and does not zoom below 2% of them.
  const auto b = nlohmann::json::parse(zrepro_test::read_text(out + "/B_r" + (p.scenario == "mismatched-collectives" ? "2" : "1") + "/summary.json"));
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& st : b["steps"])
    if (st["loss"].is_number()) lo = std::min(lo, st["loss"].get<double>()), hi = std::max(hi, st["loss"].get<double>());
  const size_t chart = d.find("aria-label=\"loss per step\"");
  ASSERT_NE(chart, std::string::npos);
  const std::string tag = d.substr(chart, d.find('>', chart) - chart);
  EXPECT_LE(ab_dom_attr(tag, "data-ymin"), lo);
  EXPECT_GE(ab_dom_attr(tag, "data-ymax"), hi);
  EXPECT_GE(ab_dom_attr(tag, "data-ymax") - ab_dom_attr(tag, "data-ymin"), 0.0199 * hi);
  // The screenshot, kept.
  std::filesystem::create_directories(ZREPRO_ARTEFACTS_DIR);
  const std::string png = std::string(ZREPRO_ARTEFACTS_DIR).append("/ab-") + p.scenario + ".png";
  std::filesystem::remove(png);
  const auto shot = zrepro_test::shell(browser + "--window-size=1280,1800 --screenshot=" + png + " file://" + out +
                                       "/ab.html 2>/dev/null");
  ASSERT_EQ(shot.code, 0) << shot.output;
  EXPECT_GT(std::filesystem::file_size(png), 20000u);

  // Side A's report.html: its failure and the figures over time the kind needs.
  const std::string page = out + "/" + p.run + "/report.html";
  const auto rdom = zrepro_test::shell(browser + "--dump-dom file://" + page + " 2>/dev/null");
  ASSERT_EQ(rdom.code, 0) << rdom.output;
  for (const auto& s : p.report_has) EXPECT_NE(rdom.output.find(s), std::string::npos) << p.scenario << " report: " << s;
  EXPECT_EQ(rdom.output.find("<td>–</td><td></td>"), std::string::npos) << "no table of dashes";
  const std::string rpng = std::string(ZREPRO_ARTEFACTS_DIR).append("/report-") + p.scenario + ".png";
  std::filesystem::remove(rpng);
  ASSERT_EQ(zrepro_test::shell(browser + "--window-size=1100,2400 --screenshot=" + rpng + " file://" + page + " 2>/dev/null").code, 0);
  EXPECT_GT(std::filesystem::file_size(rpng), 20000u);
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, AbPageInChromium,
    testing::Values(AbPage{"first-batch-activations",
                           {"data-row=\"A-1-0\"", "data-row=\"B-1-0\"", "class=\"capacity\"", "oom</b>", "Hint:"},
                           {},
                           true,
                           "A_r1",
                           {"Memory over the run", "class=\"unfinished\"", "failed here", "class=\"capacity\""}},
                    AbPage{"memlock-limit",
                           {"pinned host memory against the memlock limit", "data-row=\"B-1-0\"",
                            "A x1 (pinned-memory): no device memory figures"},
                           {"data-row=\"A-1-0\""},
                           true,
                           "A_r1",
                           {"pinned_memory", "Hint:"}},
                    AbPage{"mismatched-collectives",
                           {"where each rank waits", "data-row=\"B-2-0\"", "data-row=\"B-2-1\"", "hang</b>"},
                           {},
                           true,
                           "A_r2",
                           {"Where each rank spends its time", "data-lane=\"rank 1 comm\"", "font-weight=\"bold\">rank 1 comm",
                            "stroke-dasharray=\"3\"><title>#12"}},
                    AbPage{"offload-link-bottleneck",
                           {"id=\"speed\"", "offload wait per step"},
                           {},
                           false,
                           "A_r1",
                           {"Memory over the run", "Over the steps", "data-lane=\"rank 0 copy\"", "step time (s) per step"}}),
    [](const testing::TestParamInfo<AbPage>& i) {
      std::string n = i.param.scenario;
      std::replace(n.begin(), n.end(), '-', '_');
      return n;
    });
