// profiler/trace.h: a timeline of a window of measured steps
// (profile.cupti = "trace", profile.trace_steps steps): every range the run
// opens in that window (step, phases, layers), with host timestamps, as
// TraceEvents the store keeps and `xrun trace` exports as Chrome trace JSON.
// The ranges are the NVTX ranges (profiler/nvtx.h feeds them here), so the
// trace and Nsight Systems show the same structure. On the GPU, CUPTI's
// kernel and copy records join them on tracks of their own.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/records.h"

namespace xrun::profiler {

class HostTrace {
 public:
  // Starts recording the calling thread's ranges; stop() ends the window.
  static void start();
  static void stop();
  static bool active();
  static void begin(const std::string& name, int64_t payload);
  static void end();
  // The events recorded (completed ranges, in order of their start).
  static std::vector<TraceEvent> take();
};

}  // namespace xrun::profiler
