// runner/report/report_charts.cpp: the chart sections of the report:
// throughput by batch size, speedup against a baseline, loss and accuracy
// curves, accuracy against wall time and images with the time to a target,
// the roofline of each run's timed layers, step-time histograms, phase
// breakdown and top kernels. Each turns
// ReportData into the chart structs of svg_chart.h and wraps them in a card.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "core/phase.h"
#include "runner/report/report_sections.h"
#include "runner/roofline.h"
#include "runner/report/svg_chart.h"

namespace xrun::report::sections {

namespace {

std::string run_ids(const std::vector<const ReportRun*>& runs) {
  std::vector<int64_t> ids;
  for (const ReportRun* r : runs) ids.push_back(r->detail.info.id);
  return run_tags(ids);
}

std::string plural(size_t n, const std::string& word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

std::string grid(const std::vector<std::string>& figures, const char* cls) {
  std::string out = std::string("<div class=\"") + cls + "\">";
  for (const std::string& f : figures) out += f;
  return out + "</div>";
}

std::string note(const std::string& text) { return "<p class=\"note\">" + escape(text) + "</p>"; }

}  // namespace

// --- Throughput by batch size ---------------------------------------------------------

namespace {

using SeriesKey = std::pair<std::string, std::string>;  // device_name, precision
using RunsByBatch = std::map<int, std::vector<const ReportRun*>>;

std::string series_name(const SeriesKey& key) {
  const std::string device = key.first.empty() ? "unknown device" : short_device_name(key.first);
  return key.second.empty() ? device : device + " · " + key.second;
}

// The mean throughput of the runs at one batch size.
Point throughput_point(const std::string& series, int batch,
                       const std::vector<const ReportRun*>& runs) {
  double sum = 0;
  for (const ReportRun* r : runs) sum += r->detail.info.throughput;
  const double mean = sum / static_cast<double>(runs.size());
  std::vector<const store::RunInfo*> infos;
  for (const ReportRun* r : runs) infos.push_back(&r->detail.info);
  std::string tip = series + ", batch " + std::to_string(batch) + ": " + short_number(mean) + " " +
                    store::throughput_label(infos) + " (" + (runs.size() > 1 ? "mean of " : "run ") +
                    run_ids(runs) + ")";
  return {static_cast<double>(batch), mean, tip};
}

}  // namespace

std::string throughput(const ReportData& data) {
  std::map<SeriesKey, RunsByBatch> by_series;
  std::set<int> batches;
  std::vector<const store::RunInfo*> shown;
  for (const ReportRun& r : data.runs) {
    const store::RunInfo& i = r.detail.info;
    if (i.status != "complete" || !(i.throughput > 0) || i.batch_size <= 0) continue;
    by_series[{i.device_name, i.precision}][i.batch_size].push_back(&r);
    batches.insert(i.batch_size);
    shown.push_back(&i);
  }
  const std::string unit = store::throughput_label(shown);
  LineChart c;
  c.title = "Throughput by batch size";
  c.x = {unit == "img/s" ? "batch size (images per step, log scale)"
                         : "batch size (sequences per step, log scale)",
         true, {batches.begin(), batches.end()}};
  c.y = {"throughput (" + unit + ")", false, {}, true};
  bool sweep = false;
  for (const auto& [key, runs] : by_series) {
    Series s{series_name(key), c.series.size(), {}};
    for (const auto& [batch, at_batch] : runs)
      s.points.push_back(throughput_point(s.name, batch, at_batch));
    sweep = sweep || s.points.size() > 1;
    c.series.push_back(std::move(s));
  }
  if (!sweep) c.series.clear();
  c.empty_text = by_series.empty() ? "No complete runs with a measured throughput."
                                   : "No batch-size sweep in these runs: each device and precision "
                                     "ran one batch size (the runs table has their throughput).";
  c.note = "One line per device and precision; several runs at one point are averaged.";
  return card("throughput", "Throughput",
              "Images per second over the measured steps of complete runs.", render_line_chart(c));
}

// --- Speedup against the baseline -------------------------------------------------------

namespace {

std::string compared_value(const std::string& by, const std::string& value) {
  if (by == "device") return short_device_name(value);
  if (by == "label") return value.empty() ? "(no label)" : value;
  return setting_text(by, value);
}

std::string group_text(const analysis::CompareGroup& g) {
  std::string out;
  for (const auto& [key, value] : g.settings)
    if (!value.empty()) out += (out.empty() ? "" : " · ") + compared_value(key, value);
  return out;
}

const analysis::CompareCell* baseline_cell(const analysis::CompareGroup& g) {
  for (const auto& cell : g.cells)
    if (cell.is_baseline) return &cell;
  return nullptr;
}

Bar speedup_bar(const analysis::Comparison& cmp, const analysis::CompareGroup& g,
                const analysis::CompareCell& cell, const analysis::CompareCell& base) {
  const std::string value = compared_value(cmp.by, cell.value), settings = group_text(g);
  const auto at = std::find(cmp.values.begin(), cmp.values.end(), cell.value);
  Bar b;
  // With one value against the baseline, the legend names it; the bars name their settings.
  const bool one_value = cmp.values.size() == 2 && !settings.empty();
  b.label = one_value ? settings : settings.empty() ? value : value + " · " + settings;
  b.value = cell.ratio;
  b.lo = cell.ratio_lo;
  b.hi = cell.ratio_hi;
  b.style = static_cast<size_t>(at - cmp.values.begin());
  b.muted = cell.interval_includes_one;
  b.value_text = short_number(cell.ratio) + "×";
  b.tip = value + " vs " + compared_value(cmp.by, base.value) +
          (settings.empty() ? "" : " (" + settings + ")") + ": " + short_number(cell.ratio) +
          "× (95% interval " + short_number(cell.ratio_lo) + "–" + short_number(cell.ratio_hi) +
          "), " + short_number(cell.throughput) + " vs " + short_number(base.throughput) +
          " " + cmp.throughput_label + (cell.interval_includes_one ? "; no clear difference" : "");
  return b;
}

std::vector<LegendEntry> speedup_legend(const analysis::Comparison& cmp) {
  std::vector<LegendEntry> legend;
  for (size_t v = 0; v < cmp.values.size(); ++v)
    if (cmp.values[v] != cmp.baseline) legend.push_back({compared_value(cmp.by, cmp.values[v]), v});
  legend.push_back(
      {"95% interval includes 1 (no clear difference)", 7, LegendEntry::Kind::muted_box});
  legend.push_back({"baseline " + compared_value(cmp.by, cmp.baseline) + " = 1", 0,
                    LegendEntry::Kind::reference});
  return legend;
}

}  // namespace

std::string speedup(const ReportData& data) {
  const analysis::Comparison& cmp = data.comparison;
  BarChart c;
  c.title = "Speedup over " + compared_value(cmp.by, cmp.baseline) + " (by " + cmp.by + ")";
  c.value_label = "throughput ratio (× baseline)";
  c.reference = 1;
  for (const analysis::CompareGroup& g : cmp.groups) {
    const analysis::CompareCell* base = baseline_cell(g);
    if (base == nullptr) continue;
    for (const analysis::CompareCell& cell : g.cells)
      if (!cell.is_baseline && std::isfinite(cell.ratio))
        c.bars.push_back(speedup_bar(cmp, g, cell, *base));
  }
  c.legend = speedup_legend(cmp);
  c.note = "Error bars: 95% bootstrap interval of the ratio, from the measured step times.";
  if (!cmp.unmatched.empty())
    c.note += " Not compared: " + plural(cmp.unmatched.size(), "complete run") +
              " without a counterpart.";
  c.empty_text =
      "No runs to compare by " + cmp.by + ": no two complete runs differ in " + cmp.by +
      " alone. Choose the key with --by (label, device or a setting such as train.precision).";
  return card("speedup", "Speedup",
              "Throughput against the baseline run with the same settings; pale bars are not "
              "clearly faster or slower.",
              render_bar_chart(c));
}

// --- Loss and accuracy ---------------------------------------------------------------------

namespace {

constexpr size_t kMaxLinePoints = 1500;

// At most kMaxLinePoints points: means of consecutive runs of points.
std::vector<Point> thin(std::vector<Point> points, bool& thinned) {
  if (points.size() <= kMaxLinePoints) return points;
  thinned = true;
  const size_t k = (points.size() + kMaxLinePoints - 1) / kMaxLinePoints;
  std::vector<Point> out;
  for (size_t i = 0; i < points.size(); i += k) {
    const size_t end = std::min(points.size(), i + k);
    Point m;
    for (size_t j = i; j < end; ++j) m.x += points[j].x, m.y += points[j].y;
    m.x /= static_cast<double>(end - i);
    m.y /= static_cast<double>(end - i);
    out.push_back(m);
  }
  return out;
}

Series loss_series(const ReportRun& r, bool& thinned) {
  std::vector<Point> points;
  for (const StepRecord& s : r.steps)
    if (s.kind != StepKind::warmup && std::isfinite(s.loss))
      points.push_back({static_cast<double>(s.step), s.loss, {}});
  return {r.name, r.style, thin(std::move(points), thinned)};
}

Series accuracy_series(const ReportRun& r) {
  Series s{r.name, r.style, {}};
  for (const EpochRecord& e : r.detail.epochs)
    if (std::isfinite(e.test_accuracy))
      s.points.push_back({e.epoch + 1.0, 100.0 * e.test_accuracy,
                          r.name + ", epoch " + std::to_string(e.epoch + 1) + ": " +
                              short_number(100.0 * e.test_accuracy) + "%"});
  return s;
}

}  // namespace

std::string training(const ReportData& data) {
  LineChart loss;
  loss.title = "Training loss by step";
  loss.x = {"step", false, {}, false, true};
  loss.y = {"loss", false, {}};
  loss.markers = false;
  loss.empty_text = "No losses stored in these runs.";
  LineChart accuracy;
  accuracy.title = "Test accuracy by epoch";
  accuracy.x = {"epoch", false, {}, false, true};
  accuracy.y = {"test accuracy (%)", false, {}};
  accuracy.empty_text = "No test accuracy in these runs (no evaluation ran).";
  loss.legend = accuracy.legend = false;  // one legend below both
  bool thinned = false;
  std::vector<LegendEntry> legend;
  for (const ReportRun& r : data.runs) {
    loss.series.push_back(loss_series(r, thinned));
    accuracy.series.push_back(accuracy_series(r));
    if (!loss.series.back().points.empty() || !accuracy.series.back().points.empty())
      legend.push_back({r.name, r.style, LegendEntry::Kind::line});
  }
  if (thinned) loss.note = "Long runs are drawn as means of consecutive steps.";
  return card("training", "Training",
              "Loss of the measured and unmeasured steps (warmup left out) and top-1 test accuracy "
              "at each epoch's end.",
              "<div class=\"grid two\">" + render_line_chart(loss) + render_line_chart(accuracy) +
                  "</div>" + render_legend(legend));
}

// --- Convergence: accuracy against wall time and images, time to target ---------------------

namespace {

// Test accuracy at each evaluation, against its wall time or its images seen.
Series eval_series(const ReportRun& r, bool by_images) {
  Series s{r.name, r.style, {}};
  for (const EvalRecord& e : r.detail.evals)
    if (std::isfinite(e.test_accuracy))
      s.points.push_back({by_images ? static_cast<double>(e.images) : e.wall_seconds,
                          100.0 * e.test_accuracy,
                          r.name + ", step " + std::to_string(e.step) + ": " +
                              short_number(100.0 * e.test_accuracy) + "% after " +
                              short_number(e.wall_seconds) + " s and " +
                              std::to_string(e.images) + " images"});
  return s;
}

// Runs with a target: those that reached it by time to it, then the others
// by their best accuracy.
std::vector<const ReportRun*> ranked_by_time_to_target(const ReportData& data) {
  std::vector<const ReportRun*> out;
  for (const ReportRun& r : data.runs)
    if (std::isfinite(r.detail.summary.target_accuracy)) out.push_back(&r);
  std::stable_sort(out.begin(), out.end(), [](const ReportRun* a, const ReportRun* b) {
    const RunSummary &x = a->detail.summary, &y = b->detail.summary;
    const bool rx = std::isfinite(x.time_to_target_s), ry = std::isfinite(y.time_to_target_s);
    if (rx != ry) return rx;
    if (rx) return x.time_to_target_s < y.time_to_target_s;
    return x.best_accuracy > y.best_accuracy;
  });
  return out;
}

std::string td(const std::string& text, bool numeric = true) {
  return std::string(numeric ? "<td class=\"num\">" : "<td>") + escape(text) + "</td>";
}

std::string target_table(const std::vector<const ReportRun*>& ranked) {
  std::string out =
      "<div class=\"scroll\"><table class=\"targets\"><thead><tr><th>run</th>"
      "<th class=\"num\">target %</th><th class=\"num\">time to target (s)</th>"
      "<th class=\"num\">of which eval (s)</th><th class=\"num\">steps</th>"
      "<th class=\"num\">epochs</th><th class=\"num\">images</th>"
      "<th class=\"num\">best %</th></tr></thead><tbody>";
  for (const ReportRun* r : ranked) {
    const RunSummary& s = r->detail.summary;
    const bool reached = std::isfinite(s.time_to_target_s);
    out += "<tr data-run=\"" + std::to_string(r->detail.info.id) + "\">" + td(r->name, false) +
           td(short_number(100.0 * s.target_accuracy)) +
           td(reached ? short_number(s.time_to_target_s) : "not reached") +
           td(reached ? short_number(s.time_to_target_eval_s) : "-") +
           td(reached ? std::to_string(s.steps_to_target) : "-") +
           td(reached ? short_number(s.epochs_to_target) : "-") +
           td(reached ? std::to_string(s.images_to_target) : "-") +
           td(short_number(100.0 * s.best_accuracy)) + "</tr>";
  }
  return out + "</tbody></table></div>";
}

}  // namespace

std::string convergence(const ReportData& data) {
  LineChart by_time;
  by_time.title = "Test accuracy by wall time";
  by_time.x = {"wall time from the first step, evaluations included (s)", false, {}, true};
  by_time.y = {"test accuracy (%)", false, {}};
  by_time.empty_text = "No evaluations stored in these runs.";
  LineChart by_images = by_time;
  by_images.title = "Test accuracy by images seen";
  by_images.x = {"training images seen", false, {}, true};
  by_time.legend = by_images.legend = false;
  std::vector<LegendEntry> legend;
  for (const ReportRun& r : data.runs) {
    by_time.series.push_back(eval_series(r, false));
    by_images.series.push_back(eval_series(r, true));
    if (!by_time.series.back().points.empty())
      legend.push_back({r.name, r.style, LegendEntry::Kind::line});
  }
  const std::vector<const ReportRun*> ranked = ranked_by_time_to_target(data);
  const std::string table =
      ranked.empty() ? note("No run set measure.target_accuracy: set it to rank runs by the time "
                            "to a test accuracy.")
                     : target_table(ranked);
  return card("convergence", "Convergence",
              "Test accuracy at every evaluation (epoch ends and train.eval_every), against the "
              "wall time from the first step and against the training images seen; the runs "
              "with a target accuracy ranked by the time to reach it.",
              "<div class=\"grid two\">" + render_line_chart(by_time) +
                  render_line_chart(by_images) + "</div>" + render_legend(legend) + table);
}

// --- Roofline: each timed layer pass against the device's roofs ------------------------------

namespace {

constexpr size_t kForwardStyle = 0, kBackwardStyle = 1, kRoofStyle = 7;

// Powers of ten from below `lo` to above `hi` (both positive): a log axis's ticks.
std::vector<double> decade_ticks(double lo, double hi) {
  std::vector<double> out;
  for (int e = static_cast<int>(std::floor(std::log10(lo)));
       e <= static_cast<int>(std::ceil(std::log10(hi))); ++e)
    out.push_back(std::pow(10.0, e));
  return out;
}

std::string roofline_chart(const ReportRun& r, const analysis::Roofline& roof) {
  LineChart c;
  c.title = "Roofline: " + r.name;
  c.x = {"arithmetic intensity (FLOP/byte)", true, {}};
  c.y = {"GFLOP/s", true, {}};
  c.legend = false;
  Series forward{"forward", kForwardStyle, {}, false};
  Series backward{"backward", kBackwardStyle, {}, false};
  double x0 = roof.ridge, x1 = roof.ridge;
  for (const analysis::RooflinePoint& p : roof.points) {
    if (!(p.intensity > 0) || !(p.achieved > 0)) continue;
    x0 = std::min(x0, p.intensity);
    x1 = std::max(x1, p.intensity);
    (p.phase == "forward" ? forward : backward)
        .points.push_back({p.intensity, p.achieved / 1e9,
                           p.layer + " " + p.phase + ": " + short_number(p.achieved / 1e9) +
                               " GFLOP/s at " + short_number(p.intensity) + " FLOP/byte, " +
                               short_number(100.0 * p.achieved / p.roof) + "% of its roof, " +
                               short_number(p.ms) + " ms"});
  }
  x0 /= 2, x1 *= 2;
  // The roofs: bandwidth up to the ridge point, compute after it.
  Series roofs{"roofs", kRoofStyle, {}, true, false};
  roofs.points = {{x0, x0 * roof.peak_bytes_per_s / 1e9, "memory roof: " +
                       short_number(roof.peak_bytes_per_s / 1e9) + " GB/s"},
                  {roof.ridge, roof.peak_flops / 1e9, "ridge point: " + short_number(roof.ridge) +
                       " FLOP/byte"},
                  {x1, roof.peak_flops / 1e9, "compute roof: " +
                       short_number(roof.peak_flops / 1e9) + " GFLOP/s"}};
  c.series = {roofs, forward, backward};
  double y0 = roofs.points.front().y, y1 = roof.peak_flops / 1e9;
  for (const Series* dots : {&forward, &backward})
    for (const Point& p : dots->points) y0 = std::min(y0, p.y), y1 = std::max(y1, p.y);
  c.x.ticks = decade_ticks(x0, x1);
  c.y.ticks = decade_ticks(y0, y1);
  c.note = short_number(100.0 * roof.memory_bound_ms / roof.ms) +
           "% of the layer time in memory-bound passes (left of the ridge).";
  return render_line_chart(c);
}

}  // namespace

std::string roofline(const ReportData& data) {
  std::vector<std::string> charts;
  for (const ReportRun& r : data.runs) {
    const store::RunDetail& d = r.detail;
    const analysis::Roofline roof = analysis::make_roofline(d.kernels, d.layer_costs, d.summary);
    if (!roof.points.empty() && std::isfinite(roof.ridge)) charts.push_back(roofline_chart(r, roof));
  }
  const std::string body =
      charts.empty()
          ? note("No run timed its layers (profile.layers = true) on a device with a known peak "
                 "(CPU: xrun doctor --peak).")
          : grid(charts, "grid two") +
                render_legend({{"forward", kForwardStyle, LegendEntry::Kind::box},
                               {"backward", kBackwardStyle, LegendEntry::Kind::box},
                               {"roofs (memory, then compute)", kRoofStyle,
                                LegendEntry::Kind::line}});
  return card("roofline", "Roofline",
              "Each timed layer pass per micro-batch: its FLOP/s against its arithmetic intensity "
              "(FLOPs over the least bytes it must move), under the device's memory and compute "
              "roofs (log-log).",
              body);
}

// --- Step-time distribution -----------------------------------------------------------------

std::string step_times(const ReportData& data) {
  std::vector<std::string> figures;
  std::vector<const ReportRun*> without;
  for (const ReportRun& r : data.runs) {
    Histogram h;
    h.title = r.name;
    h.x_label = "step time (ms)";
    h.style = r.style;
    for (const StepRecord& s : r.steps)
      if (s.kind == StepKind::measured) h.values.push_back(s.step_ms);
    if (std::none_of(h.values.begin(), h.values.end(), [](double v) { return std::isfinite(v); }))
      without.push_back(&r);
    else
      figures.push_back(render_histogram(h));
  }
  std::string body = figures.empty() ? "<p class=\"empty\">No measured steps in these runs.</p>"
                                     : grid(figures, "grid three");
  if (!figures.empty() && !without.empty())
    body += note("No measured steps: " + run_ids(without) + ".");
  return card("step-times", "Step time distribution",
              "Wall time of each measured step (warmup left out); the dashed line is the median.",
              body);
}

// --- Phases and kernels -----------------------------------------------------------------------

namespace {

// Every phase of the phases and kernels tables, in the order a step runs them.
std::vector<std::string> phase_keys(const ReportData& data) {
  std::vector<std::string> keys = {"data_wait", "h2d",   "forward", "backward",  "optimizer",
                                   "sync",      "graph", "eval",    "checkpoint"};
  std::set<std::string> seen;
  for (const ReportRun& r : data.runs) {
    for (const PhaseRecord& p : r.detail.phases) seen.insert(p.phase);
    for (const KernelRecord& k : r.detail.kernels) seen.insert(k.phase.empty() ? "other" : k.phase);
  }
  std::erase_if(keys, [&](const std::string& k) { return !seen.contains(k); });
  for (const std::string& k : seen)
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
  return keys;
}

size_t key_index(const std::vector<std::string>& keys, const std::string& key) {
  return static_cast<size_t>(std::find(keys.begin(), keys.end(), key) - keys.begin());
}

// Phases of a training step (eval and checkpoint happen between epochs).
bool in_step(const PhaseRecord& p) { return is_step_phase_name(p.phase); }

// One bar of a run's phase times per step: host (gpu = false) time over the
// measured steps, or device time over the CUPTI-traced steps. Means (the
// stored phase totals over the step count), outliers included: the bar can
// be longer than the run's median step, so it says mean, and its tips give
// the median beside it.
StackedBar phase_bar(const ReportRun& r, const std::vector<std::string>& keys, bool gpu) {
  StackedBar b{gpu ? r.name + " · GPU" : r.name, std::vector<double>(keys.size(), 0.0),
               std::vector<std::string>(keys.size())};
  const RunSummary& s = r.detail.summary;
  const int64_t steps = gpu && s.cupti_steps > 0 ? s.cupti_steps : s.measured_steps;
  const double per_step = steps > 0 ? 1.0 / static_cast<double>(steps) : 1.0;
  double total = 0;
  for (const PhaseRecord& p : r.detail.phases)
    if (in_step(p)) total += (gpu ? p.gpu_ms : p.host_ms) * per_step;
  for (const PhaseRecord& p : r.detail.phases) {
    if (!in_step(p)) continue;
    const size_t k = key_index(keys, p.phase);
    const double ms = (gpu ? p.gpu_ms : p.host_ms) * per_step;
    b.values[k] = ms;
    b.tips[k] = r.name + " " + p.phase + (gpu ? " (GPU): " : ": ") + short_number(ms) +
                " ms per step (mean), " + short_number(total > 0 ? 100.0 * ms / total : 0.0) +
                "%; the median step took " + short_number(s.step_ms_median) + " ms";
  }
  return b;
}

bool has_gpu_times(const ReportRun& r) {
  return std::any_of(r.detail.phases.begin(), r.detail.phases.end(),
                     [](const PhaseRecord& p) { return p.gpu_ms > 0; });
}

}  // namespace

std::string phases(const ReportData& data) {
  StackedBarChart c;
  c.title = "Mean time per step, by phase";
  c.value_label = "mean time per step (ms)";
  c.value_unit = " ms";
  c.keys = phase_keys(data);
  for (const ReportRun& r : data.runs) {
    if (r.detail.phases.empty()) continue;
    c.bars.push_back(phase_bar(r, c.keys, false));
    if (has_gpu_times(r)) c.bars.push_back(phase_bar(r, c.keys, true));
  }
  c.note = "Mean host wall time per measured step, outliers included, so a bar can be longer "
           "than the median step the summary gives (eval and checkpoint, between epochs, left "
           "out)";
  c.note += std::any_of(data.runs.begin(), data.runs.end(), has_gpu_times)
                ? "; \"GPU\" bars: kernel and copy time per CUPTI-traced step."
                : ".";
  c.empty_text = "No phase times stored in these runs.";
  return card("phases", "Phase breakdown", "Where each run's time goes, phase by phase.",
              render_stacked_bars(c));
}

namespace {

constexpr size_t kTopKernels = 10;

std::string kernel_chart(const ReportRun& r, const std::vector<std::string>& keys) {
  std::vector<KernelRecord> top = r.detail.kernels;
  double total = 0;
  for (const KernelRecord& k : top) total += std::isfinite(k.total_ms) ? k.total_ms : 0;
  std::sort(top.begin(), top.end(),
            [](const KernelRecord& a, const KernelRecord& b) { return a.total_ms > b.total_ms; });
  if (top.size() > kTopKernels) top.resize(kTopKernels);
  BarChart c;
  c.title = r.name;
  c.value_label = "total time (ms)";
  c.row_height = 20;
  for (const KernelRecord& k : top) {
    const std::string phase = k.phase.empty() ? "other" : k.phase;
    const double share = total > 0 ? 100.0 * k.total_ms / total : 0;
    // The colour tells the phase; the label says it only for a name shown twice.
    const bool repeated = std::count_if(top.begin(), top.end(), [&](const KernelRecord& o) {
                            return o.name == k.name;
                          }) > 1;
    Bar b;
    b.label = repeated ? k.name + " (" + phase + ")" : k.name;
    b.value = k.total_ms;
    b.style = key_index(keys, phase);
    b.value_text = short_number(k.total_ms) + " ms · " + short_number(share) + "%";
    b.tip = k.name + " " + phase + ": " + short_number(k.total_ms) + " ms over " +
            plural(static_cast<size_t>(k.calls), "call") + " (" + short_number(share) +
            "% of the run's kernel time)";
    c.bars.push_back(std::move(b));
  }
  if (r.detail.kernels.size() > kTopKernels)
    c.note = "Top " + std::to_string(kTopKernels) + " of " +
             std::to_string(r.detail.kernels.size()) + ".";
  return render_bar_chart(c);
}

// The phases the kernel charts colour, as one legend.
std::string kernel_legend(const ReportData& data, const std::vector<std::string>& keys) {
  std::set<size_t> shown;
  for (const ReportRun& r : data.runs)
    for (const KernelRecord& k : r.detail.kernels)
      shown.insert(key_index(keys, k.phase.empty() ? "other" : k.phase));
  std::vector<LegendEntry> legend;
  for (size_t s : shown) legend.push_back({keys[s], s});
  return "<div class=\"section-legend\">" + render_legend(legend) + "</div>";
}

}  // namespace

std::string kernels(const ReportData& data) {
  const std::vector<std::string> keys = phase_keys(data);
  std::vector<std::string> figures;
  std::vector<const ReportRun*> without;
  for (const ReportRun& r : data.runs) {
    if (r.detail.kernels.empty())
      without.push_back(&r);
    else
      figures.push_back(kernel_chart(r, keys));
  }
  std::string body =
      figures.empty()
          ? "<p class=\"empty\">No kernel or layer times in these runs "
            "(profile.layers = true times each layer: on a GPU with profile.cupti, which also "
            "records the kernels).</p>"
          : kernel_legend(data, keys) + grid(figures, "grid two");
  if (!figures.empty() && !without.empty())
    body += note("No kernel or layer times: " + run_ids(without) + ".");
  return card("kernels", "Top kernels and layers",
              "The kernels (GPU) or layers (CPU) that took the most time over the measured steps, "
              "coloured by phase.",
              body);
}

}  // namespace xrun::report::sections
