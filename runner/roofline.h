// runner/roofline.h: each layer of a run on its device's roofline, from what
// the run stored: the layer's measured time per pass (profile.layers'
// kernel rows: name = layer, phase = forward | backward), its FLOPs and
// least bytes per micro-batch (layer_costs, engine/model/step_flops.h and
// step_bytes.h), and the device's peaks (runs.peak_flops, peak_bytes_per_s).
// Plain arithmetic, no engine: `xrun show`, the report and the memory-bound
// finding all read it.
//
//   achieved FLOP/s   flops / (time per call)
//   intensity         flops / bytes (FLOP per byte)
//   roof              min(peak FLOP/s, intensity x peak bytes/s)
//   memory-bound      intensity below the ridge point (peak FLOP/s / bytes/s)
//   time at the roof  flops / roof: the least time the pass could take
#pragma once

#include <limits>
#include <string>
#include <vector>

#include "core/records.h"

namespace xrun::analysis {

struct RooflinePoint {
  std::string layer;
  std::string phase;        // forward | backward (the costs' backward passes summed)
  int64_t calls = 0;        // timed passes (micro-batches over the measured steps)
  double ms = 0;            // measured time per call
  double flops = 0, bytes = 0;  // per call
  double achieved = 0;      // FLOP/s
  double intensity = 0;     // FLOP per byte
  // NaN where the run stored no peaks.
  double roof = std::numeric_limits<double>::quiet_NaN();
  double ms_at_roof = std::numeric_limits<double>::quiet_NaN();
  bool memory_bound = false;
};

struct Roofline {
  double peak_flops = std::numeric_limits<double>::quiet_NaN();
  double peak_bytes_per_s = std::numeric_limits<double>::quiet_NaN();
  double ridge = std::numeric_limits<double>::quiet_NaN();  // FLOP per byte
  std::vector<RooflinePoint> points;  // in the costs' (forward) layer order, forward then backward
  double ms = 0;                      // all points' time per micro-batch
  double memory_bound_ms = 0;         // of which in memory-bound passes
};

// Layers with a time and a cost; layers timed but without costs (or the
// reverse) are left out. Peaks that are not positive and finite count as
// unknown: no roof, nothing memory-bound.
Roofline make_roofline(const std::vector<KernelRecord>& layer_times,
                       const std::vector<LayerCostRecord>& costs, double peak_flops,
                       double peak_bytes_per_s);
// A run's roofline: its layer times are one rank's (rank 0's), so the roofs
// are one device's peaks, the run's (all ranks') divided by its ranks.
Roofline make_roofline(const std::vector<KernelRecord>& layer_times,
                       const std::vector<LayerCostRecord>& costs, const RunSummary& summary);

// The `n` passes that lose the most time against their roof (ms - ms_at_roof),
// most first; none without peaks.
std::vector<RooflinePoint> furthest_below_roof(const Roofline& r, size_t n);

// The memory-bound finding: where more than `threshold` of the layer time is
// in memory-bound passes, a FindingRecord "memory_bound" (value: that share)
// saying so, naming the largest of them, and what fusing each into its
// neighbour would save by the same arithmetic: the tensor between them no
// longer written and read back, taken as half of the pass's least bytes, at
// the memory roof (at most the pass's measured time). Nothing otherwise, or
// without peaks.
bool memory_bound_finding(const Roofline& r, FindingRecord& out, double threshold = 0.5);

}  // namespace xrun::analysis
