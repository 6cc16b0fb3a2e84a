// The charts of zrepro's pages: honest axes (a flat loss is drawn flat, steps on whole
// numbers, bytes from zero), a legend entry only for a series with data, the drawn
// ranges in data- attributes, one bar per row with the capacity line.
#include <gtest/gtest.h>

#include <regex>

#include "trainer/report/svg_chart.h"

using namespace zrepro;

namespace {
double svg_attr(const std::string& svg, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(svg, m, std::regex(name + "='([-0-9.e]+)'"))) return NAN;
  return std::stod(m[1]);
}
}  // namespace

// [Note: an honest axis] Two losses 0.001 apart: the axis spans at least 2% of the loss
// (not 0.001), covers both points and has labelled ticks.
TEST(SvgChart, AFlatLossIsDrawnFlat) {
  const Axis a = nice_axis(2.300, 2.301);
  EXPECT_GE(a.hi - a.lo, kMinRelativeSpan * 2.301 - 1e-12);
  EXPECT_LE(a.lo, 2.300);
  EXPECT_GE(a.hi, 2.301);
  EXPECT_GE(a.ticks.size(), 3u);
  EXPECT_LE(a.ticks.size(), 8u);
  // A real range keeps its own scale: 1.2 .. 4.9 over ticks of 1.
  const Axis b = nice_axis(1.2, 4.9, 4);
  EXPECT_EQ(b.lo, 1.0);
  EXPECT_EQ(b.hi, 5.0);
  EXPECT_EQ(tick_label(2.5, 0.5), "2.5");
  EXPECT_EQ(tick_label(2.25, 0.25), "2.25");
  EXPECT_EQ(tick_label(-0.0, 1), "0");
}

TEST(SvgChart, StepsAreWholeNumbersAndBytesStartAtZero) {
  for (double t : nice_axis(0, 1, 8, false, true).ticks) EXPECT_EQ(t, std::round(t));
  EXPECT_EQ(nice_axis(0, 1, 8, false, true).ticks.size(), 2u);
  const Axis bytes = nice_axis(3e6, 5e6, 5, true);
  EXPECT_EQ(bytes.lo, 0);
  EXPECT_GE(bytes.hi, 5e6);
}

TEST(SvgChart, LegendOnlyForSeriesWithDataAndTheRangeIsInTheSvg) {
  const std::string svg = line_chart({{"B x1", {{0, 6.97}, {1, 6.73}}, ""}, {"A x1", {}, ""}},
                                     {"loss per step", "optimizer step", "loss"});
  EXPECT_NE(svg.find("class='legend' x="), std::string::npos);
  EXPECT_NE(svg.find(">B x1</text>"), std::string::npos);
  EXPECT_EQ(svg.find(">A x1</text>"), std::string::npos) << "no legend entry without data";
  EXPECT_NE(svg.find("A x1: no data"), std::string::npos);
  EXPECT_LE(svg_attr(svg, "data-ymin"), 6.73);
  EXPECT_GE(svg_attr(svg, "data-ymax"), 6.97);
  EXPECT_GE(svg_attr(svg, "data-ymax") - svg_attr(svg, "data-ymin"), 0.24);
  EXPECT_NE(svg.find(">optimizer step</text>"), std::string::npos);
  EXPECT_NE(line_chart({{"A", {}, ""}}, {"t", "x", "y"}).find("no data"), std::string::npos);
}

TEST(SvgChart, OneStackedBarPerRowAgainstTheCapacity) {
  const std::string svg =
      stacked_bars({{"A x2 rank 0", "A-2-0", {{"params", 100}, {"activations", 300}}, 350, true},
                    {"A x2 rank 1", "A-2-1", {{"params", 100}, {"grads", 0}}, -1, false}},
                   {"memory", 380});
  EXPECT_NE(svg.find("data-row='A-2-0'"), std::string::npos);
  EXPECT_NE(svg.find("data-row='A-2-1'"), std::string::npos);
  EXPECT_NE(svg.find("class='capacity'"), std::string::npos);
  EXPECT_NE(svg.find("class='marker'"), std::string::npos);
  EXPECT_EQ(svg.find("data-category='grads'"), std::string::npos) << "an empty category draws nothing";
  EXPECT_GE(svg_attr(svg, "data-xmax"), 400);
}

TEST(SvgChart, SwimlanesAndColumnsNameWhatTheyDraw) {
  const std::string lanes = swimlanes({{"rank 0 comm", {{0.0, 0.5, "all_reduce", "", "#ef6c00", false}}, false},
                                       {"rank 1 comm", {{0.1, 1.0, "all_reduce", "#12", "", true}}, true}},
                                      {"lanes"});
  EXPECT_NE(lanes.find("data-lane='rank 1 comm'"), std::string::npos);
  EXPECT_NE(lanes.find("fill='#c62828' font-weight='bold'>rank 1 comm"), std::string::npos) << "the failing rank";
  EXPECT_NE(lanes.find("stroke-dasharray='3'><title>#12"), std::string::npos) << "the open collective";
  const std::string cols = stacked_columns({{"step 0 forward", 0, {{"params", 10}, {"activations", 30}}, false},
                                            {"step 0 backward", 0, {{"params", 10}, {"activations", 20}}, true}},
                                           {"memory", 50, 45});
  EXPECT_NE(cols.find("data-columns='2'"), std::string::npos);
  EXPECT_NE(cols.find(">peak 40 bytes<"), std::string::npos) << cols;
  EXPECT_NE(cols.find("class='unfinished'"), std::string::npos);
  EXPECT_NE(cols.find("class='planned'"), std::string::npos);
  EXPECT_NE(cols.find("class='capacity'"), std::string::npos);
}
