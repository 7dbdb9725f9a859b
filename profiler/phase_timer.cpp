// profiler/phase_timer.cpp: see phase_timer.h.
#include "profiler/phase_timer.h"

namespace xrun::profiler {

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::data_wait: return "data_wait";
    case Phase::h2d: return "h2d";
    case Phase::forward: return "forward";
    case Phase::backward: return "backward";
    case Phase::optimizer: return "optimizer";
    case Phase::sync: return "sync";
    case Phase::graph: return "graph";
    case Phase::eval: return "eval";
    case Phase::checkpoint: return "checkpoint";
    case Phase::count: break;
  }
  return "?";
}

std::vector<PhaseRecord> PhaseTimer::records() const {
  std::vector<PhaseRecord> out;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].calls == 0) continue;
    out.push_back({phase_name(static_cast<Phase>(i)), slots_[i].calls, slots_[i].host_ms, 0.0});
  }
  return out;
}

}  // namespace xrun::profiler
