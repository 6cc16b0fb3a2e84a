// report.html: one self-contained page (inline SVG, no scripts) drawn from
// summary.json, for people who would rather look than grep: status and failure,
// loss curve with skipped steps, device memory per rank by category against the
// capacity, collectives, time breakdown and the effective config with sources.
#pragma once
#include <string>

#include "trainer/report/summary.h"

namespace zrepro {

std::string html_report(const Summary& summary);
// Text safe inside HTML elements and attribute values.
std::string html_escape(const std::string& s);

}  // namespace zrepro
