// See bisect_doc.h: bisect.json's writing, reading and its reference page.
#include "trainer/bisect/bisect_doc.h"

#include <sstream>

#include "device/base/errors.h"
#include "device/base/json_optional.h"

namespace zrepro {

using json = nlohmann::json;

json BisectRelease::to_json() const {
  return {{"release", release},
          {"verdict", verdict},
          {"why", why},
          {"from_cache", from_cache},
          {"deepspeed", zrepro::to_json(deepspeed)},
          {"zrepro", zrepro ? zrepro::to_json(*zrepro) : json(nullptr)},
          {"zrepro_differs", json_of(zrepro_differs)}};
}

BisectRelease BisectRelease::from_json(const json& j) {
  BisectRelease r;
  r.release = j.at("release").get<std::string>();
  r.verdict = j.at("verdict").get<std::string>();
  r.why = j.at("why").get<std::string>();
  r.from_cache = j.at("from_cache").get<bool>();
  r.deepspeed = figures_from_json(j.at("deepspeed"));
  if (!j.at("zrepro").is_null()) r.zrepro = figures_from_json(j.at("zrepro"));
  r.zrepro_differs = optional_of<std::string>(j, "zrepro_differs");
  return r;
}

json BisectDocument::to_json() const {
  json releases = json::array(), changes = json::array();
  for (const BisectRelease& r : judged) releases.push_back(r.to_json());
  for (const BisectTableChange& c : version_table_changes)
    changes.push_back({{"since", c.since}, {"kind", c.kind}, {"key", c.key}, {"effect", c.effect}, {"pr", c.pr}});
  return {{"schema", schema},
          {"config", config},
          {"good", good},
          {"bad", bad},
          {"outcome", outcome},
          {"last_good", json_of(last_good)},
          {"first_moved", json_of(first_moved)},
          {"exact", exact},
          {"moved", moved},
          {"version_table_changes", changes},
          {"judged", releases},
          {"tolerance", {{"numerics", tolerance.numerics}, {"bytes", tolerance.bytes}, {"rounding", tolerance.rounding},
                         {"basis", tolerance.basis}}},
          {"ranks", ranks},
          {"steps", steps},
          {"torch", torch},
          {"model", model},
          {"inputs_key", inputs_key},
          {"zrepro_differs_at", zrepro_differs_at}};
}

BisectDocument BisectDocument::from_json(const json& j) {
  require_schema(j, kBisectSchema, "bisect.json", "rerun the bisect with this zrepro (docs/reference/bisect-json.md)");
  BisectDocument d;
  d.config = j.at("config").get<std::string>();
  d.good = j.at("good").get<std::string>();
  d.bad = j.at("bad").get<std::string>();
  d.outcome = j.at("outcome").get<std::string>();
  d.last_good = optional_of<std::string>(j, "last_good");
  d.first_moved = optional_of<std::string>(j, "first_moved");
  d.exact = j.at("exact").get<bool>();
  d.moved = j.at("moved").get<std::vector<std::string>>();
  for (const json& c : j.at("version_table_changes"))
    d.version_table_changes.push_back({c.at("since").get<std::string>(), c.at("kind").get<std::string>(),
                                       c.at("key").get<std::string>(), c.at("effect").get<std::string>(),
                                       c.at("pr").get<std::string>()});
  for (const json& r : j.at("judged")) d.judged.push_back(BisectRelease::from_json(r));
  d.tolerance.numerics = j.at("tolerance").at("numerics").get<double>();
  d.tolerance.bytes = j.at("tolerance").at("bytes").get<double>();
  d.tolerance.rounding = j.at("tolerance").value("rounding", 0.0);        // absent before spreads were measured
  d.tolerance.basis = j.at("tolerance").value("basis", std::string());
  d.ranks = j.at("ranks").get<int>();
  d.steps = j.at("steps").get<int>();
  d.torch = j.at("torch").get<std::string>();
  d.model = j.at("model").get<std::string>();
  d.inputs_key = j.at("inputs_key").get<std::string>();
  d.zrepro_differs_at = j.at("zrepro_differs_at").get<std::vector<std::string>>();
  return d;
}

const std::vector<FieldDoc>& bisect_field_docs() {
  static const std::vector<FieldDoc> docs = {
      {{"schema"}, std::string("`") + kBisectSchema + "`: what this page describes"},
      {{"config", "good", "bad"}, "`--config`, `--good` and `--bad` as given"},
      {{"outcome"}, "`first moved` (the search named one release), `in window` (a release inside the window it closed "
                    "on could not run here) or `no move` (good and bad give the same figures: nothing to bisect, exit 7)"},
      {{"last_good", "first_moved", "exact"}, "the window the search closed on (null: no move); `exact` when "
                                              "`first_moved` is the release rather than the window's end"},
      {{"moved"}, "what moved from `last_good` to `first_moved`, one line per figure (at most 6 and a count); "
                  "empty: no move"},
      {{"version_table_changes[].since", "version_table_changes[].kind", "version_table_changes[].key",
        "version_table_changes[].effect", "version_table_changes[].pr"},
       "the entries of zrepro's version table in (last_good, first_moved] that touch this config"},
      {{"judged[].release", "judged[].verdict", "judged[].why", "judged[].from_cache"},
       "every release judged, oldest first: `good`, `moved` or `skip` (and why it could not run), and whether its "
       "figures came from the cache"},
      {{"judged[].deepspeed.*"}, "the real release's figures: `outcome` (ran, refused, failed), `message`, `torch`, "
                                 "per step `loss`, `grad_norm` and `skipped`, `bytes` (\"rank R PHASE CATEGORY\"), "
                                 "`comm_bytes` (\"step S OP\") and, for the good and bad releases, `spread` (their "
                                 "run-to-run spread, from a second run; absent where not measured)"},
      {{"judged[].zrepro.*"}, "zrepro's figures under the release's profile (steps only; null: its run left no "
                              "summary)"},
      {{"judged[].zrepro_differs"}, "the first figure zrepro differs in from the release; null: it agrees"},
      {{"tolerance.numerics", "tolerance.bytes"}, "the relative tolerances a move is judged by (`--tolerance`, "
                                                  "`--bytes-tolerance`)"},
      {{"tolerance.rounding", "tolerance.basis"}, "the precision's 16-bit rounding (a smaller move is named a change "
                                                  "of rounding; 0 for fp32) and which rule set the numerics tolerance: "
                                                  "the good and bad releases' measured run-to-run spread, the fixed "
                                                  "default, or `--tolerance`"},
      {{"ranks", "steps", "torch", "model", "inputs_key"},
       "what every release trained on: the rank count, the steps, the good release's torch, zrepro's model and the "
       "fixed inputs' cache key"},
      {{"zrepro_differs_at"}, "the releases whose figures zrepro under their profile does not reproduce (a "
                              "conformance finding for zrepro, not a regression of the job)"},
  };
  return docs;
}

BisectDocument bisect_example() {
  ReleaseFigures f;
  f.steps = {StepFigures{1.0, 0.5, false}};
  f.bytes = {{"rank 0 init params", 1}};
  f.comm_bytes = {{"step 1 all_reduce", 2048}};
  BisectDocument d;
  d.config = "ds.json", d.good = "0.16.0", d.bad = "0.18.2", d.outcome = "first moved";
  d.last_good = "0.17.5", d.first_moved = "0.17.6", d.exact = true;
  d.moved = {"step 1 grad norm 1.434 -> 0.7802 (-45.6%)"};
  d.version_table_changes = {{"0.17.6", "behaviour", "zero_optimization.stage", "numerics: ...", "#7718"}};
  d.judged = {BisectRelease{"0.17.6", "moved", "", true, f, f, std::string("step 1 grad norm ...")}};
  d.ranks = 2, d.steps = 3, d.torch = "2.9.0", d.model = "tiny-llama", d.inputs_key = "k";
  d.zrepro_differs_at = {"0.17.6"};
  return d;
}

std::string bisect_reference_page() {
  return reference_page(
      "bisect.json",
      "What `zrepro bisect` writes in its `--out` folder: the first DeepSpeed release whose figures on zrepro's toy "
       "moved from the good release's, every release it judged with its figures and zrepro's under the release's "
       "profile, and what the search rests on. One C++ type, BisectDocument (trainer/bisect/bisect_doc.h), writes "
       "and reads it: every field below is always present, null where the search did not reach it. This page is "
       "generated from the type's field table (trainer/bisect/bisect_doc.cpp); "
       "tests/trainer/bisect/bisect_doc_test.cpp fails when a field of the type has no row or the page is not this "
       "text (`ZREPRO_WRITE_BISECT_DOC=1 build/zrepro_unit_tests --gtest_filter=BisectDoc.*` rewrites it).",
      kBisectSchema, bisect_field_docs());
}

}  // namespace zrepro
