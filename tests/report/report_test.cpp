// tests/report/report_test.cpp: the report of a realistic store (two cards,
// two precisions, three batch sizes): balanced markup, nothing fetched,
// every chart's data marks match what the store holds, text escaped, and
// charts with nothing to show saying so.
#include "runner/atomic_file.h"
#include "runner/report/report.h"
#include "runner/report/svg_chart.h"

#include "catch2_compat.h"
#include <cmath>
#include <numeric>
#include <set>

#include "html_check.h"
#include "report_test_util.h"
#include "runner/compare.h"
#include "runner/roofline.h"

using namespace xrun;
using namespace xrun::report;
using report_test::attribute_values;
using report_test::count;
using report_test::figure;
using report_test::markup_problem;
using report_test::section;

namespace {

std::string render(const store::Store& db, ReportOptions options = {}) {
  return render_report(gather_report(db, options));
}

// What the store holds, read back through the store API.
struct Held {
  size_t loss_points = 0, accuracy_points = 0, measured_steps = 0;
  size_t phase_segments = 0, kernel_bars = 0;
};

Held held(const store::Store& db) {
  Held h;
  for (const store::RunInfo& info : db.list_runs()) {
    for (const StepRecord& s : db.get_steps(info.uuid)) {
      h.loss_points += s.kind != StepKind::warmup && std::isfinite(s.loss);
      h.measured_steps += s.kind == StepKind::measured;
    }
    const auto d = db.get_run(info.uuid);
    for (const EpochRecord& e : d->epochs) h.accuracy_points += std::isfinite(e.test_accuracy);
    for (const PhaseRecord& p : d->phases)  // eval and checkpoint are not step phases
      if (p.phase != "eval" && p.phase != "checkpoint")
        h.phase_segments += (p.host_ms > 0) + (p.gpu_ms > 0);
    h.kernel_bars += std::min<size_t>(d->kernels.size(), 10);
  }
  return h;
}

// The sweep store of report_test_util.h and its report, its markup checked.
struct SweepReport {
  store_test::TempDir dir;
  std::string path = dir.file("sweep.db");
  store::Store db{(report_test::build_store(path), path)};
  std::string html = render(db);
  SweepReport() { REQUIRE(markup_problem(html).empty()); }
};

long sum(const std::vector<long>& v) { return std::accumulate(v.begin(), v.end(), 0L); }

}  // namespace

TEST_CASE("report of a sweep on two cards: balanced, self-contained, escaped", "[report]") {
  store_test::TempDir dir;
  const std::string path = dir.file("sweep.db");
  report_test::build_store(path);
  store::Store db(path);
  ReportOptions options;
  options.generated_at = "2025-02-01 10:00 UTC";
  const std::string html = render(db, options);

  CHECK(markup_problem(html) == "");
  CHECK(count(html, "<svg") > 20);
  CHECK(count(html, "<svg") == count(html, "</svg>"));
  // Nothing is fetched: no URL, no external resource, no script.
  for (const char* part : {"http://", "https://", "src=", "href=", "url(", "@import", "<script",
                           "<link", "<img", "<iframe"})
    CHECK(count(html, part) == 0);
  // The header: store, date, number of runs.
  CHECK(count(html, path) >= 1);
  CHECK(count(html, "2025-02-01 10:00 UTC") == 1);
  CHECK(count(html, "<dd>12 (12 complete)</dd>") == 1);
  CHECK(count(section(html, "runs"), "<tr>") == 13);  // header + 12 runs
  // The label with markup characters comes through escaped, never raw.
  CHECK(count(html, "3090 &lt;lab&amp;co&gt;") >= 12);
  CHECK(count(html, "<lab&co>") == 0);
}

TEST_CASE("the runs table shows each run's TFLOP/s and % of peak, '-' where unknown",
          "[report][peak]") {
  store_test::TempDir dir;
  const std::string path = dir.file("sweep.db");
  report_test::build_store(path);
  store::Store db(path);
  const std::string runs = section(render(db), "runs");
  CHECK(count(runs, ">TFLOP/s<") == 1);
  CHECK(count(runs, ">% of peak<") == 1);
  size_t with_peak = 0;
  for (const store::RunInfo& r : db.list_runs()) {
    // The row of run #id: from its tag to the end of the row.
    const std::string tag = ">" + run_tag(r.id) + "<";
    const size_t at = runs.find(tag);
    REQUIRE(at != std::string::npos);
    const std::string row = runs.substr(at, runs.find("</tr>", at) - at);
    INFO(row);
    REQUIRE(std::isfinite(r.achieved_flops));
    CHECK(count(row, ">" + short_number(r.achieved_flops / 1e12) + "<") >= 1);
    if (std::isfinite(r.fraction_of_peak)) {
      ++with_peak;
      CHECK(r.fraction_of_peak == Approx(r.achieved_flops / r.peak_flops));
      CHECK(count(row, ">" + short_number(100.0 * r.fraction_of_peak) + "<") >= 1);
    }
  }
  CHECK(with_peak == 6);  // the 4090 D's six runs
}

TEST_CASE("convergence: accuracy by wall time and by images, runs ranked by time to target",
          "[report][target]") {
  const SweepReport sweep;
  const store::Store& db = sweep.db;
  const std::string conv = section(sweep.html, "convergence");
  size_t points = 0, runs = 0;
  struct Ranked { bool reached; double time, best; int64_t id; };
  std::vector<Ranked> want;
  for (const store::RunInfo& info : db.list_runs()) {
    const auto d = db.get_run(info.uuid);
    size_t finite = 0;
    for (const EvalRecord& e : d->evals) finite += std::isfinite(e.test_accuracy);
    points += finite;
    runs += finite > 0;
    const RunSummary& s = d->summary;
    if (std::isfinite(s.target_accuracy))
      want.push_back({std::isfinite(s.time_to_target_s), s.time_to_target_s, s.best_accuracy, info.id});
  }
  // Two charts, one line per run and one marker per evaluation in each.
  CHECK(count(conv, "class=\"mark line\"") == 2 * runs);
  CHECK(count(conv, "class=\"mark point\"") == 2 * points);
  CHECK(count(conv, "Test accuracy by wall time") > 0);
  CHECK(count(conv, "Test accuracy by images seen") > 0);
  // The runs with a target, reached first by time, then by best accuracy.
  std::stable_sort(want.begin(), want.end(), [](const Ranked& a, const Ranked& b) {
    if (a.reached != b.reached) return a.reached;
    return a.reached ? a.time < b.time : a.best > b.best;
  });
  std::vector<long> order;
  for (const Ranked& r : want) order.push_back(static_cast<long>(r.id));
  CHECK(attribute_values(conv, "<tr data-run", "data-run") == order);
  REQUIRE(want.size() == 6);  // the fp16 runs
  const auto reached = std::count_if(want.begin(), want.end(), [](const Ranked& r) { return r.reached; });
  CHECK(reached > 0);
  CHECK(reached < 6);  // both kinds of row are drawn
  CHECK(count(conv, ">not reached<") == static_cast<size_t>(6 - reached));
}

TEST_CASE("roofline: one chart per run with timed layers and a peak, a point per pass, the roofs",
          "[report][roofline]") {
  const SweepReport sweep;
  const store::Store& db = sweep.db;
  const std::string roof = section(sweep.html, "roofline");
  size_t charts = 0, points = 0;
  for (const ReportRun& run : gather_report(db, {}).runs) {
    const store::RunDetail& d = run.detail;
    const auto r = analysis::make_roofline(d.kernels, d.layer_costs, d.summary.peak_flops,
                                           d.summary.peak_bytes_per_s);
    if (r.points.empty() || !std::isfinite(r.ridge)) continue;
    ++charts;
    points += r.points.size();
    CHECK(count(roof, "Roofline: " + escape(run.name)) > 0);
  }
  CHECK(charts == 3);  // the 4090 D's fp16 runs: timed layers, and a peak
  // One roof line per chart; the passes as markers only (no line), plus the
  // roofs' three corners drawn as none.
  CHECK(count(roof, "class=\"mark line\"") == charts);
  CHECK(count(roof, "class=\"mark point\"") == points);
  CHECK(points == 3 * 4);  // conv2 and bn2, forward and backward; fc has no time
}

TEST_CASE("every chart's data marks match what the store holds", "[report]") {
  store_test::TempDir dir;
  const std::string path = dir.file("sweep.db");
  const auto uuids = report_test::build_store(path);
  store::Store db(path);
  const std::string html = render(db);
  const Held h = held(db);
  const size_t runs = uuids.size();

  // Throughput: one line per (card, precision), a point per batch size.
  const std::string throughput = section(html, "throughput");
  const size_t series = report_test::machines().size() * report_test::precisions().size();
  const long batches = static_cast<long>(report_test::batch_sizes().size());
  CHECK(count(throughput, "class=\"mark line\"") == series);
  CHECK(attribute_values(throughput, "class=\"mark line\"", "data-points") ==
        std::vector<long>(series, batches));
  CHECK(count(throughput, "class=\"mark point\"") == series * static_cast<size_t>(batches));
  for (const char* name :
       {"RTX 4090 D · fp16", "RTX 4090 D · fp32", "RTX 3090 · fp16", "RTX 3090 · fp32"})
    CHECK(count(throughput, name) >= 1);

  // Loss and accuracy: a line per run, every loss read back (warmup and NaN
  // left out), a point per evaluated epoch.
  const std::string training = section(html, "training");
  const std::string loss = figure(training, "Training loss by step");
  CHECK(count(loss, "class=\"mark line\"") == runs);
  CHECK(sum(attribute_values(loss, "class=\"mark line\"", "data-points")) ==
        static_cast<long>(h.loss_points));
  const std::string accuracy = figure(training, "Test accuracy by epoch");
  CHECK(count(accuracy, "class=\"mark line\"") == runs);
  CHECK(count(accuracy, "class=\"mark point\"") == h.accuracy_points);
  CHECK(count(training, "<li>") == runs);  // one legend for both charts

  // Step times: a histogram per run whose bins hold every measured step.
  const std::string steps = section(html, "step-times");
  CHECK(count(steps, "<figure") == runs);
  CHECK(sum(attribute_values(steps, "class=\"mark bin\"", "data-count")) ==
        static_cast<long>(h.measured_steps));

  // Phases: a host bar per run and a device bar per profiled run.
  const std::string phases = section(html, "phases");
  CHECK(count(phases, "class=\"mark segment\"") == h.phase_segments);
  CHECK(count(phases, " · GPU<") == runs / 2);
  // The bars are means (outliers in): they say so, with the median beside.
  CHECK_THAT(phases, Catch::Contains("Mean time per step, by phase"));
  CHECK(count(phases, "ms per step (mean)") == h.phase_segments);
  CHECK(count(phases, "the median step took") == h.phase_segments);

  // Kernels: a chart per run with its top 10.
  const std::string kernels = section(html, "kernels");
  CHECK(count(kernels, "<figure") == runs);
  CHECK(count(kernels, "class=\"mark bar\"") == h.kernel_bars);

  // Environment: one table per machine.
  const std::string env = section(html, "environment");
  CHECK(count(env, "<table class=\"env\">") == report_test::machines().size());
  CHECK(count(env, "on box-4090d") == 1);
  CHECK(count(env, "on box-3090") == 1);
}

TEST_CASE("speedup bars: one per compared cell, pale where the interval includes 1", "[report]") {
  store_test::TempDir dir;
  const std::string path = dir.file("sweep.db");
  report_test::build_store(path);
  store::Store db(path);
  for (const std::string by : {"label", "device"}) {
    INFO("--by " << by);
    ReportOptions options;
    options.by = by;
    const std::string speedup = section(render(db, options), "speedup");
    analysis::CompareOptions compare;
    compare.by = by;
    const analysis::Comparison cmp = analysis::compare_runs(db, compare);
    size_t cells = 0, unclear = 0;
    for (const auto& g : cmp.groups)
      for (const auto& c : g.cells)
        if (!c.is_baseline) ++cells, unclear += c.interval_includes_one;
    CHECK(cells == report_test::precisions().size() * report_test::batch_sizes().size());
    CHECK(unclear >= 1);  // fp32 at batch 64 runs about as fast on both cards
    CHECK(count(speedup, "class=\"mark bar\"") == cells);
    CHECK(count(speedup, "class=\"error-bar\"") == cells);
    CHECK(count(speedup, "stroke-dasharray=\"4 2\"") == unclear);
    CHECK(count(speedup, "class=\"reference\"") >= 1);
  }
  ReportOptions by_device_options;
  by_device_options.by = "device";
  const std::string by_device = section(render(db, by_device_options), "speedup");
  CHECK(count(by_device, "<figcaption>Speedup over RTX 3090 (by device)</figcaption>") == 1);
  CHECK(count(by_device, ">batch_size=256 · fp16</text>") == 1);  // the bar, by its settings
  CHECK(count(by_device, "</svg>RTX 4090 D</li>") == 1);          // the legend names the card
}

TEST_CASE("charts with nothing to show say so in text", "[report]") {
  store_test::TempDir dir;
  const std::string path = dir.file("one.db");
  {
    store::Store db(path);
    const std::string uuid = db.begin_run(store_test::make_run("fp32", 32, "solo"));
    db.finish_run(uuid, store::RunStatus::failed, {}, "out of memory");
  }
  store::Store db(path);
  const std::string html = render(db);
  CHECK(markup_problem(html) == "");
  for (const char* id : {"throughput", "speedup", "training", "step-times", "phases", "kernels"}) {
    INFO("section " << id);
    const std::string s = section(html, id);
    REQUIRE_FALSE(s.empty());
    CHECK(count(s, "<svg class=\"chart\"") == 0);
    CHECK(count(s, "class=\"empty\"") == (std::string(id) == "training" ? 2 : 1));
  }
  CHECK(count(section(html, "throughput"), "No complete runs with a measured throughput") == 1);
}

TEST_CASE("one batch size per card and precision: no sweep to draw", "[report]") {
  store_test::TempDir dir;
  const std::string path = dir.file("sweep.db");
  report_test::build_store(path);
  store::Store db(path);
  ReportOptions options;
  options.where = {{"train.batch_size", "128"}};
  const ReportData data = gather_report(db, options);
  CHECK(data.runs.size() == 4);
  const std::string throughput = section(render_report(data), "throughput");
  CHECK(count(throughput, "No batch-size sweep in these runs") == 1);
  CHECK(count(throughput, "<svg class=\"chart\"") == 0);
}

TEST_CASE("run names list what varies, without a label that mirrors the card", "[report]") {
  store_test::TempDir dir;
  const std::string path = dir.file("sweep.db");
  report_test::build_store(path);
  store::Store db(path);
  const ReportData data = gather_report(db, {});
  std::set<std::string> names;
  for (const ReportRun& r : data.runs) {
    names.insert(r.name);
    CHECK(r.name.find("box") == std::string::npos);  // the label only mirrors the card
  }
  CHECK(names.size() == data.runs.size());
  CHECK(data.runs.front().name == "#1 RTX 4090 D · batch_size=64 · fp32");
}

TEST_CASE("an unknown --by key or baseline is an error naming it", "[report]") {
  store_test::TempDir dir;
  const std::string path = dir.file("sweep.db");
  report_test::build_store(path);
  store::Store db(path);
  ReportOptions bad_key;
  bad_key.by = "train.nonexistent";
  CHECK_THROWS_WITH(gather_report(db, bad_key), Catch::Contains("train.nonexistent"));
  ReportOptions bad_baseline;
  bad_baseline.baseline = "nobody";
  CHECK_THROWS_WITH(gather_report(db, bad_baseline), Catch::Contains("nobody"));
}

TEST_CASE("the report file is written whole or not at all", "[report]") {
  store_test::TempDir dir;
  write_file_atomically(dir.file("r.html"), "<p>one</p>");
  CHECK(xrun_test::read_bytes(dir.file("r.html")) == "<p>one</p>");
  write_file_atomically(dir.file("r.html"), "<p>two</p>");
  CHECK(xrun_test::read_bytes(dir.file("r.html")) == "<p>two</p>");
  // No temporary file left beside it.
  const auto entries = std::distance(std::filesystem::directory_iterator(dir.path()),
                                     std::filesystem::directory_iterator());
  CHECK(entries == 1);
  CHECK_THROWS_WITH(write_file_atomically(dir.file("missing/r.html"), "x"),
                    Catch::Contains("missing/r.html"));
}

TEST_CASE("a long run's loss curve is drawn from means of consecutive steps", "[report]") {
  store_test::TempDir dir;
  const std::string path = dir.file("long.db");
  {
    store::Store db(path);
    const std::string uuid = db.begin_run(store_test::make_run("fp32", 32, "long"));
    std::vector<StepRecord> steps(4000);
    for (size_t i = 0; i < steps.size(); ++i) {
      steps[i].step = static_cast<int64_t>(i);
      steps[i].step_ms = 10;
      steps[i].loss = 2.0 - 0.0004 * static_cast<double>(i);
      steps[i].images = 32;
    }
    db.write_steps(uuid, steps);
    db.finish_run(uuid, store::RunStatus::interrupted, {});
  }
  store::Store db(path);
  const std::string loss = figure(section(render(db), "training"), "Training loss by step");
  const std::vector<long> points = attribute_values(loss, "class=\"mark line\"", "data-points");
  REQUIRE(points.size() == 1);
  CHECK(points[0] <= 1500);
  CHECK(points[0] >= 1000);
  CHECK(count(loss, "means of consecutive steps") == 1);
}
