// engine/loss_scaler.cpp: see loss_scaler.h.
#include "engine/loss_scaler.h"

namespace xrun {

LossScaler::LossScaler(bool enabled, LossScalerConfig cfg)
    : enabled_(enabled), cfg_(cfg), scale_(enabled ? cfg.init_scale : 1.0) {}

bool LossScaler::update(bool found_inf) {
  if (!enabled_) return !found_inf;
  if (found_inf) {
    scale_ *= cfg_.backoff_factor;
    tracker_ = 0;
    ++skipped_;
    return false;
  }
  if (++tracker_ == cfg_.growth_interval) {
    scale_ *= cfg_.growth_factor;
    tracker_ = 0;
  }
  return true;
}

void LossScaler::restore(double scale, int64_t growth_tracker) {
  if (!enabled_) return;
  scale_ = scale;
  tracker_ = growth_tracker;
}

}  // namespace xrun
