// engine/schedule.h: the learning rate at each optimizer step: constant,
// cosine (reaching min_lr at the last step) or step decay (x gamma every
// step_size steps), after an optional linear warmup (lr * (step+1) /
// warmup_steps for the first warmup_steps steps).
#pragma once

#include <cstdint>

#include "core/config.h"

namespace xrun {

// lr for 0-based `step` of `total_steps`.
double learning_rate(const ScheduleConfig& schedule, double base_lr, int64_t step,
                     int64_t total_steps);

}  // namespace xrun
