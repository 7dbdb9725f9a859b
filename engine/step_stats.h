// engine/step_stats.h: headline figures from the per-step records, as the
// measurement principles say: warmup never counts; throughput = images / wall
// time over the measured steps; median, p10/p90 of step times; outliers
// beyond 5 scaled median absolute deviations (core/stats.h).
#pragma once

#include <span>
#include <vector>

#include "core/records.h"

namespace xrun {

// Fills the step-derived fields of a RunSummary from `steps` (all kinds; only
// measured ones count). Leaves memory, accuracy and batch fields alone.
void summarize_steps(std::span<const StepRecord> steps, RunSummary& summary);

// The time-to-target fields of a RunSummary: target_accuracy (a fraction;
// 0 or less: none, the fields stay NaN/0), the first evaluation at or above
// it (its wall and evaluation seconds, steps, steps / steps_per_epoch as
// epochs, images), and the best accuracy of all evaluations.
void summarize_evals(std::span<const EvalRecord> evals, double target_accuracy,
                     int64_t steps_per_epoch, RunSummary& summary);

}  // namespace xrun
