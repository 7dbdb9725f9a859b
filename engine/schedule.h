// engine/schedule.h: the learning rate at each optimizer step: constant,
// cosine (reaching min_lr at the last step) or step decay (x gamma every
// step_size steps), after an optional linear warmup (lr * (step+1) /
// warmup_steps for the first warmup_steps steps); and the peak learning rate
// scaled to the run's batch (train.optimizer.lr_scaling).
#pragma once

#include <cstdint>

#include "core/config.h"

namespace xrun {

// lr for 0-based `step` of `total_steps`.
double learning_rate(const ScheduleConfig& schedule, double base_lr, int64_t step,
                     int64_t total_steps);

// The peak learning rate for `images_per_step` (batch x accumulate):
// optimizer.lr x (images_per_step / reference_batch) for "linear", x its
// square root for "sqrt", optimizer.lr for "none". Throws
// std::invalid_argument for another rule.
double scaled_lr(const OptimizerConfig& optimizer, int64_t images_per_step);

}  // namespace xrun
