// tests/report/svg_chart_test.cpp: the chart module on its own: nice ticks
// cover the data (and 0 for bars) in round steps, tick labels, scales,
// escaping, and each chart's marks, legend, balanced markup and empty text.
#include "runner/report/svg_chart.h"

#include "catch2_compat.h"
#include <cmath>
#include <numeric>

#include "html_check.h"

using namespace xrun::report;
using report_test::attribute_values;
using report_test::count;
using report_test::markup_problem;

namespace {

// A step of 1, 2 or 5 times a power of ten.
bool round_step(double step) {
  const double magnitude = std::pow(10.0, std::floor(std::log10(step) + 1e-9));
  const double m = step / magnitude;
  return std::fabs(m - 1) < 1e-9 || std::fabs(m - 2) < 1e-9 || std::fabs(m - 5) < 1e-9;
}

void check_ticks(const Ticks& t, double lo, double hi) {
  INFO("ticks " << t.lo << ".." << t.hi << " step " << t.step << " for " << lo << ".." << hi);
  CHECK(t.lo <= lo);
  CHECK(t.hi >= hi);
  CHECK(round_step(t.step));
  REQUIRE(t.values.size() >= 2);
  CHECK(t.values.size() <= 12);
  CHECK(t.values.front() == Approx(t.lo));
  CHECK(t.values.back() == Approx(t.hi));
  for (size_t i = 1; i < t.values.size(); ++i)
    CHECK(t.values[i] - t.values[i - 1] == Approx(t.step));
  // Not wider than needed: the data reaches into the first and last interval.
  CHECK(lo < t.lo + t.step);
  CHECK(hi > t.hi - t.step);
}

Series series(const std::string& name, size_t style,
              const std::vector<std::pair<double, double>>& xy) {
  Series s;
  s.name = name;
  s.style = style;
  for (const auto& [x, y] : xy) s.points.push_back({x, y, ""});
  return s;
}

Bar bar(const std::string& label, double value, double lo = NAN, double hi = NAN, size_t style = 0,
        bool muted = false) {
  Bar b;
  b.label = label;
  b.value = value;
  b.lo = lo;
  b.hi = hi;
  b.style = style;
  b.muted = muted;
  return b;
}

}  // namespace

TEST_CASE("nice ticks cover the data range in round steps", "[report][ticks]") {
  const std::vector<std::pair<double, double>> ranges = {
      {0.13, 0.87},      {3, 97},          {1234, 98765}, {-5, 12},
      {0.0001, 0.00034}, {988.5, 1011.25}, {-300, -20},   {1, 2}};
  for (const auto& [lo, hi] : ranges) check_ticks(nice_ticks(lo, hi), lo, hi);
  // About as many intervals as asked for.
  CHECK(nice_ticks(0, 100, 5).values.size() == 6);
  CHECK(nice_ticks(0, 100, 10).values.size() == 11);
}

TEST_CASE("bar ticks include 0, integer ticks step by whole numbers", "[report][ticks]") {
  const Ticks up = nice_ticks(300, 900, 5, true);
  CHECK(up.lo == 0);
  CHECK(up.values.front() == 0);
  CHECK(up.hi >= 900);
  const Ticks down = nice_ticks(-40, -10, 5, true);
  CHECK(down.hi == 0);
  CHECK(down.lo <= -40);
  const Ticks epochs = nice_ticks(1, 3, 5, false, true);
  CHECK(epochs.step >= 1);
  for (double v : epochs.values) CHECK(v == std::round(v));
}

TEST_CASE("one value, nothing finite, reversed bounds: still ticks around the data",
          "[report][ticks]") {
  const Ticks one = nice_ticks(2.5, 2.5);
  CHECK(one.lo < 2.5);
  CHECK(one.hi > 2.5);
  const Ticks zero_bar = nice_ticks(0, 0, 5, true);
  CHECK(zero_bar.lo == 0);
  CHECK(zero_bar.hi > 0);
  const Ticks none = nice_ticks(NAN, INFINITY);
  CHECK(std::isfinite(none.lo));
  CHECK(std::isfinite(none.hi));
  CHECK(none.values.size() >= 2);
  check_ticks(nice_ticks(10, 2), 2, 10);
}

TEST_CASE("tick labels carry the decimals the step needs", "[report][ticks]") {
  CHECK(tick_label(0.2, 0.1) == "0.2");
  CHECK(tick_label(0.25, 0.05) == "0.25");
  CHECK(tick_label(1500, 500) == "1500");
  CHECK(tick_label(20000, 5000) == "20k");
  CHECK(tick_label(-0.5, 0.5) == "-0.5");
  CHECK(tick_label(1e-17, 0.1) == "0");
  CHECK(short_number(2490.8) == "2491");
  CHECK(short_number(12345) == "12.3k");
  CHECK(short_number(1.734) == "1.73");
  CHECK(short_number(NAN) == "-");
}

TEST_CASE("scales map the domain onto the range, linearly or by log2", "[report][ticks]") {
  const Scale linear(0, 10, 100, 200);
  CHECK(linear(0) == 100);
  CHECK(linear(10) == 200);
  CHECK(linear(2.5) == Approx(125));
  const Scale flipped(0, 1, 300, 20);  // y axes grow upwards
  CHECK(flipped(1) == 20);
  const Scale log2(64, 256, 0, 100, true);
  CHECK(log2(128) == Approx(50));
  CHECK(log2(256) == Approx(100));
}

TEST_CASE("text is escaped for HTML and SVG", "[report]") {
  CHECK(escape("<a href='x'>&\"") == "&lt;a href=&#39;x&#39;&gt;&amp;&quot;");
  CHECK(escape("plain · text") == "plain · text");
}

TEST_CASE("line chart: a path and markers per series, legend, balanced markup", "[report][chart]") {
  LineChart c;
  c.title = "Throughput <by> batch & size";
  c.x = {"batch size (images)", true, {64, 128, 256}};
  c.y = {"throughput (img/s)", false, {}, true};
  c.series = {series("a <&> b", 0, {{64, 900}, {128, 1000}, {256, 1050}}),
              series("second", 1, {{64, 500}, {128, 600}, {256, 650}}), series("no points", 2, {})};
  const std::string html = render_line_chart(c);
  CHECK(markup_problem(html) == "");
  CHECK(count(html, "class=\"mark line\"") == 2);
  CHECK(count(html, "class=\"mark point\"") == 6);
  CHECK(attribute_values(html, "class=\"mark line\"", "data-points") == std::vector<long>{3, 3});
  CHECK(count(html, "a &lt;&amp;&gt; b") >= 2);  // legend and tooltip, escaped
  CHECK(count(html, "<&>") == 0);
  CHECK(count(html, "Throughput &lt;by&gt; batch &amp; size") >= 1);
  CHECK(count(html, "no points") == 0);
  for (const char* tick : {">64<", ">128<", ">256<", ">0<"}) CHECK(count(html, tick) == 1);
  CHECK(count(html, "batch size (images)") == 1);
  CHECK(count(html, "<ul class=\"legend\">") == 1);
}

TEST_CASE("a chart with nothing to draw says so instead of drawing a frame", "[report][chart]") {
  LineChart line;
  line.title = "Loss";
  line.series = {series("run", 0, {})};
  line.empty_text = "No losses stored.";
  BarChart bars;
  bars.title = "Speedup";
  bars.empty_text = "Nothing to compare.";
  StackedBarChart stacked;
  stacked.title = "Phases";
  stacked.keys = {"forward"};
  stacked.bars = {{"run", {0.0}, {}}};
  stacked.empty_text = "No phase times.";
  Histogram hist;
  hist.title = "Steps";
  hist.values = {NAN};
  hist.empty_text = "No measured steps.";
  for (const auto& [html, text] : std::vector<std::pair<std::string, std::string>>{
           {render_line_chart(line), line.empty_text},
           {render_bar_chart(bars), bars.empty_text},
           {render_stacked_bars(stacked), stacked.empty_text},
           {render_histogram(hist), hist.empty_text}}) {
    CHECK(count(html, "<svg") == 0);
    CHECK(count(html, "class=\"empty\"") == 1);
    CHECK(count(html, text) == 1);
    CHECK(markup_problem(html) == "");
  }
}

TEST_CASE("bar chart: bars from 0, error bars, pale bars, reference line", "[report][chart]") {
  BarChart c;
  c.title = "Speedup";
  c.value_label = "ratio";
  c.reference = 1;
  c.bars = {bar("fast", 1.8, 1.7, 1.9, 0), bar("same", 1.01, 0.97, 1.05, 1, true),
            bar("plain", 0.6)};
  c.legend = {{"fast", 0}, {"interval includes 1", 7, LegendEntry::Kind::muted_box}};
  const std::string html = render_bar_chart(c);
  CHECK(markup_problem(html) == "");
  CHECK(count(html, "class=\"mark bar\"") == 3);
  CHECK(count(html, "class=\"error-bar\"") == 2);
  CHECK(count(html, "fill-opacity=\"0.3\"") == 2);  // the pale bar and its legend swatch
  CHECK(count(html, "class=\"reference\"") == 1);
  CHECK(count(html, ">0<") == 1);  // the value axis starts at 0
  CHECK(count(html, ">1.80<") + count(html, ">1.8<") == 1);
}

TEST_CASE("long category labels are cut with an ellipsis, the tooltip keeps them whole",
          "[report][chart]") {
  const std::string name(80, 'k');
  BarChart c;
  c.title = "Kernels";
  c.bars = {bar(name, 5.0)};
  const std::string html = render_bar_chart(c);
  CHECK(count(html, "k…</text>") == 1);  // the drawn label, cut
  CHECK(count(html, ">" + name + "</text>") == 0);
  CHECK(count(html, "<title>" + name) == 1);
}

TEST_CASE("stacked bars: one segment per positive value, totals at the end", "[report][chart]") {
  StackedBarChart c;
  c.title = "Phases";
  c.value_label = "time (ms)";
  c.keys = {"forward", "backward", "optimizer"};
  c.bars = {{"run 1", {10, 20, 6}, {}}, {"run 2", {12, 0, NAN}, {}}};
  const std::string html = render_stacked_bars(c);
  CHECK(markup_problem(html) == "");
  CHECK(count(html, "class=\"mark segment\"") == 4);
  CHECK(count(html, "data-key=\"forward\"") == 2);
  CHECK(count(html, ">36<") == 1);
  CHECK(count(html, ">12<") == 1);
  CHECK(count(html, "<li>") == 3);  // a legend entry per key
}

TEST_CASE("histogram: bin counts add up to the finite values", "[report][chart]") {
  Histogram h;
  h.title = "run";
  h.x_label = "step time (ms)";
  for (int i = 0; i < 97; ++i) h.values.push_back(100 + (i * 37) % 23 + 0.25 * i);
  h.values.push_back(NAN);
  const std::string html = render_histogram(h);
  CHECK(markup_problem(html) == "");
  const std::vector<long> bins = attribute_values(html, "class=\"mark bin\"", "data-count");
  CHECK(bins.size() >= 4);
  CHECK(std::accumulate(bins.begin(), bins.end(), 0L) == 97);
  CHECK(count(html, "class=\"median\"") == 1);
  // All values equal: one bin holds them all.
  Histogram same;
  same.values = std::vector<double>(10, 42.0);
  CHECK(attribute_values(render_histogram(same), "class=\"mark bin\"", "data-count") ==
        std::vector<long>{10});
}
