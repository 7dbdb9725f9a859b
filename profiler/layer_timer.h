// profiler/layer_timer.h: host wall time per model layer and pass
// (profile.layers = true), summed over the measured steps and kept as
// KernelRecords: name = the layer's module path ("layer1.0.conv1"), phase =
// forward | backward. On the CPU engine this is where the time goes inside
// a step; the CUDA engine adds per-kernel device times from CUPTI.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/records.h"

namespace xrun::profiler {

class LayerTimer {
 public:
  void set_enabled(bool on) { enabled_ = on; }
  void set_phase(const char* phase) { phase_ = phase; }
  void begin(const std::string& layer);
  void end();
  // By total time, largest first.
  std::vector<KernelRecord> records() const;

 private:
  bool enabled_ = false;
  const char* phase_ = "forward";
  std::string open_;
  std::chrono::steady_clock::time_point start_;
  std::map<std::pair<std::string, std::string>, KernelRecord> totals_;
};

}  // namespace xrun::profiler
