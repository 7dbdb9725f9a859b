// profiler/phase_timer.h: host wall time per training phase (data_wait, h2d,
// forward, backward, optimizer, eval, checkpoint), summed over the measured
// steps, so every run has a breakdown (on the CPU engine this is the whole
// story; the CUDA engine adds device time from events and CUPTI).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <vector>

#include "engine/records.h"
#include "profiler/nvtx.h"

namespace xrun::profiler {

// graph: a replayed CUDA graph (forward, backward and optimizer in one).
// sync: the wait for the GPU at a step's end, where the next batch's copy is
// issued before it (CUDA, overlapped input); elsewhere that wait ends the
// optimizer (or graph) phase.
enum class Phase {
  data_wait, h2d, forward, backward, optimizer, sync, graph, eval, checkpoint, count
};
const char* phase_name(Phase p);

class PhaseTimer {
 public:
  void add(Phase p, double host_ms) {
    auto& s = slots_[static_cast<size_t>(p)];
    s.calls += 1;
    s.host_ms += host_ms;
  }
  void set_enabled(bool on) { enabled_ = on; }
  bool enabled() const { return enabled_; }
  // Phases that were entered at least once, in pipeline order.
  std::vector<PhaseRecord> records() const;

 private:
  struct Slot {
    int64_t calls = 0;
    double host_ms = 0;
  };
  std::array<Slot, static_cast<size_t>(Phase::count)> slots_{};
  bool enabled_ = true;
};

// A phase of a step: an NVTX range named for it, and its host time into a
// PhaseTimer (when the timer is enabled: measured steps only).
class ScopedPhase {
 public:
  ScopedPhase(PhaseTimer& timer, Phase phase)
      : timer_(timer), phase_(phase), start_(std::chrono::steady_clock::now()) {
    Nvtx::push(phase_name(phase));
  }
  ~ScopedPhase() {
    Nvtx::pop();
    if (!timer_.enabled()) return;
    const auto end = std::chrono::steady_clock::now();
    timer_.add(phase_, std::chrono::duration<double, std::milli>(end - start_).count());
  }
  ScopedPhase(const ScopedPhase&) = delete;
  ScopedPhase& operator=(const ScopedPhase&) = delete;

 private:
  PhaseTimer& timer_;
  Phase phase_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace xrun::profiler
