// [Note: one diagnose type] (trainer/diagnose/diagnose.h): `zrepro diagnose --json` reads
// back as what was written (a real log's too), another schema is refused, and
// docs/reference/diagnose-json.md is the page generated from the type's field table.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "device/base/errors.h"
#include "tests/support/doc_fields.h"
#include "trainer/diagnose/diagnose.h"

using namespace zrepro;
using json = nlohmann::json;

namespace {

const std::string kDiagnosePage = std::string(ZREPRO_SOURCE_DIR).append("/docs/reference/diagnose-json.md");

// The planner's refusal: the one shape the example (a plan) does not write.
Diagnosis refused_example() {
  Diagnosis d = diagnose_example();
  PlannerCheck said;
  said.planned_verdict = "refused", said.agrees = true, said.refused = "zero stage 2 requires an optimizer";
  d.planner = said;
  return d;
}

std::set<std::string> diagnose_example_paths() {
  std::set<std::string> paths;
  zrepro_test::leaf_paths(diagnose_example().to_json(), "", paths);
  zrepro_test::leaf_paths(refused_example().to_json(), "", paths);
  return paths;
}

}  // namespace

TEST(DiagnoseDoc, ReadsBackAsWritten) {
  const json written = diagnose_example().to_json();
  EXPECT_EQ(Diagnosis::from_json(written).to_json(), written);
  // Nothing named: the diagnosis's own fields all there, numbers empty.
  Diagnosis none;
  none.confidence = "none", none.reason = "no known fingerprint";
  const json j = none.to_json();
  for (const char* k : {"schema", "checkpoint", "scenario", "cause", "confidence", "reason", "alternatives", "try_next",
                        "numbers", "evidence", "closest"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_TRUE(j.at("numbers").empty());
  EXPECT_EQ(Diagnosis::from_json(j).to_json(), j);
  // The planner refused the config: its message, and no plan figures.
  const json r = refused_example().to_json();
  EXPECT_FALSE(r["planner"].contains("planned_phase"));
  EXPECT_EQ(Diagnosis::from_json(r).to_json(), r);
  // A real log's diagnosis, with its timers, watchdog lines and ranks.
  const std::string log =
      "[rank0]:[E ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: "
      "WorkNCCL(SeqNum=42, OpType=ALLGATHER, NumelIn=1024, NumelOut=2048, Timeout(ms)=600000) ran for 600012 "
      "milliseconds before timing out.\n[Rank 0] time (ms) | fwd: 10.0 | bwd: 20.0 | step: 5.0\n";
  const json real = diagnose_log(log).to_json();
  EXPECT_EQ(Diagnosis::from_json(real).to_json(), real);
  EXPECT_EQ(real["numbers"]["watchdog"][0]["seq"], 42);
}

TEST(DiagnoseDoc, RefusesAnotherSchema) {
  zrepro_test::expect_refuses_other_schema<Diagnosis>(diagnose_example().to_json());
}

TEST(DiagnoseDoc, EveryFieldHasItsRowAndEveryRowAField) {
  const std::set<std::string> paths = diagnose_example_paths();
  EXPECT_GT(paths.size(), 20u);
  zrepro_test::expect_rows_match(paths, diagnose_field_docs(), "Diagnosis");
}

TEST(DiagnoseDoc, ThePageIsTheGeneratedText) {
  zrepro_test::expect_generated_page(kDiagnosePage, diagnose_reference_page(), "ZREPRO_WRITE_DIAGNOSE_DOC", "DiagnoseDoc.*");
}
