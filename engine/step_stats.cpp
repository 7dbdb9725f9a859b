// engine/step_stats.cpp: see step_stats.h.
#include "engine/step_stats.h"

#include <cmath>

#include "core/stats.h"

namespace xrun {

void summarize_steps(std::span<const StepRecord> steps, RunSummary& s) {
  std::vector<double> times;
  double total_ms = 0, wait_ms = 0;
  int64_t images = 0;
  s.skipped_steps = 0;
  for (const StepRecord& r : steps) {
    if (r.skipped) ++s.skipped_steps;
    if (r.kind != StepKind::measured) continue;
    times.push_back(r.step_ms);
    total_ms += r.step_ms;
    wait_ms += r.data_wait_ms;
    images += r.images;
  }
  s.measured_steps = static_cast<int64_t>(times.size());
  s.measured_images = images;
  s.measured_seconds = total_ms / 1000.0;
  s.throughput = total_ms > 0 ? images / (total_ms / 1000.0) : 0;
  s.step_ms_median = quantile(times, 0.5);
  s.step_ms_p10 = quantile(times, 0.1);
  s.step_ms_p90 = quantile(times, 0.9);
  s.step_ms_mean = times.empty() ? 0 : total_ms / static_cast<double>(times.size());
  double var = 0;
  for (double t : times) var += (t - s.step_ms_mean) * (t - s.step_ms_mean);
  s.step_ms_stddev = times.size() > 1 ? std::sqrt(var / static_cast<double>(times.size() - 1)) : 0;
  s.step_outliers = count_outliers(times);
  s.data_wait_fraction = total_ms > 0 ? wait_ms / total_ms : 0;
}

void summarize_evals(std::span<const EvalRecord> evals, double target_accuracy,
                     int64_t steps_per_epoch, RunSummary& s) {
  for (const EvalRecord& e : evals)
    if (std::isfinite(e.test_accuracy) && !(e.test_accuracy <= s.best_accuracy))
      s.best_accuracy = e.test_accuracy;  // NaN best: the first finite one
  if (!(target_accuracy > 0)) return;
  s.target_accuracy = target_accuracy;
  for (const EvalRecord& e : evals) {
    if (!(e.test_accuracy >= target_accuracy)) continue;
    s.time_to_target_s = e.wall_seconds;
    s.time_to_target_eval_s = e.eval_seconds;
    s.steps_to_target = e.step;
    s.epochs_to_target =
        static_cast<double>(e.step) / static_cast<double>(steps_per_epoch > 0 ? steps_per_epoch : 1);
    s.images_to_target = e.images;
    return;
  }
}

}  // namespace xrun
