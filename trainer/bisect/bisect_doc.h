// bisect.json as one C++ type: BisectDocument. [Note: one bisect type] `zrepro bisect`
// builds a BisectDocument; OUT/bisect.json is written only by BisectDocument::to_json and
// read only through BisectDocument::from_json (tests, a later tool): every field is always
// written (null where the search did not reach it), so a search that found nothing to
// bisect has the same shape as one that named a release. docs/reference/bisect-json.md is
// generated from bisect_field_docs() and checked against bisect_example()
// (tests/trainer/bisect/bisect_doc_test.cpp).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainer/bisect/release_figures.h"
#include "device/base/field_doc.h"

namespace zrepro {

// [Note: bisect schema] as [Note: ab schema]: from_json refuses another schema.
constexpr const char* kBisectSchema = "zrepro.bisect/1";

// One release as judged: its own figures, and zrepro's under the release's profile beside.
struct BisectRelease {
  std::string release;
  std::string verdict;  // good | moved | skip ([Note: bisecting releases], bisection.h)
  std::string why;      // skip: the reason; "" otherwise
  bool from_cache = false;
  ReleaseFigures deepspeed;
  std::optional<ReleaseFigures> zrepro;        // null: zrepro's run left no summary
  std::optional<std::string> zrepro_differs;   // the first figure zrepro differs in; null: it agrees

  nlohmann::json to_json() const;
  static BisectRelease from_json(const nlohmann::json& j);
};

// An entry of the version table in the window the search closed on that touches the config.
struct BisectTableChange {
  std::string since, kind, key, effect, pr;
};

struct BisectDocument {
  std::string schema = kBisectSchema;
  std::string config;     // --config as given
  std::string good, bad;  // the window asked for
  // first moved: the search named one release; in window: a release inside the window the
  // search closed on could not run here; no move: good and bad agree (nothing to bisect).
  std::string outcome;
  std::optional<std::string> last_good, first_moved;  // null: no move
  bool exact = false;                                 // first_moved is the release (not a window)
  std::vector<std::string> moved;                     // what moved from last_good to first_moved
  std::vector<BisectTableChange> version_table_changes;
  std::vector<BisectRelease> judged;  // oldest first
  Tolerance tolerance;
  int ranks = 0, steps = 0;
  std::string torch;       // the good release's torch
  std::string model;       // what every release trained: "tiny-llama (llama, 102720 parameters)"
  std::string inputs_key;  // the fixed inputs' key in the cache
  std::vector<std::string> zrepro_differs_at;  // releases zrepro differs from

  nlohmann::json to_json() const;
  // Throws ConfigError on another schema, nlohmann::json::exception on a wrong shape.
  static BisectDocument from_json(const nlohmann::json& j);
};

const std::vector<FieldDoc>& bisect_field_docs();
BisectDocument bisect_example();  // every field set, one element per list
std::string bisect_reference_page();

}  // namespace zrepro
