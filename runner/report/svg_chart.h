// runner/report/svg_chart.h: a tiny chart module for the HTML report: text
// escaping, scales with "nice" ticks, and four charts drawn as inline SVG
// inside an HTML <figure> (title, axes with labels and ticks, an HTML legend):
// line chart, horizontal bar chart with error bars, stacked bars, histogram.
//
// Every data mark carries class "mark" plus its kind (line, point, bar,
// segment, bin) so tests and readers can find them; its tooltip is an SVG
// <title>. Colours come from one fixed palette by style index; a chart with
// nothing to draw says so in text instead of drawing an empty frame.
#pragma once

#include <cstddef>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace xrun::report {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Text and attribute escaping for HTML and SVG: & < > " '.
std::string escape(std::string_view text);

// --- Scales and ticks -----------------------------------------------------------

// Evenly spaced round tick values (steps of 1, 2 or 5 times a power of ten)
// from lo to hi, the first at or below the data's minimum and the last at or
// above its maximum.
struct Ticks {
  double lo = 0, hi = 1, step = 1;
  std::vector<double> values;
};
// About `target` intervals over [lo, hi]; `include_zero` stretches the range
// to 0 (bars); `integer` keeps the step at 1 or more (counts, epochs).
// Non-finite or empty ranges give ticks around what is finite (or 0..1).
Ticks nice_ticks(double lo, double hi, int target = 5, bool include_zero = false,
                 bool integer = false);

// A tick's text: as many decimals as `step` needs; 12000 -> "12k" when the
// step is a multiple of 1000.
std::string tick_label(double value, double step);

// A number for people: 3 significant digits, thousands as "12.3k".
std::string short_number(double value);

// Maps a data interval onto a pixel interval, linearly or on a log2 axis.
class Scale {
 public:
  Scale(double d0, double d1, double r0, double r1, bool log2 = false);
  double operator()(double v) const;

 private:
  double d0_, d1_, r0_, r1_;
  bool log2_;
};

// --- Styles and legends ----------------------------------------------------------

// The fixed palette: distinguishable colours, style index modulo its size.
const std::vector<std::string>& palette();
std::string style_color(size_t style);
// Line dash for a style index: solid for the first round of the palette,
// then dashed, then dotted ("" = solid).
std::string style_dash(size_t style);

struct LegendEntry {
  enum class Kind { line, box, muted_box, reference };
  std::string name;
  size_t style = 0;
  Kind kind = Kind::box;
};

// A legend entry's sample (a small inline SVG) and a legend as an HTML list.
std::string legend_swatch(const LegendEntry& entry);
std::string render_legend(const std::vector<LegendEntry>& entries);

// --- Charts -----------------------------------------------------------------------

struct Axis {
  std::string label;          // with its unit: "batch size (images)"
  bool log2 = false;          // log2 axis (positive values only)
  std::vector<double> ticks;  // explicit tick values; empty = nice ticks
  bool include_zero = false;
  bool integer = false;  // integer tick steps
};

struct Point {
  double x = 0, y = 0;
  std::string tip;  // tooltip; "" = series name, x and y
};

struct Series {
  std::string name;
  size_t style = 0;
  std::vector<Point> points;
  bool line = true;     // false: markers only (a scatter)
  bool markers = true;  // false: no markers even where the chart draws them
};

struct LineChart {
  std::string title;
  Axis x, y;
  std::vector<Series> series;  // series without points are left out
  bool markers = true;         // a circle on every point
  bool legend = true;          // false: the caller shows one legend for several charts
  std::string note;            // a line of text under the chart
  std::string empty_text;      // shown when no series has a point
  int width = 560, height = 330;
};
std::string render_line_chart(const LineChart& chart);

// Horizontal bars from 0, optional error bars (lo..hi) and a reference line.
struct Bar {
  std::string label;
  double value = 0;
  double lo = kNaN, hi = kNaN;  // error bar; NaN = none
  size_t style = 0;
  bool muted = false;      // drawn pale with a dashed outline
  std::string value_text;  // printed after the bar; "" = short_number(value)
  std::string tip;
};

struct BarChart {
  std::string title;
  std::string value_label;  // the value axis, with its unit
  std::vector<Bar> bars;
  double reference = kNaN;  // a vertical line (1.0 for ratios); NaN = none
  std::vector<LegendEntry> legend;
  std::string note;
  std::string empty_text;
  int width = 560;
  double row_height = 26;  // pixels per bar
};
std::string render_bar_chart(const BarChart& chart);

// Horizontal bars of segments, one segment per key (colour = key index).
struct StackedBar {
  std::string label;
  std::vector<double> values;     // by key index; 0 or NaN = no segment
  std::vector<std::string> tips;  // by key index, optional
};

struct StackedBarChart {
  std::string title;
  std::string value_label;
  std::string value_unit;  // after each bar's total: " ms"
  std::vector<std::string> keys;
  std::vector<size_t> key_styles;  // style of each key; empty = key index
  std::vector<StackedBar> bars;
  std::string note;
  std::string empty_text;
  int width = 1100;
};
std::string render_stacked_bars(const StackedBarChart& chart);

// Counts of values in nice-width bins, with a dashed line at the median.
struct Histogram {
  std::string title;
  std::string x_label;
  std::vector<double> values;  // non-finite values are left out
  size_t style = 0;
  std::string empty_text;
  int width = 340, height = 210;
};
std::string render_histogram(const Histogram& chart);

// The chart module's stylesheet (axes, grid, marks, legends, figures).
const char* chart_css();

}  // namespace xrun::report
