// profiler/phase_timer.h: host wall time per phase (core/phase.h), summed
// over calls, so every run has a breakdown (on the CPU engine this is the
// whole story; on the GPU, CUPTI adds device time per phase). Which calls
// count is the PhaseTimes observer's rule (profiler/run_observers.h).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/phase.h"
#include "core/records.h"

namespace xrun::profiler {

class PhaseTimer {
 public:
  void add(Phase p, double host_ms) {
    auto& s = slots_[static_cast<size_t>(p)];
    s.calls += 1;
    s.host_ms += host_ms;
  }
  // Phases that were entered at least once, in pipeline order.
  std::vector<PhaseRecord> records() const;

 private:
  struct Slot {
    int64_t calls = 0;
    double host_ms = 0;
  };
  std::array<Slot, static_cast<size_t>(Phase::count)> slots_{};
};

}  // namespace xrun::profiler
