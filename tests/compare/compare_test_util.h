// tests/compare/compare_test_util.h: stores for the compare tests (the
// analysis and the CLI): runs written through the store API with step times
// chosen by the test, and the throughput of those times computed here.
#pragma once

#include <string>
#include <vector>

#include "store/store.h"
#include "store/store_test_util.h"

namespace compare_test {

constexpr int64_t kImages = 64;  // images per step

// `n` step times around `center` ms, spread evenly over +-`spread` of it.
inline std::vector<double> step_times(double center, double spread, int n, int phase = 0) {
  std::vector<double> out;
  for (int i = 0; i < n; ++i)
    out.push_back(center * (1.0 + spread * (((i * 7 + phase) % 11) - 5) / 5.0));
  return out;
}

// Throughput (img/s) of steps of kImages images each, computed here.
inline double expected_throughput(const std::vector<double>& ms) {
  double total = 0;
  for (double t : ms) total += t;
  return 1000.0 * kImages * static_cast<double>(ms.size()) / total;
}

// A run as store_test::make_run describes it (fp16, batch 512 unless told).
inline xrun::store::NewRun labelled(const std::string& label, int batch = 512,
                                    const std::string& precision = "fp16") {
  return store_test::make_run(precision, batch, label);
}

// Stores a run: two slow warmup steps, the measured steps `ms`, one slow
// unmeasured step, then finishes it with `status`; with `flops_per_step`,
// also its measured time, throughput, FLOP count and the device's peak
// (`peak_flops`, 0: none known). Returns its UUID.
inline std::string add_run(xrun::store::Store& db, const xrun::store::NewRun& run,
                           const std::vector<double>& ms,
                           xrun::store::RunStatus status = xrun::store::RunStatus::complete,
                           int64_t peak_memory = 1 << 30, double flops_per_step = 0,
                           double peak_flops = 0) {
  const std::string uuid = db.begin_run(run);
  std::vector<xrun::StepRecord> steps;
  auto add = [&](xrun::StepKind kind, double step_ms) {
    xrun::StepRecord s;
    s.step = static_cast<int64_t>(steps.size());
    s.kind = kind;
    s.step_ms = step_ms;
    s.images = kImages;
    steps.push_back(s);
  };
  add(xrun::StepKind::warmup, 900);
  add(xrun::StepKind::warmup, 700);
  for (double t : ms) add(xrun::StepKind::measured, t);
  add(xrun::StepKind::unmeasured, 5000);
  db.write_steps(uuid, steps);
  xrun::RunSummary summary;
  summary.measured_steps = static_cast<int64_t>(ms.size());
  summary.peak_memory_bytes = peak_memory;
  if (flops_per_step > 0) {  // the efficiency figures, as a run stores them
    double seconds = 0;
    for (double t : ms) seconds += t / 1000.0;
    summary.measured_seconds = seconds;
    summary.measured_images = kImages * static_cast<int64_t>(ms.size());
    summary.throughput = static_cast<double>(summary.measured_images) / seconds;
    summary.flops_per_step = flops_per_step;
    if (peak_flops > 0) summary.peak_flops = peak_flops;
  }
  db.finish_run(uuid, status, summary);
  return uuid;
}

}  // namespace compare_test
