// engine/step_stats.h: headline figures from the per-step records, as the
// measurement principles say: warmup never counts; throughput = images / wall
// time over the measured steps; median, p10/p90 of step times; outliers
// flagged by median absolute deviation (hyperfine's rule).
#pragma once

#include <span>
#include <vector>

#include "engine/records.h"

namespace xrun {

// Fills the step-derived fields of a RunSummary from `steps` (all kinds; only
// measured ones count). Leaves memory, accuracy and batch fields alone.
void summarize_steps(std::span<const StepRecord> steps, RunSummary& summary);

// The q-quantile (0..1) of `values` by linear interpolation (numpy's default).
double quantile(std::vector<double> values, double q);

// Outliers: |x - median| > 5 * 1.4826 * MAD.
int64_t count_outliers(const std::vector<double>& values);

}  // namespace xrun
