// See svg_chart.h.
#include "trainer/report/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "device/device_memory.h"
#include "trainer/report/html_report.h"

namespace zrepro {

namespace {

const char* const kPalette[] = {"#c62828", "#1565c0", "#ef6c00", "#2e7d32", "#6a1b9a", "#00838f", "#757575"};

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", v);
  return b;
}

}  // namespace

Axis nice_axis(double lo, double hi, int target, bool from_zero, bool integer) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) lo = 0, hi = 1;
  if (lo > hi) std::swap(lo, hi);
  if (from_zero) lo = std::min(0.0, lo);
  const double mag = std::max(std::abs(lo), std::abs(hi));
  const double min_span = mag > 0 ? kMinRelativeSpan * mag : 1.0;
  if (hi - lo < min_span) {
    const double mid = (lo + hi) / 2;
    lo = mid - min_span / 2, hi = mid + min_span / 2;
    if (from_zero && lo < 0) lo = 0, hi = std::max(hi, min_span);
  }
  const double raw = (hi - lo) / std::max(1, target);
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / p;
  double step = p * (f <= 1 ? 1 : f <= 2 ? 2 : f <= 2.5 ? 2.5 : f <= 5 ? 5 : 10);
  if (integer) step = std::max(1.0, std::round(step));
  Axis a;
  const double first = std::floor(lo / step + 1e-9), last = std::ceil(hi / step - 1e-9);
  for (double k = first; k <= last; k += 1) a.ticks.push_back(k * step);
  a.lo = a.ticks.front(), a.hi = a.ticks.back();
  return a;
}

std::string tick_label(double v, double step) {
  int decimals = step > 0 ? std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9))) : 0;
  // 2.5 x 10^k needs one digit more than its power of ten.
  if (step > 0 && std::abs(step / std::pow(10.0, -decimals) - std::round(step / std::pow(10.0, -decimals))) > 1e-6)
    ++decimals;
  if (std::abs(v) < step * 1e-9) v = 0;  // no "-0.00"
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", std::min(decimals, 12), v);
  return b;
}

namespace line_plot {

// The plot area inside the chart (margins for the axis labels and the legend) and its axes.
struct Plot {
  static constexpr int L = 78, R = 170, T = 12, B = 44;
  int pw = 0, ph = 0;
  Axis xa, ya;
  double X(double x) const { return L + pw * (x - xa.lo) / (xa.hi - xa.lo); }
  double Y(double y) const { return T + ph * (ya.hi - y) / (ya.hi - ya.lo); }
};

struct Range {
  double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
};

// The finite points' extent (ylo not finite: no data).
Range data_range(const std::vector<Series>& series) {
  Range r;
  for (const Series& s : series)
    for (const auto& [x, y] : s.points)
      if (std::isfinite(y)) r.xlo = std::min(r.xlo, x), r.xhi = std::max(r.xhi, x), r.ylo = std::min(r.ylo, y), r.yhi = std::max(r.yhi, y);
  return r;
}

double tick_step(const Axis& a) { return a.ticks.size() > 1 ? a.ticks[1] - a.ticks[0] : 1; }

void draw_axes(std::ostream& o, const Plot& p, const LineChart& c) {
  const int L = Plot::L, T = Plot::T;
  for (double t : p.ya.ticks)
    o << "<line x1='" << L << "' x2='" << L + p.pw << "' y1='" << num(p.Y(t)) << "' y2='" << num(p.Y(t))
      << "' stroke='#e0e0e0'/><text class='ytick' x='" << L - 4 << "' y='" << num(p.Y(t) + 4)
      << "' font-size='11' text-anchor='end'>" << tick_label(t, tick_step(p.ya)) << "</text>";
  for (double t : p.xa.ticks)
    o << "<line x1='" << num(p.X(t)) << "' x2='" << num(p.X(t)) << "' y1='" << T + p.ph << "' y2='" << T + p.ph + 4
      << "' stroke='#666'/><text class='xtick' x='" << num(p.X(t)) << "' y='" << T + p.ph + 16
      << "' font-size='11' text-anchor='middle'>" << tick_label(t, tick_step(p.xa)) << "</text>";
  o << "<rect x='" << L << "' y='" << T << "' width='" << p.pw << "' height='" << p.ph << "' fill='none' stroke='#666'/>"
    << "<text x='" << L + p.pw / 2 << "' y='" << c.height - 6 << "' font-size='12' text-anchor='middle'>"
    << html_escape(c.x_label) << "</text><text transform='rotate(-90)' x='" << -(T + p.ph / 2) << "' y='14' font-size='12' "
    << "text-anchor='middle'>" << html_escape(c.y_label) << "</text>";
}

// One series and its legend entry (the legend's row `legend`); false when it has no
// finite point (nothing drawn).
bool draw_series(std::ostream& o, const Plot& p, const Series& s, const std::string& col, int legend) {
  std::string pts;
  int n = 0;
  for (const auto& [x, y] : s.points)
    if (std::isfinite(y)) pts += num(p.X(x)) + "," + num(p.Y(y)) + " ", ++n;
  if (n == 0) return false;
  o << "<g class='series' data-name='" << html_escape(s.name) << "'>";
  if (n > 1 && !s.dots_only) o << "<polyline fill='none' stroke='" << col << "' stroke-width='2' points='" << pts << "'/>";
  for (const auto& [x, y] : s.points)
    if (std::isfinite(y) && (n <= 40 || s.dots_only))
      o << "<circle cx='" << num(p.X(x)) << "' cy='" << num(p.Y(y)) << "' r='" << (s.dots_only ? 4 : 2.5) << "' fill='" << col << "'/>";
  o << "</g><rect x='" << Plot::L + p.pw + 12 << "' y='" << Plot::T + 4 + 16 * legend << "' width='12' height='3' fill='"
    << col << "'/><text class='legend' x='" << Plot::L + p.pw + 28 << "' y='" << Plot::T + 9 + 16 * legend
    << "' font-size='11'>" << html_escape(s.name) << "</text>";
  return true;
}

}  // namespace line_plot

std::string line_chart(const std::vector<Series>& series, const LineChart& c) {
  using line_plot::Plot;
  Plot p;
  p.pw = c.width - Plot::L - Plot::R, p.ph = c.height - Plot::T - Plot::B;
  line_plot::Range r = line_plot::data_range(series);
  std::ostringstream o;
  o << "<svg class='chart' width='" << c.width << "' height='" << c.height << "' role='img' aria-label='"
    << html_escape(c.title) << "'";
  if (!std::isfinite(r.ylo)) return o.str() + "><text x='10' y='20' font-size='12'>no data</text></svg>";
  if (r.xhi - r.xlo < 1) r.xhi = r.xlo + 1;
  p.xa = nice_axis(r.xlo, r.xhi, 8, false, c.x_integer), p.ya = nice_axis(r.ylo, r.yhi, 5, c.y_from_zero);
  o << " data-xmin='" << p.xa.lo << "' data-xmax='" << p.xa.hi << "' data-ymin='" << p.ya.lo << "' data-ymax='" << p.ya.hi
    << "'>";
  line_plot::draw_axes(o, p, c);
  int k = 0, legend = 0;
  std::vector<std::string> empty;
  for (const Series& s : series) {
    const std::string col = s.color.empty() ? kPalette[k++ % 7] : s.color;
    if (line_plot::draw_series(o, p, s, col, legend)) ++legend;
    else empty.push_back(s.name);
  }
  for (const std::string& e : empty)
    o << "<text class='nodata' x='" << Plot::L + p.pw + 12 << "' y='" << Plot::T + 9 + 16 * legend++
      << "' font-size='11' fill='#888'>" << html_escape(e) << ": no data</text>";
  return o.str() + "</svg>";
}

const char* category_color(const std::string& c) {
  static const std::pair<const char*, const char*> kColors[] = {
      {"params", "#1565c0"},      {"grads", "#2e7d32"},       {"optimizer_states", "#ef6c00"},
      {"activations", "#6a1b9a"}, {"comm_buffers", "#00838f"}, {"other", "#757575"}};
  for (const auto& [name, col] : kColors)
    if (c == name) return col;
  return "#9e9e9e";
}

std::string stacked_bars(const std::vector<BarRow>& rows, const BarChart& c) {
  const int L = 150, R = 90, row_h = 24, T = 8;
  const int pw = c.width - L - R;
  double top = c.capacity;
  std::vector<std::string> cats;
  for (const BarRow& r : rows) {
    double sum = 0;
    for (const BarSegment& s : r.segments) {
      sum += s.bytes;
      if (s.bytes > 0 && std::find(cats.begin(), cats.end(), s.name) == cats.end()) cats.push_back(s.name);
    }
    top = std::max({top, sum, r.marker});
  }
  const Axis xa = nice_axis(0, top > 0 ? top : 1, 5, true);
  auto X = [&](double b) { return L + pw * b / xa.hi; };
  const int h = T + row_h * static_cast<int>(rows.size());
  int legend_w = L + 8 * static_cast<int>(c.marker_name.size()) + 40;
  for (const std::string& cat : cats) legend_w += 14 + 7 * static_cast<int>(cat.size()) + 12;
  std::ostringstream o;
  o << "<svg class='bars' width='" << std::max(c.width, legend_w) << "' height='" << h + 56 << "' role='img' aria-label='"
    << html_escape(c.title) << "' data-xmax='" << xa.hi << "'>";
  for (double t : xa.ticks)
    o << "<line x1='" << num(X(t)) << "' x2='" << num(X(t)) << "' y1='" << T << "' y2='" << h
      << "' stroke='#eee'/><text class='xtick' x='" << num(X(t)) << "' y='" << h + 14
      << "' font-size='10' text-anchor='middle'>" << format_bytes(static_cast<int64_t>(t)) << "</text>";
  int y = T;
  for (const BarRow& r : rows) {
    o << "<g class='bar' data-row='" << html_escape(r.id) << "'><text x='" << L - 6 << "' y='" << y + 15
      << "' font-size='12' text-anchor='end'" << (r.failed ? " fill='#c62828'" : "") << ">" << html_escape(r.label)
      << "</text>";
    double x = 0;
    for (const BarSegment& s : r.segments) {
      if (s.bytes <= 0) continue;
      o << "<rect class='seg' data-category='" << html_escape(s.name) << "' x='" << num(X(x)) << "' y='" << y + 2
        << "' width='" << num(X(x + s.bytes) - X(x)) << "' height='" << row_h - 6 << "' fill='" << category_color(s.name)
        << "'><title>" << html_escape(s.name) << ": " << format_bytes(static_cast<int64_t>(s.bytes)) << "</title></rect>";
      x += s.bytes;
    }
    o << "<text x='" << num(X(x) + 4) << "' y='" << y + 15 << "' font-size='11'>" << format_bytes(static_cast<int64_t>(x))
      << "</text>";
    if (r.marker >= 0)
      o << "<line class='marker' x1='" << num(X(r.marker)) << "' x2='" << num(X(r.marker)) << "' y1='" << y
        << "' y2='" << y + row_h - 2 << "' stroke='#000' stroke-width='2' stroke-dasharray='3'><title>"
        << html_escape(c.marker_name) << ": " << format_bytes(static_cast<int64_t>(r.marker)) << "</title></line>";
    o << "</g>";
    y += row_h;
  }
  if (c.capacity > 0)
    o << "<line class='capacity' x1='" << num(X(c.capacity)) << "' x2='" << num(X(c.capacity)) << "' y1='" << T - 4
      << "' y2='" << h + 2 << "' stroke='#c62828' stroke-width='2'/><text x='" << num(X(c.capacity) + 3) << "' y='"
      << T + 4 << "' font-size='10' fill='#c62828'>" << html_escape(c.capacity_name) << " " << format_bytes(static_cast<int64_t>(c.capacity))
      << "</text>";
  int lx = L;
  for (const std::string& cat : cats) {
    o << "<rect x='" << lx << "' y='" << h + 26 << "' width='10' height='10' fill='" << category_color(cat)
      << "'/><text x='" << lx + 13 << "' y='" << h + 35 << "' font-size='11'>" << html_escape(cat) << "</text>";
    lx += 14 + 7 * static_cast<int>(cat.size()) + 12;
  }
  bool any_marker = false;
  for (const BarRow& r : rows) any_marker = any_marker || r.marker >= 0;
  if (any_marker)
    o << "<line x1='" << lx << "' x2='" << lx << "' y1='" << h + 24 << "' y2='" << h + 38
      << "' stroke='#000' stroke-width='2' stroke-dasharray='3'/><text x='" << lx + 5 << "' y='" << h + 35
      << "' font-size='11'>" << html_escape(c.marker_name) << "</text>";
  return o.str() + "</svg>";
}

std::string swimlanes(const std::vector<Lane>& lanes, const LaneChart& c) {
  const int L = 130, R = 16, T = 8, row = 18;
  const int pw = c.width - L - R;
  double t0 = INFINITY, t1 = -INFINITY;
  for (const Lane& l : lanes)
    for (const LaneSpan& s : l.spans) t0 = std::min(t0, s.t0), t1 = std::max(t1, s.t1);
  std::ostringstream o;
  const int h = T + row * static_cast<int>(lanes.size());
  o << "<svg class='lanes' width='" << c.width << "' height='" << h + 36 << "' role='img' aria-label='"
    << html_escape(c.title) << "'";
  if (!std::isfinite(t0)) return o.str() + "><text x='10' y='20' font-size='12'>no spans</text></svg>";
  const Axis xa = nice_axis(0, std::max(t1 - t0, 1e-6), 8, true);
  o << " data-lanes='" << lanes.size() << "' data-seconds='" << t1 - t0 << "'>";
  auto X = [&](double t) { return L + pw * (t - t0) / xa.hi; };
  const double xs = xa.ticks.size() > 1 ? xa.ticks[1] - xa.ticks[0] : 1;
  for (double t : xa.ticks)
    o << "<line x1='" << num(X(t0 + t)) << "' x2='" << num(X(t0 + t)) << "' y1='" << T << "' y2='" << h
      << "' stroke='#eee'/><text class='xtick' x='" << num(X(t0 + t)) << "' y='" << h + 13
      << "' font-size='10' text-anchor='middle'>" << tick_label(t, xs) << "</text>";
  int y = T;
  for (const Lane& l : lanes) {
    o << "<g class='lane' data-lane='" << html_escape(l.label) << "'><text x='" << L - 6 << "' y='" << y + 12
      << "' font-size='11' text-anchor='end'" << (l.highlight ? " fill='#c62828' font-weight='bold'" : "") << ">"
      << html_escape(l.label) << "</text>";
    for (const LaneSpan& s : l.spans) {
      const double x0 = X(s.t0), w = std::max(0.8, X(s.t1) - x0);
      o << "<rect x='" << num(x0) << "' y='" << y + 2 << "' width='" << num(w) << "' height='" << row - 5 << "' fill='"
        << (s.open ? "#c62828" : s.color) << "'" << (s.open ? " stroke='#000' stroke-dasharray='3'" : "") << "><title>"
        << html_escape(s.tooltip.empty() ? s.name : s.tooltip) << "</title></rect>";
    }
    o << "</g>";
    y += row;
  }
  o << "<text x='" << L + pw / 2 << "' y='" << h + 30 << "' font-size='12' text-anchor='middle'>seconds</text>";
  return o.str() + "</svg>";
}

std::string stacked_columns(const std::vector<Column>& cols, const ColumnChart& c) {
  const int L = 72, R = 20, T = 16, B = 56;
  const int pw = c.width - L - R, ph = c.height - T - B;
  double top = std::max(c.capacity, c.planned);
  size_t peak = 0;
  std::vector<double> totals;
  std::vector<std::string> cats;
  for (size_t i = 0; i < cols.size(); ++i) {
    double t = 0;
    for (const BarSegment& s : cols[i].segments) {
      t += s.bytes;
      if (s.bytes > 0 && std::find(cats.begin(), cats.end(), s.name) == cats.end()) cats.push_back(s.name);
    }
    totals.push_back(t);
    if (t > totals[peak]) peak = i;
    top = std::max(top, t);
  }
  std::ostringstream o;
  o << "<svg class='columns' width='" << c.width << "' height='" << c.height << "' role='img' aria-label='"
    << html_escape(c.title) << "'";
  if (cols.empty()) return o.str() + "><text x='10' y='20' font-size='12'>no data</text></svg>";
  const Axis ya = nice_axis(0, top > 0 ? top : 1, 5, true);
  o << " data-ymax='" << ya.hi << "' data-columns='" << cols.size() << "'>";
  auto Y = [&](double b) { return T + ph * (ya.hi - b) / ya.hi; };
  const double w = static_cast<double>(pw) / static_cast<double>(cols.size());
  for (double t : ya.ticks)
    o << "<line x1='" << L << "' x2='" << L + pw << "' y1='" << num(Y(t)) << "' y2='" << num(Y(t))
      << "' stroke='#eee'/><text class='ytick' x='" << L - 4 << "' y='" << num(Y(t) + 4)
      << "' font-size='10' text-anchor='end'>" << format_bytes(static_cast<int64_t>(t)) << "</text>";
  for (size_t i = 0; i < cols.size(); ++i) {
    const double x = L + w * static_cast<double>(i);
    double y0 = 0;
    o << "<g class='column'><title>" << html_escape(cols[i].tooltip) << "</title>";
    for (const BarSegment& s : cols[i].segments) {
      if (s.bytes <= 0) continue;
      o << "<rect x='" << num(x + 0.1 * w) << "' y='" << num(Y(y0 + s.bytes)) << "' width='" << num(0.8 * w)
        << "' height='" << num(Y(y0) - Y(y0 + s.bytes)) << "' fill='" << category_color(s.name) << "'/>";
      y0 += s.bytes;
    }
    if (cols[i].unfinished)
      o << "<rect class='unfinished' x='" << num(x + 0.05 * w) << "' y='" << num(Y(y0)) << "' width='" << num(0.9 * w)
        << "' height='" << num(Y(0) - Y(y0)) << "' fill='none' stroke='#c62828' stroke-width='2'/>";
    o << "</g>";
    if (i == 0 || cols[i].step != cols[i - 1].step)
      o << "<line x1='" << num(x) << "' x2='" << num(x) << "' y1='" << T + ph << "' y2='" << T + ph + 4
        << "' stroke='#666'/><text class='xtick' x='" << num(x + 2) << "' y='" << T + ph + 15 << "' font-size='10'>"
        << cols[i].step << "</text>";
  }
  const double px = L + w * (static_cast<double>(peak) + 0.5);
  o << "<text class='peak' x='" << num(px) << "' y='" << num(Y(totals[peak]) - 4) << "' font-size='11' text-anchor='middle'>"
    << "peak " << format_bytes(static_cast<int64_t>(totals[peak])) << "</text>";
  if (c.capacity > 0)
    o << "<line class='capacity' x1='" << L << "' x2='" << L + pw << "' y1='" << num(Y(c.capacity)) << "' y2='"
      << num(Y(c.capacity)) << "' stroke='#c62828' stroke-width='2'/><text x='" << L + 4 << "' y='"
      << num(Y(c.capacity) + 11) << "' font-size='10' fill='#c62828'>capacity "
      << format_bytes(static_cast<int64_t>(c.capacity)) << "</text>";
  if (c.planned >= 0)
    o << "<line class='planned' x1='" << L << "' x2='" << L + pw << "' y1='" << num(Y(c.planned)) << "' y2='"
      << num(Y(c.planned)) << "' stroke='#000' stroke-dasharray='5'/><text x='" << L + 4 << "' y='"
      << num(Y(c.planned) - 3) << "' font-size='10'>planned peak " << format_bytes(static_cast<int64_t>(c.planned))
      << "</text>";
  o << "<rect x='" << L << "' y='" << T << "' width='" << pw << "' height='" << ph << "' fill='none' stroke='#666'/>"
    << "<text x='" << L + pw / 2 << "' y='" << T + ph + 30 << "' font-size='12' text-anchor='middle'>optimizer step "
    << "(a column per phase: forward, backward, step; init and partition first)</text>";
  int lx = L;
  for (const std::string& cat : cats) {
    o << "<rect x='" << lx << "' y='" << c.height - 14 << "' width='10' height='10' fill='" << category_color(cat)
      << "'/><text x='" << lx + 13 << "' y='" << c.height - 5 << "' font-size='11'>" << html_escape(cat) << "</text>";
    lx += 14 + 7 * static_cast<int>(cat.size()) + 12;
  }
  return o.str() + "</svg>";
}

}  // namespace zrepro
