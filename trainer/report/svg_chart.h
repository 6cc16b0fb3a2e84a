// svg_chart: the inline SVG charts of zrepro's pages (report.html, ab.html), drawn
// honestly: axes from the data's real range rounded out to readable ticks, each tick
// labelled, both axes named, a legend entry only for a series with data, and the
// drawn range in data- attributes so a browser test can check it. No scripts, no
// network: the page reads without JavaScript.
//
// [Note: an honest axis] A y axis zoomed to the data's exact range makes a flat loss
// (two points 0.001 apart) look like a cliff. The axis covers [lo, hi] rounded out to
// "nice" ticks (1, 2, 2.5, 5 x 10^k) and never spans less than kMinRelativeSpan of the
// largest magnitude, so a change reads at its true size.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace zrepro {

constexpr double kMinRelativeSpan = 0.02;

struct Axis {
  double lo = 0, hi = 1;
  std::vector<double> ticks;  // lo and hi are the first and last
};
// The axis over [lo, hi] with about `target` ticks ([Note: an honest axis]); from zero
// when from_zero (bytes, rates).
// integer: ticks on whole numbers only (steps).
Axis nice_axis(double lo, double hi, int target = 5, bool from_zero = false, bool integer = false);
// A tick's label: as few digits as tell the ticks apart.
std::string tick_label(double v, double step);

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y); non-finite y left out
  std::string color;  // empty: the palette's next
  bool dots_only = false;  // markers without a line (events: skipped steps)
};
struct LineChart {
  std::string title;  // aria-label
  std::string x_label, y_label;
  int width = 720, height = 280;
  bool y_from_zero = false;
  bool x_integer = true;  // x is a step count
};
// A line chart; series without points are named under the chart as "no data" instead
// of in the legend.
std::string line_chart(const std::vector<Series>& series, const LineChart& c);

// One stacked horizontal bar per row, against a shared byte scale.
struct BarSegment {
  std::string name;
  double bytes = 0;
};
struct BarRow {
  std::string label;       // left of the bar
  std::string id;          // data-row attribute (tests find a bar by it)
  std::vector<BarSegment> segments;
  double marker = -1;      // a second figure on the same scale (the planned peak), < 0: none
  bool failed = false;     // the label in red
};
struct BarChart {
  std::string title;
  double capacity = 0;     // a vertical line; 0: none
  std::string marker_name = "planned";
  int width = 760;
  std::string capacity_name = "capacity";
};
std::string stacked_bars(const std::vector<BarRow>& rows, const BarChart& c);

// Stacked columns over time (memory per step and phase): one column per point, the
// y axis in bytes from zero, the capacity and the planned peak as horizontal lines, the
// highest column marked "peak", unfinished (failed) columns outlined in red.
struct Column {
  std::string tooltip;  // what hovering shows (the figure at toy scale beside the drawn one)
  int64_t step = 0;     // the x label is the step, under its first column
  std::vector<BarSegment> segments;
  bool unfinished = false;
};
struct ColumnChart {
  std::string title;
  double capacity = 0, planned = -1;  // 0 / < 0: not drawn
  int width = 760, height = 280;
};
std::string stacked_columns(const std::vector<Column>& cols, const ColumnChart& c);

// Swimlanes: one row per lane (a rank's compute, comm or copy stream), spans on a shared
// time axis in seconds; an open span (a collective that never completed) is drawn to
// the end in red with a dashed outline; highlighted lanes (the failing rank's) have
// their label in red.
struct LaneSpan {
  double t0 = 0, t1 = 0;  // seconds
  std::string name, tooltip, color;
  bool open = false;
};
struct Lane {
  std::string label;
  std::vector<LaneSpan> spans;
  bool highlight = false;
};
struct LaneChart {
  std::string title;
  int width = 860;
};
std::string swimlanes(const std::vector<Lane>& lanes, const LaneChart& c);

// The colour of a memory category (params, grads, ...), one palette on every page.
const char* category_color(const std::string& category);

}  // namespace zrepro
