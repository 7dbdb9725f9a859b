// runner/report/svg_chart.cpp: see svg_chart.h. Each chart is laid out in
// pixels (the SVG's viewBox), with margins sized from its tick and category
// labels; text width is estimated from the character count (the page's
// sans-serif font averages about 0.6 em per character).
#include "runner/report/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/stats.h"

namespace xrun::report {

// --- Text -------------------------------------------------------------------------

std::string escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

namespace {

// Characters (UTF-8 code points) in s.
size_t char_count(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

double text_width(std::string_view s, double font_px) {
  return static_cast<double>(char_count(s)) * 0.6 * font_px;
}

// s cut to at most max_chars characters, with "…" where it was cut.
std::string fit(const std::string& s, size_t max_chars) {
  if (char_count(s) <= max_chars) return s;
  size_t chars = 0, i = 0;
  for (; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80 && ++chars == max_chars) break;
  }
  return s.substr(0, i) + "…";
}

std::string printf_string(const char* format, double v, int digits = -1) {
  char buf[64];
  if (digits >= 0)
    std::snprintf(buf, sizeof buf, format, digits, v);
  else
    std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// A pixel coordinate: one decimal, no trailing ".0".
std::string px(double v) {
  std::string s = printf_string("%.1f", v);
  if (s.size() > 2 && s.compare(s.size() - 2, 2, ".0") == 0) s.resize(s.size() - 2);
  return s == "-0" ? "0" : s;
}

}  // namespace

std::string tick_label(double value, double step) {
  if (std::fabs(value) < std::fabs(step) * 1e-9) return "0";
  if (std::fabs(value) >= 10000 && std::fmod(step, 1000) == 0)
    return printf_string("%.0f", value / 1000) + "k";
  const int decimals = step >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(step) - 1e-9));
  return printf_string("%.*f", value, decimals);
}

std::string short_number(double v) {
  if (!std::isfinite(v)) return "-";
  const double a = std::fabs(v);
  if (a >= 10000) return printf_string("%.1f", v / 1000) + "k";
  if (a >= 100 || v == std::round(v)) return printf_string("%.0f", v);
  if (a >= 10) return printf_string("%.1f", v);
  if (a >= 1) return printf_string("%.2f", v);
  return printf_string("%.3g", v);
}

// --- Scales and ticks -----------------------------------------------------------

Ticks nice_ticks(double lo, double hi, int target, bool include_zero, bool integer) {
  if (!std::isfinite(lo) && !std::isfinite(hi)) lo = 0, hi = 1;
  if (!std::isfinite(lo)) lo = hi;
  if (!std::isfinite(hi)) hi = lo;
  if (lo > hi) std::swap(lo, hi);
  if (include_zero) lo = std::min(lo, 0.0), hi = std::max(hi, 0.0);
  if (hi - lo <= 1e-12 * std::max(1.0, std::fabs(hi))) {  // one value: a range around it
    if (include_zero && lo == 0) {
      hi = 1;
    } else {
      const double pad = lo == 0 ? 1 : std::fabs(lo) * 0.1;
      lo -= pad;
      hi += pad;
    }
  }
  const double raw = (hi - lo) / std::max(target, 1);
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / magnitude;
  double step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * magnitude;
  if (integer) step = std::max(step, 1.0);
  Ticks t;
  t.step = step;
  const double first = std::floor(lo / step + 1e-9), last = std::ceil(hi / step - 1e-9);
  t.lo = first * step;
  t.hi = last * step;
  for (double k = first; k <= last + 0.5; ++k) {
    const double v = k * step;
    t.values.push_back(std::fabs(v) < step * 1e-9 ? 0.0 : v);
  }
  return t;
}

Scale::Scale(double d0, double d1, double r0, double r1, bool log2)
    : d0_(log2 ? std::log2(d0) : d0),
      d1_(log2 ? std::log2(d1) : d1),
      r0_(r0),
      r1_(r1),
      log2_(log2) {}

double Scale::operator()(double v) const {
  if (log2_) v = v > 0 ? std::log2(v) : d0_;
  if (d1_ == d0_) return (r0_ + r1_) / 2;
  return r0_ + (v - d0_) / (d1_ - d0_) * (r1_ - r0_);
}

// --- Styles and legends ----------------------------------------------------------

const std::vector<std::string>& palette() {
  static const std::vector<std::string> colors = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                                  "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                                                  "#17becf", "#bcbd22"};
  return colors;
}

std::string style_color(size_t style) { return palette()[style % palette().size()]; }

std::string style_dash(size_t style) {
  static const char* dashes[] = {"", "6 3", "2 2", "8 3 2 3"};
  return dashes[(style / palette().size()) % std::size(dashes)];
}

namespace {

std::string dash_attribute(size_t style) {
  const std::string dash = style_dash(style);
  return dash.empty() ? "" : " stroke-dasharray=\"" + dash + "\"";
}

}  // namespace

std::string legend_swatch(const LegendEntry& e) {
  const std::string color = style_color(e.style);
  std::string shape;
  switch (e.kind) {
    case LegendEntry::Kind::line:
      shape = "<line x1=\"1\" y1=\"6\" x2=\"23\" y2=\"6\" stroke=\"" + color +
              "\" stroke-width=\"2.5\"" + dash_attribute(e.style) + "/>";
      break;
    case LegendEntry::Kind::box:
      shape = "<rect x=\"4\" y=\"1\" width=\"16\" height=\"10\" rx=\"2\" fill=\"" + color + "\"/>";
      break;
    case LegendEntry::Kind::muted_box:
      shape = "<rect x=\"4.5\" y=\"1.5\" width=\"15\" height=\"9\" rx=\"2\" fill=\"" + color +
              "\" fill-opacity=\"0.3\" stroke=\"" + color + "\" stroke-dasharray=\"3 2\"/>";
      break;
    case LegendEntry::Kind::reference:
      shape = "<line class=\"reference\" x1=\"12\" y1=\"0\" x2=\"12\" y2=\"12\"/>";
      break;
  }
  return "<svg class=\"swatch\" width=\"24\" height=\"12\" viewBox=\"0 0 24 12\">" + shape +
         "</svg>";
}

std::string render_legend(const std::vector<LegendEntry>& entries) {
  if (entries.empty()) return "";
  std::string out = "<ul class=\"legend\">";
  for (const LegendEntry& e : entries) out += "<li>" + legend_swatch(e) + escape(e.name) + "</li>";
  return out + "</ul>";
}

namespace {

std::string figure(const std::string& title, const std::string& svg,
                   const std::vector<LegendEntry>& legend, const std::string& note) {
  std::string out = "<figure class=\"chart\"><figcaption>" + escape(title) + "</figcaption>" + svg +
                    render_legend(legend);
  if (!note.empty()) out += "<p class=\"note\">" + escape(note) + "</p>";
  return out + "</figure>";
}

std::string empty_figure(const std::string& title, const std::string& text) {
  return "<figure class=\"chart empty\"><figcaption>" + escape(title) +
         "</figcaption><p class=\"empty\">" + escape(text) + "</p></figure>";
}

std::string svg_open(double width, double height, const std::string& label) {
  return "<svg class=\"chart\" width=\"" + px(width) + "\" height=\"" + px(height) +
         "\" viewBox=\"0 0 " + px(width) + " " + px(height) + "\" role=\"img\" aria-label=\"" +
         escape(label) + "\">";
}

std::string text(double x, double y, const std::string& s, const std::string& cls,
                 const char* anchor = "start") {
  std::string out = "<text x=\"" + px(x) + "\" y=\"" + px(y) + "\"";
  if (!cls.empty()) out += " class=\"" + cls + "\"";
  if (std::string_view(anchor) != "start") out += std::string(" text-anchor=\"") + anchor + "\"";
  return out + ">" + escape(s) + "</text>";
}

std::string line(double x1, double y1, double x2, double y2, const std::string& cls) {
  return "<line class=\"" + cls + "\" x1=\"" + px(x1) + "\" y1=\"" + px(y1) + "\" x2=\"" + px(x2) +
         "\" y2=\"" + px(y2) + "\"/>";
}

std::string tooltip(const std::string& tip) { return "<title>" + escape(tip) + "</title>"; }

// The plot area's edges, in pixels.
struct Plot {
  double left, top, right, bottom;
};

std::vector<std::string> tick_labels(const Ticks& t, bool explicit_ticks) {
  std::vector<std::string> labels;
  for (double v : t.values)
    labels.push_back(explicit_ticks ? short_number(v) : tick_label(v, t.step));
  return labels;
}

double widest(const std::vector<std::string>& labels, double font_px) {
  double w = 0;
  for (const std::string& s : labels) w = std::max(w, text_width(s, font_px));
  return w;
}

// Ticks (with labels) and grid lines along the bottom, and the axis label.
void x_axis(std::string& out, const Plot& p, const Scale& sx, const Ticks& t,
            const std::vector<std::string>& labels, const std::string& label, bool grid) {
  for (size_t i = 0; i < t.values.size(); ++i) {
    const double x = sx(t.values[i]);
    if (grid) out += line(x, p.top, x, p.bottom, "grid");
    out += line(x, p.bottom, x, p.bottom + 5, "axis");
    out += text(x, p.bottom + 18, labels[i], "tick", "middle");
  }
  out += line(p.left, p.bottom, p.right, p.bottom, "axis");
  out += text((p.left + p.right) / 2, p.bottom + 38, label, "axis-label", "middle");
}

// Ticks and grid lines up the left side, and the rotated axis label.
void y_axis(std::string& out, const Plot& p, const Scale& sy, const Ticks& t,
            const std::vector<std::string>& labels, const std::string& label) {
  for (size_t i = 0; i < t.values.size(); ++i) {
    const double y = sy(t.values[i]);
    out += line(p.left, y, p.right, y, t.values[i] == 0 ? "axis" : "grid");
    out += text(p.left - 7, y + 4, labels[i], "tick", "end");
  }
  out += line(p.left, p.top, p.left, p.bottom, "axis");
  const double cy = (p.top + p.bottom) / 2;
  out += "<text class=\"axis-label\" text-anchor=\"middle\" transform=\"translate(14 " + px(cy) +
         ") rotate(-90)\">" + escape(label) + "</text>";
}

// The ticks of an axis over data [lo, hi]: its explicit ticks (the domain
// padded so no point sits on the frame) or nice ones.
Ticks axis_ticks(const Axis& axis, double lo, double hi) {
  if (axis.ticks.empty()) return nice_ticks(lo, hi, 5, axis.include_zero, axis.integer);
  Ticks t;
  t.values = axis.ticks;
  t.lo = std::min(lo, *std::min_element(t.values.begin(), t.values.end()));
  t.hi = std::max(hi, *std::max_element(t.values.begin(), t.values.end()));
  if (axis.log2) {
    const double pad = t.lo == t.hi ? 2.0 : std::pow(2.0, 0.25 * std::log2(t.hi / t.lo));
    t.lo /= pad, t.hi *= pad;
  } else {
    const double pad = t.lo == t.hi ? 1.0 : 0.05 * (t.hi - t.lo);
    t.lo -= pad, t.hi += pad;
  }
  return t;
}

struct Extent {
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  void add(double x, double y) {
    x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
  }
};

std::string series_path(const Series& s, const Scale& sx, const Scale& sy) {
  std::string d;
  for (const Point& p : s.points) d += (d.empty() ? "M" : " L") + px(sx(p.x)) + "," + px(sy(p.y));
  return "<path class=\"mark line\" data-series=\"" + escape(s.name) + "\" data-points=\"" +
         std::to_string(s.points.size()) + "\" d=\"" + d + "\" fill=\"none\" stroke=\"" +
         style_color(s.style) + "\" stroke-width=\"2\"" + dash_attribute(s.style) +
         " stroke-linejoin=\"round\">" + tooltip(s.name) + "</path>";
}

std::string series_markers(const Series& s, const Scale& sx, const Scale& sy) {
  std::string out;
  for (const Point& p : s.points) {
    const std::string tip =
        p.tip.empty() ? s.name + ": " + short_number(p.x) + ", " + short_number(p.y) : p.tip;
    out += "<circle class=\"mark point\" cx=\"" + px(sx(p.x)) + "\" cy=\"" + px(sy(p.y)) +
           "\" r=\"3.5\" fill=\"" + style_color(s.style) + "\">" + tooltip(tip) + "</circle>";
  }
  return out;
}

// The frame of horizontal bars: category labels at the left (at most 42% of
// the width, cut to fit), value texts at the right, one row per bar, as many
// ticks as the plot's width holds.
struct Rows {
  Plot plot{0, 0, 0, 0};
  double height = 0, row = 26, thickness = 16;
  std::vector<std::string> labels;
  Ticks ticks;
  double top(size_t i) const {
    return plot.top + row * static_cast<double>(i) + (row - thickness) / 2;
  }
  double middle(size_t i) const { return top(i) + thickness / 2; }
};

Rows layout_rows(double width, double row_height, const std::vector<std::string>& labels,
                 const std::vector<std::string>& value_texts, double lo, double hi) {
  Rows r;
  r.row = row_height;
  r.thickness = std::round(row_height * 0.62);
  const double max_margin = 0.42 * width;
  const auto max_chars = static_cast<size_t>((max_margin - 14) / (0.6 * 12));
  for (const std::string& label : labels) r.labels.push_back(fit(label, max_chars));
  const double left = std::clamp(widest(r.labels, 12) + 14, 60.0, max_margin);
  const double right = width - std::max(widest(value_texts, 12) + 14, 20.0);
  r.height = 10 + row_height * static_cast<double>(labels.size()) + 46;
  r.plot = {left, 10, right, r.height - 46};
  r.ticks = nice_ticks(lo, hi, std::clamp(static_cast<int>((right - left) / 90), 2, 6), true);
  return r;
}

// The opening of a horizontal bar chart: value axis with grid, category labels.
std::string rows_frame(const Rows& r, double width, const std::string& title,
                       const std::string& value_label, const Scale& sx) {
  std::string svg = svg_open(width, r.height, title);
  x_axis(svg, r.plot, sx, r.ticks, tick_labels(r.ticks, false), value_label, true);
  for (size_t i = 0; i < r.labels.size(); ++i)
    svg += text(r.plot.left - 8, r.middle(i) + 4, r.labels[i], "category", "end");
  return svg;
}

}  // namespace

// --- Line chart ----------------------------------------------------------------------

std::string render_line_chart(const LineChart& c) {
  Extent e;
  std::vector<const Series*> drawn;
  for (const Series& s : c.series) {
    if (s.points.empty()) continue;
    drawn.push_back(&s);
    for (const Point& p : s.points) e.add(p.x, p.y);
  }
  if (drawn.empty()) return empty_figure(c.title, c.empty_text);
  const Ticks xt = axis_ticks(c.x, e.x0, e.x1), yt = axis_ticks(c.y, e.y0, e.y1);
  const auto xlabels = tick_labels(xt, !c.x.ticks.empty());
  const auto ylabels = tick_labels(yt, !c.y.ticks.empty());
  const Plot p{widest(ylabels, 12) + 34, 12, c.width - 18.0, c.height - 46.0};
  const Scale sx(xt.lo, xt.hi, p.left, p.right, c.x.log2);
  const Scale sy(yt.lo, yt.hi, p.bottom, p.top, c.y.log2);
  std::string svg = svg_open(c.width, c.height, c.title);
  y_axis(svg, p, sy, yt, ylabels, c.y.label);
  x_axis(svg, p, sx, xt, xlabels, c.x.label, false);
  std::vector<LegendEntry> legend;
  for (const Series* s : drawn) {
    if (s->line) svg += series_path(*s, sx, sy);
    if ((c.markers && s->markers) || s->points.size() == 1 || !s->line)
      svg += series_markers(*s, sx, sy);
    if (c.legend) legend.push_back({s->name, s->style, LegendEntry::Kind::line});
  }
  return figure(c.title, svg + "</svg>", legend, c.note);
}

// --- Bar chart ------------------------------------------------------------------------

namespace {

std::string bar_rect(const Bar& b, double x, double y, double w, double h) {
  const std::string color = style_color(b.style);
  std::string out = "<rect class=\"mark bar\" x=\"" + px(x) + "\" y=\"" + px(y) + "\" width=\"" +
                    px(w) + "\" height=\"" + px(h) + "\" fill=\"" + color + "\"";
  if (b.muted) out += " fill-opacity=\"0.3\" stroke=\"" + color + "\" stroke-dasharray=\"4 2\"";
  const std::string tip = b.tip.empty() ? b.label + ": " + short_number(b.value) : b.tip;
  return out + ">" + tooltip(tip) + "</rect>";
}

std::string error_bar(double x0, double x1, double cy, double h) {
  return "<g class=\"error-bar\">" + line(x0, cy, x1, cy, "whisker") +
         line(x0, cy - h / 2, x0, cy + h / 2, "whisker") +
         line(x1, cy - h / 2, x1, cy + h / 2, "whisker") + "</g>";
}

std::string bar_value_text(const Bar& b) {
  return b.value_text.empty() ? short_number(b.value) : b.value_text;
}

}  // namespace

std::string render_bar_chart(const BarChart& c) {
  if (c.bars.empty()) return empty_figure(c.title, c.empty_text);
  double lo = 0, hi = std::isfinite(c.reference) ? c.reference : 0;
  std::vector<std::string> labels, values;
  for (const Bar& b : c.bars) {
    lo = std::min({lo, b.value, std::isfinite(b.lo) ? b.lo : 0.0});
    hi = std::max({hi, b.value, std::isfinite(b.hi) ? b.hi : 0.0});
    labels.push_back(b.label);
    values.push_back(bar_value_text(b));
  }
  const Rows r = layout_rows(c.width, c.row_height, labels, values, lo, hi);
  const Scale sx(r.ticks.lo, r.ticks.hi, r.plot.left, r.plot.right);
  std::string svg = rows_frame(r, c.width, c.title, c.value_label, sx);
  for (size_t i = 0; i < c.bars.size(); ++i) {
    const Bar& b = c.bars[i];
    const double x0 = sx(std::min(0.0, b.value)), x1 = sx(std::max(0.0, b.value));
    svg += bar_rect(b, x0, r.top(i), x1 - x0, r.thickness);
    double end = sx(b.value);
    if (std::isfinite(b.lo) && std::isfinite(b.hi)) {
      svg += error_bar(sx(b.lo), sx(b.hi), r.middle(i), r.thickness * 0.6);
      end = std::max(end, sx(b.hi));
    }
    svg += text(end + 6, r.middle(i) + 4, values[i], "value");
  }
  if (std::isfinite(c.reference))
    svg += line(sx(c.reference), r.plot.top, sx(c.reference), r.plot.bottom, "reference");
  return figure(c.title, svg + "</svg>", c.legend, c.note);
}

// --- Stacked bars -----------------------------------------------------------------------

namespace {

double bar_total(const StackedBar& b) {
  double total = 0;
  for (double v : b.values)
    if (std::isfinite(v) && v > 0) total += v;
  return total;
}

size_t key_style(const StackedBarChart& c, size_t key) {
  return key < c.key_styles.size() ? c.key_styles[key] : key;
}

std::string segments(const StackedBarChart& c, const StackedBar& b, const Scale& sx, double top,
                     double h) {
  std::string out;
  double at = 0;
  for (size_t k = 0; k < b.values.size() && k < c.keys.size(); ++k) {
    const double v = b.values[k];
    if (!std::isfinite(v) || v <= 0) continue;
    const std::string tip =
        k < b.tips.size() && !b.tips[k].empty() ? b.tips[k] : c.keys[k] + ": " + short_number(v);
    out += "<rect class=\"mark segment\" data-key=\"" + escape(c.keys[k]) + "\" x=\"" + px(sx(at)) +
           "\" y=\"" + px(top) + "\" width=\"" + px(sx(at + v) - sx(at)) + "\" height=\"" + px(h) +
           "\" fill=\"" + style_color(key_style(c, k)) + "\">" + tooltip(tip) + "</rect>";
    at += v;
  }
  return out;
}

}  // namespace

std::string render_stacked_bars(const StackedBarChart& c) {
  double hi = 0;
  std::vector<std::string> labels, totals;
  for (const StackedBar& b : c.bars) {
    hi = std::max(hi, bar_total(b));
    labels.push_back(b.label);
    totals.push_back(short_number(bar_total(b)) + c.value_unit);
  }
  if (hi <= 0) return empty_figure(c.title, c.empty_text);
  const Rows r = layout_rows(c.width, 26, labels, totals, 0, hi);
  const Scale sx(r.ticks.lo, r.ticks.hi, r.plot.left, r.plot.right);
  std::string svg = rows_frame(r, c.width, c.title, c.value_label, sx);
  for (size_t i = 0; i < c.bars.size(); ++i) {
    svg += segments(c, c.bars[i], sx, r.top(i), r.thickness);
    svg += text(sx(bar_total(c.bars[i])) + 6, r.middle(i) + 4, totals[i], "value");
  }
  std::vector<LegendEntry> legend;
  for (size_t k = 0; k < c.keys.size(); ++k)
    legend.push_back({c.keys[k], key_style(c, k), LegendEntry::Kind::box});
  return figure(c.title, svg + "</svg>", legend, c.note);
}

// --- Histogram ---------------------------------------------------------------------------

namespace {

// Counts per bin of width bins.step from bins.lo.
std::vector<int64_t> bin_counts(const std::vector<double>& values, const Ticks& bins) {
  const size_t n = std::max<size_t>(bins.values.size(), 2) - 1;
  std::vector<int64_t> counts(n, 0);
  for (double v : values) {
    const double at = std::floor((v - bins.lo) / bins.step);
    counts[static_cast<size_t>(std::clamp(at, 0.0, static_cast<double>(n - 1)))] += 1;
  }
  return counts;
}

// The coarser labelled ticks of a histogram's x axis, within its bins.
Ticks label_ticks(const Ticks& bins) {
  Ticks t = nice_ticks(bins.lo, bins.hi, 4);
  std::erase_if(t.values, [&](double v) {
    return v < bins.lo - 1e-9 * bins.step || v > bins.hi + 1e-9 * bins.step;
  });
  return t;
}

}  // namespace

std::string render_histogram(const Histogram& c) {
  std::vector<double> values;
  for (double v : c.values)
    if (std::isfinite(v)) values.push_back(v);
  if (values.empty()) return empty_figure(c.title, c.empty_text);
  const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  const int target = std::clamp(static_cast<int>(std::sqrt(values.size())), 4, 24);
  const Ticks bins = nice_ticks(*lo, *hi, target);
  const std::vector<int64_t> counts = bin_counts(values, bins);
  const Ticks xt = label_ticks(bins);
  const Ticks yt = nice_ticks(
      0, static_cast<double>(*std::max_element(counts.begin(), counts.end())), 4, true, true);
  const auto ylabels = tick_labels(yt, false);
  const Plot p{widest(ylabels, 12) + 34, 22, c.width - 14.0, c.height - 46.0};
  const Scale sx(bins.lo, bins.hi, p.left, p.right), sy(yt.lo, yt.hi, p.bottom, p.top);
  std::string svg = svg_open(c.width, c.height, c.title);
  y_axis(svg, p, sy, yt, ylabels, "steps");
  const std::string color = style_color(c.style);
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] == 0) continue;
    const double a = bins.lo + bins.step * static_cast<double>(i), b = a + bins.step;
    svg += "<rect class=\"mark bin\" data-count=\"" + std::to_string(counts[i]) + "\" x=\"" +
           px(sx(a) + 0.5) + "\" y=\"" + px(sy(static_cast<double>(counts[i]))) + "\" width=\"" +
           px(std::max(sx(b) - sx(a) - 1, 1.0)) + "\" height=\"" +
           px(sy(0) - sy(static_cast<double>(counts[i]))) + "\" fill=\"" + color + "\">" +
           tooltip(tick_label(a, bins.step) + "–" + tick_label(b, bins.step) + ": " +
                   std::to_string(counts[i]) + " steps") +
           "</rect>";
  }
  x_axis(svg, p, sx, xt, tick_labels(xt, false), c.x_label, false);
  const double m = median(values);
  svg += line(sx(m), p.top - 4, sx(m), p.bottom, "median");
  svg += text(sx(m), p.top - 8, "median " + short_number(m), "median-label", "middle");
  return figure(c.title, svg + "</svg>", {}, "");
}

// --- Stylesheet ---------------------------------------------------------------------------

const char* chart_css() {
  return R"css(
figure.chart { margin: 0; min-width: 0; }
figure.chart figcaption { font-weight: 600; font-size: 14px; margin: 0 0 8px; color: #222; }
svg.chart { display: block; max-width: 100%; height: auto; overflow: visible; }
svg.chart text { font-size: 12px; fill: #555; }
svg.chart text.axis-label { fill: #333; }
svg.chart text.category { fill: #333; }
svg.chart text.value { fill: #333; font-variant-numeric: tabular-nums; }
svg.chart text.median-label { font-size: 11px; fill: #333; }
svg.chart .grid { stroke: #ececec; }
svg.chart .axis { stroke: #9a9a9a; }
svg.chart .whisker { stroke: #333; stroke-width: 1.3; }
svg.chart .reference { stroke: #333; stroke-width: 1.2; stroke-dasharray: 4 3; }
svg.chart .median { stroke: #222; stroke-width: 1.2; stroke-dasharray: 3 2; }
svg.chart .mark.point { stroke: #fff; stroke-width: 1; }
svg.chart .mark:hover { opacity: 0.75; }
svg.swatch { flex: none; }
svg.swatch .reference { stroke: #333; stroke-width: 1.2; stroke-dasharray: 3 2; }
ul.legend { list-style: none; display: flex; flex-wrap: wrap; gap: 4px 16px; padding: 0;
            margin: 8px 0 0; font-size: 12px; color: #333; }
ul.legend li { display: flex; align-items: center; gap: 6px; }
p.note { font-size: 12px; color: #666; margin: 6px 0 0; }
p.empty { font-size: 13px; color: #777; font-style: italic; margin: 4px 0;
          padding: 18px; background: #fafafa; border: 1px dashed #ddd; border-radius: 6px; }
)css";
}

}  // namespace xrun::report
