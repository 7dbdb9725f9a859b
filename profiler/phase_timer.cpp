// profiler/phase_timer.cpp: see phase_timer.h.
#include "profiler/phase_timer.h"

namespace xrun::profiler {

std::vector<PhaseRecord> PhaseTimer::records() const {
  std::vector<PhaseRecord> out;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].calls == 0) continue;
    out.push_back({phase_name(static_cast<Phase>(i)), slots_[i].calls, slots_[i].host_ms, 0.0});
  }
  return out;
}

}  // namespace xrun::profiler
