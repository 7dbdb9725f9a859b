// engine/schedule.cpp: see schedule.h.
#include "engine/schedule.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace xrun {

double learning_rate(const ScheduleConfig& s, double base_lr, int64_t step, int64_t total_steps) {
  if (s.warmup_steps > 0 && step < s.warmup_steps)
    return base_lr * static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps);
  const int64_t t = step - s.warmup_steps;  // steps since warmup ended
  if (s.name == "constant") return base_lr;
  if (s.name == "cosine") {
    const int64_t span = std::max<int64_t>(1, total_steps - s.warmup_steps - 1);
    const double progress = std::min(1.0, static_cast<double>(t) / static_cast<double>(span));
    return s.min_lr + 0.5 * (base_lr - s.min_lr) * (1.0 + std::cos(M_PI * progress));
  }
  if (s.name == "step") {
    const int64_t size = std::max<int64_t>(1, s.step_size);
    return base_lr * std::pow(s.gamma, static_cast<double>(t / size));
  }
  throw std::invalid_argument("unknown schedule '" + s.name + "'");
}

double scaled_lr(const OptimizerConfig& o, int64_t images_per_step) {
  const double ratio = static_cast<double>(images_per_step) /
                       static_cast<double>(std::max<int64_t>(1, o.reference_batch));
  if (o.lr_scaling == "none") return o.lr;
  if (o.lr_scaling == "linear") return o.lr * ratio;
  if (o.lr_scaling == "sqrt") return o.lr * std::sqrt(ratio);
  throw std::invalid_argument("unknown train.optimizer.lr_scaling '" + o.lr_scaling + "'");
}

}  // namespace xrun
