// profiler/layer_timer.cpp: see layer_timer.h.
#include "profiler/layer_timer.h"

#include <algorithm>

namespace xrun::profiler {

void LayerTimer::begin(const std::string& layer) {
  if (!enabled_) return;
  open_ = layer;
  start_ = std::chrono::steady_clock::now();
}

void LayerTimer::end() {
  if (!enabled_ || open_.empty()) return;
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
  KernelRecord& r = totals_[{open_, phase_}];
  if (r.calls == 0) {
    r.name = open_;
    r.phase = phase_;
    r.min_ms = r.max_ms = ms;
  }
  r.calls += 1;
  r.total_ms += ms;
  r.min_ms = std::min(r.min_ms, ms);
  r.max_ms = std::max(r.max_ms, ms);
  open_.clear();
}

std::vector<KernelRecord> LayerTimer::records() const {
  std::vector<KernelRecord> out;
  for (const auto& [key, r] : totals_) out.push_back(r);
  std::sort(out.begin(), out.end(),
            [](const KernelRecord& a, const KernelRecord& b) { return a.total_ms > b.total_ms; });
  return out;
}

}  // namespace xrun::profiler
