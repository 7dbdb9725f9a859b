// engine/loss_scaler.h: dynamic loss scaling with PyTorch GradScaler's
// semantics, as plain host logic (unit-tested on CI; the CUDA engine calls it
// once per step with the inf/NaN flag its gradient check produced). fp16
// only: start at 65536; an overflow halves the scale and the step is
// skipped; 2000 clean steps in a row double it.
#pragma once

#include <cstdint>

namespace xrun {

struct LossScalerConfig {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

class LossScaler {
 public:
  explicit LossScaler(bool enabled, LossScalerConfig cfg = {});
  bool enabled() const { return enabled_; }
  double scale() const { return scale_; }  // 1 when disabled
  // After a step's gradients were checked. Returns whether the optimizer step
  // was applied (false: skipped on inf/NaN).
  bool update(bool found_inf);
  int64_t skipped_steps() const { return skipped_; }
  int64_t growth_tracker() const { return tracker_; }
  // For checkpoints: restore the scaler exactly.
  void restore(double scale, int64_t growth_tracker);

 private:
  bool enabled_;
  LossScalerConfig cfg_;
  double scale_;
  int64_t tracker_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace xrun
