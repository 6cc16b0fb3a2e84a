// libFuzzer target: the log reader of `zrepro diagnose`, as a user's log reaches it. An
// input is a log's bytes (any encoding, any content): its kind is decided
// (normalise_log), a text log is diagnosed (diagnose_log) and both of the diagnosis's
// outputs are rendered (JSON with bad UTF-8 replaced, and the terminal text). None of
// this may throw or crash, whatever the bytes: a log is data, never bad input. Built by
// scripts/fuzz.sh log (clang, -DZREPRO_FUZZ=ON, ASan + UBSan); results in
// docs/lab/ROBUSTNESS.md.
#include <cstddef>
#include <cstdint>
#include <string>

#include "trainer/diagnose/diagnose.h"
#include "trainer/diagnose/log_text.h"
#include "trainer/report/report.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  const zrepro::LogKind kind = zrepro::normalise_log(text);
  if (kind == zrepro::LogKind::binary || kind == zrepro::LogKind::empty) return 0;
  const zrepro::Diagnosis d = zrepro::diagnose_log(text);
  (void)zrepro::json_text(d.to_json());
  (void)d.to_text();
  return 0;
}
